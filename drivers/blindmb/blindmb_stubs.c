/* blindmb: the machine around hostmem's device, and the queue layer of the
 * mb-* drivers.
 *
 * The machine (process-wide, never torn down):
 *   - each GPU's VRAM is an arena of host memory (mmap, never unmapped), so
 *     that memory kept for the bus stays addressable until the process
 *     exits whatever a driver does;
 *   - the GPU's BAR exposes the first bar bytes of that VRAM to the bus,
 *     through an HDP ("host data path") cache, as on real GPUs:
 *       * writes of a bus function through the BAR are posted into the
 *         HDP's write buffer and reach VRAM only at an HDP flush, which the
 *         driver triggers (bm_hdp_flush, an MMIO write in real life);
 *       * reads of a bus function through the BAR are served from the HDP's
 *         read cache once a byte was read, until the driver invalidates
 *         it: either from the CPU (bm_hdp_inval) or from the GPU's own
 *         queue, by writing 1 into the HDP's invalidate register (a Fill
 *         part on a mapping of that register).
 *   The bus agent of the kit (bm_hdp_read / bm_hdp_write) is this path.
 *
 * The queue layer (struct bmq) wraps hostmem's C functions (hm_table) of a
 * device: with BM_WFLUSH it flushes the HDP's posted writes at submit, before
 * the work runs, and with BM_RINVAL it ends every submission with a Fill of
 * the HDP invalidate register, after the work and before its signal.
 *
 * Locking: one pthread mutex per HDP, held only inside C code that runs no
 * OCaml code and no signal handler (not one of the locks rig_hold counts,
 * as hostmem's mu).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#include "rig_edge.h"

static void *arena(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* bm_arena n: n bytes of zeroed memory for the rest of the process. */
CAMLprim value bm_arena(value vn) {
  void *p = arena((size_t)Long_val(vn));
  if (!p) caml_failwith("blindmb: no address space for an arena");
  return caml_copy_nativeint((intnat)p);
}

/* bm_copy dst src n (a driver moving memory: memmove). */
CAMLprim value bm_copy(value vd, value vs, value vn) {
  memmove((void *)Nativeint_val(vd), (const void *)Nativeint_val(vs), (size_t)Long_val(vn));
  return Val_unit;
}

/* ------------------------------------------------------------- the HDP */

struct hdp {
  pthread_mutex_t mu;
  uint8_t *vram;      /* the GPU's memory; the BAR shows its first bar bytes */
  uint64_t bar;
  uint8_t *wbuf, *wmask;    /* posted writes */
  uint8_t *rcache, *rvalid; /* read cache */
  uint64_t wlo, whi;        /* the span posted writes touch */
  uint64_t rlo, rhi;        /* the span the read cache holds */
  volatile uint8_t *reg;    /* invalidate register: write 1 to drop the read cache */
};

static void drop_cache(struct hdp *h) {
  if (h->rhi > h->rlo) memset(h->rvalid + h->rlo, 0, h->rhi - h->rlo);
  h->rlo = h->rhi = 0;
}

static void flush_locked(struct hdp *h) {
  for (uint64_t i = h->wlo; i < h->whi; i++)
    if (h->wmask[i]) {
      h->vram[i] = h->wbuf[i];
      h->wmask[i] = 0;
      h->rvalid[i] = 0;
    }
  h->wlo = h->whi = 0;
}

static void hdp_flush(struct hdp *h) {
  pthread_mutex_lock(&h->mu);
  flush_locked(h);
  pthread_mutex_unlock(&h->mu);
}

/* bm_hdp_new vram bar */
CAMLprim value bm_hdp_new(value vvram, value vbar) {
  struct hdp *h = calloc(1, sizeof *h);
  uint64_t bar = (uint64_t)Long_val(vbar);
  if (!h) caml_raise_out_of_memory();
  pthread_mutex_init(&h->mu, NULL);
  h->vram = (uint8_t *)Nativeint_val(vvram);
  h->bar = bar;
  h->wbuf = arena(bar);
  h->wmask = arena(bar);
  h->rcache = arena(bar);
  h->rvalid = arena(bar);
  h->reg = calloc(1, 64);
  if (!h->wbuf || !h->wmask || !h->rcache || !h->rvalid || !h->reg) caml_failwith("blindmb: no memory for an HDP");
  return caml_copy_nativeint((intnat)h);
}

CAMLprim value bm_hdp_reg(value vh) {
  struct hdp *h = (struct hdp *)Nativeint_val(vh);
  return caml_copy_nativeint((intnat)h->reg);
}

/* bm_hdp_read hdp off n: what a bus function reads through the BAR. */
CAMLprim value bm_hdp_read(value vh, value voff, value vn) {
  CAMLparam3(vh, voff, vn);
  CAMLlocal1(s);
  struct hdp *h = (struct hdp *)Nativeint_val(vh);
  uint64_t off = (uint64_t)Long_val(voff), n = (uint64_t)Long_val(vn);
  s = caml_alloc_string(n);
  uint8_t *out = (uint8_t *)Bytes_val(s);
  pthread_mutex_lock(&h->mu);
  if (*h->reg) {
    drop_cache(h);
    *h->reg = 0;
  }
  for (uint64_t i = off; i < off + n; i++) {
    if (h->wmask[i]) out[i - off] = h->wbuf[i];
    else {
      if (!h->rvalid[i]) {
        h->rcache[i] = h->vram[i];
        h->rvalid[i] = 1;
      }
      out[i - off] = h->rcache[i];
    }
  }
  if (n) {
    if (h->rhi == h->rlo) { h->rlo = off; h->rhi = off + n; }
    else {
      if (off < h->rlo) h->rlo = off;
      if (off + n > h->rhi) h->rhi = off + n;
    }
  }
  pthread_mutex_unlock(&h->mu);
  CAMLreturn(s);
}

/* bm_hdp_write hdp off s: a bus function's write through the BAR (posted). */
CAMLprim value bm_hdp_write(value vh, value voff, value vs) {
  struct hdp *h = (struct hdp *)Nativeint_val(vh);
  uint64_t off = (uint64_t)Long_val(voff), n = caml_string_length(vs);
  const uint8_t *in = (const uint8_t *)String_val(vs);
  pthread_mutex_lock(&h->mu);
  for (uint64_t i = 0; i < n; i++) {
    h->wbuf[off + i] = in[i];
    h->wmask[off + i] = 1;
  }
  if (n) {
    if (h->whi == h->wlo) { h->wlo = off; h->whi = off + n; }
    else {
      if (off < h->wlo) h->wlo = off;
      if (off + n > h->whi) h->whi = off + n;
    }
  }
  pthread_mutex_unlock(&h->mu);
  return Val_unit;
}

/* The driver's CPU-side HDP flush and invalidate (MMIO writes). */
CAMLprim value bm_hdp_flush(value vh) {
  hdp_flush((struct hdp *)Nativeint_val(vh));
  return Val_unit;
}

CAMLprim value bm_hdp_inval(value vh) {
  struct hdp *h = (struct hdp *)Nativeint_val(vh);
  pthread_mutex_lock(&h->mu);
  drop_cache(h);
  pthread_mutex_unlock(&h->mu);
  return Val_unit;
}

/* ----------------------------------------------------------- the queue */

#define BM_WFLUSH 1 /* flush the HDP's posted writes at submit */
#define BM_RINVAL 2 /* end each submission with an HDP read-cache invalidate */

struct bmq {
  void *hdev;
  const struct rig_queue_fns *h;
  struct hdp *hdp;
  uint64_t reg_h; /* hostmem handle of the device's mapping of the register */
  int flags;
};

static __thread struct {
  uint32_t cap;
  struct rig_part *parts;
  struct rig_submission sub;
} tls;

static const struct rig_submission *with_inval(struct bmq *q, const struct rig_submission *s) {
  if (!(q->flags & BM_RINVAL)) return s;
  uint32_t n = s->n_parts + 1;
  if (tls.cap < n) {
    uint32_t cap = n < 64 ? 64 : 2 * n;
    struct rig_part *p = realloc(tls.parts, cap * sizeof *p);
    if (!p) abort();
    tls.parts = p;
    tls.cap = cap;
  }
  if (s->n_parts) memcpy(tls.parts, s->parts, s->n_parts * sizeof *tls.parts);
  struct rig_part *f = &tls.parts[n - 1];
  memset(f, 0, sizeof *f);
  f->op = RIG_OP_FILL;
  f->a[0] = q->reg_h;
  f->a[1] = 0;
  f->a[2] = 1;
  f->a[3] = 1;
  tls.sub.n_parts = n;
  tls.sub.parts = tls.parts;
  return &tls.sub;
}

static int bm_room(void *dev, const struct rig_submission *s) {
  struct bmq *q = dev;
  return q->h->room(q->hdev, with_inval(q, s));
}

static int bm_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct bmq *q = dev;
  if (q->flags & BM_WFLUSH) hdp_flush(q->hdp);
  return q->h->submit(q->hdev, with_inval(q, s), value);
}

static int bm_commit(void *dev) {
  struct bmq *q = dev;
  return q->h->commit(q->hdev);
}

static const struct rig_queue_fns bm_table = { bm_room, bm_submit, bm_commit };

CAMLprim value bm_q_fns(value unit) {
  (void)unit;
  return caml_copy_nativeint((intnat)&bm_table);
}

/* bm_q_new hdev hfns hdp reg_h flags: the device's queue layer.  Lives as
 * long as the process (a few bytes per open). */
CAMLprim value bm_q_new(value vdev, value vfns, value vhdp, value vreg, value vflags) {
  struct bmq *q = calloc(1, sizeof *q);
  if (!q) caml_raise_out_of_memory();
  q->hdev = (void *)Nativeint_val(vdev);
  q->h = (const struct rig_queue_fns *)Nativeint_val(vfns);
  q->hdp = (struct hdp *)Nativeint_val(vhdp);
  q->reg_h = (uint64_t)Long_val(vreg);
  q->flags = Int_val(vflags);
  return caml_copy_nativeint((intnat)q);
}
