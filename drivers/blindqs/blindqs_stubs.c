/* blindqs: a queue layer of the qs-* drivers in front of hostmem's queues.
 *
 * Each qs-* device is a hostmem device (hostmem_stubs.c, reached through its
 * table hm_fns and its primitives) with this layer in front of its C
 * functions.  The layer is a second, smaller pool: a submission of n parts
 * takes n + 1 "units" of it from room's RIG_ROOM to its commit (the command
 * staging a real driver fills before it rings the doorbell).  The pool
 * starts with QS_INITIAL_UNITS units; grow adds chunks, each a region of
 * hostmem's Device memory (charged to its budget, so that rig's reclamation
 * can give grow room).  hostmem's own pool stays behind it (64 slots), so
 * that a submission first runs out of this layer's units.
 *
 * room answers RIG_GROW when either pool lacks room; grow grows both (this
 * layer here, hostmem's with hm_grow from OCaml).
 *
 * Locking: one pthread mutex per layer (mu), taken in C only; from OCaml
 * only by stubs that take it outside the runtime (never blocking on it
 * while holding the runtime) and that run no OCaml code and no signal
 * handler while they hold it, so it is not one of the locks rig_hold counts
 * (LOCK-3).  Lock order: mu, then hostmem's device mutex.
 *
 * The mode selects the twist of one qs-* driver; the table at the top of
 * blindqs.ml says which.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* hostmem's primitives, called from C (hostmem_stubs.c). */
extern value hm_alloc(value v, value vcharged, value vn);
extern value hm_free(value v, value vh);
extern value hm_signaled(value v);
extern value hm_busy(value v);

/* The twists this layer implements (the others are in blindqs.ml). */
enum {
  M_BASE = 0,
  M_PUBLISHES = 1,      /* qs-grow-publishes: grow puts its chunks into the pool at once */
  M_SHORT_DROPS = 2,    /* qs-short-drops: a Short gives back what this grow made */
  M_SHORT_ORPHANS = 3,  /* qs-short-orphans: a Short parks what was made where room never looks */
  M_SLEEP_HOLDS = 4,    /* qs-sleep-holds-lock: (the wait stub below) */
  M_COMMIT_REFUSES = 5, /* qs-commit-busy-in-sleep: commit fails while a sleep waits */
  M_GENEROUS = 6,       /* qs-grow-generous: grow makes up to twice what is asked */
  M_HALVES = 7          /* qs-short-halves: grow falls back to smaller chunks, keeps a partial growth */
};

#define QS_INITIAL_UNITS 32
#define QS_CHUNK_UNITS 16
#define QS_CHUNK_BYTES 4096
#define QS_UNIT_BYTES (QS_CHUNK_BYTES / QS_CHUNK_UNITS)
#define QS_MAX_THREADS 1024

struct chunk {
  struct chunk *next;
  intnat h;         /* hostmem's handle of its Device region */
  uint32_t units;
};

struct qthr {
  pthread_t tid;
  int used;
  uint32_t reserved;       /* units room answered RIG_ROOM for (or, M_PUBLISHES, grow claimed) */
  uint32_t need;           /* units of the submission whose room last answered RIG_GROW */
  uint32_t earmark_units;  /* units grow made for this thread, not yet in the pool */
  struct chunk *earmark;
  uint32_t open;           /* units encoded, not committed */
};

struct qs_dev {
  pthread_mutex_t mu;
  void *inner;                        /* hostmem's struct hm_dev */
  const struct rig_queue_fns *fns;    /* hostmem's table */
  int mode;
  int stopped;
  uint32_t pool_free, reserved_total;
  struct chunk *pool_chunks;          /* chunks in the pool */
  struct chunk *orphans;              /* M_SHORT_ORPHANS: parked chunks */
  _Atomic int64_t last_value;         /* the last value given to submit */
  atomic_int sleepers;                /* M_COMMIT_REFUSES: sleeps inside their wait */
  _Atomic int64_t events;             /* room, submit and commit calls so far */
  atomic_int inflight;                /* room, submit and commit calls running */
  atomic_int chunks_live;             /* chunks made and not given back */
  struct qthr thr[QS_MAX_THREADS];
};

/* ------------------------------------------------------------ helpers */

static struct qthr *thr_find(struct qs_dev *w, int create) {
  pthread_t self = pthread_self();
  struct qthr *spare = NULL;
  for (int i = 0; i < QS_MAX_THREADS; i++) {
    struct qthr *t = &w->thr[i];
    if (t->used) {
      if (pthread_equal(t->tid, self)) return t;
    } else if (!spare) spare = t;
  }
  if (!create || !spare) return NULL;
  memset(spare, 0, sizeof *spare);
  spare->used = 1;
  spare->tid = self;
  return spare;
}

static void thr_maybe_free(struct qthr *t) {
  if (t->reserved == 0 && t->need == 0 && t->earmark == NULL && t->open == 0) t->used = 0;
}

static struct chunk *list_append(struct chunk *a, struct chunk *b) {
  if (!a) return b;
  struct chunk *p = a;
  while (p->next) p = p->next;
  p->next = b;
  return a;
}

/* Put the thread's earmark into the pool.  Under mu. */
static void adopt(struct qs_dev *w, struct qthr *t) {
  w->pool_free += t->earmark_units;
  w->pool_chunks = list_append(t->earmark, w->pool_chunks);
  t->earmark = NULL;
  t->earmark_units = 0;
}

/* Take mu from a stub that holds the runtime: never block on it with the
 * runtime held.  The caller registered its values (CAMLparam). */
static void lock_from_ocaml(struct qs_dev *w) {
  if (pthread_mutex_trylock(&w->mu) == 0) return;
  caml_enter_blocking_section();
  pthread_mutex_lock(&w->mu);
  caml_leave_blocking_section();
}

/* A chunk of [units] units, [bytes] bytes of the hostmem device's Device
 * memory, or NULL when its budget (or the host) has no room.  Runtime held,
 * under mu. */
static struct chunk *chunk_new(struct qs_dev *w, value vc, uint32_t units, intnat bytes) {
  intnat h = Long_val(hm_alloc(vc, Val_true, Val_long(bytes)));
  if (h == 0) return NULL;
  struct chunk *c = malloc(sizeof *c);
  if (!c) {
    hm_free(vc, Val_long(h));
    return NULL;
  }
  c->next = NULL;
  c->h = h;
  c->units = units;
  atomic_fetch_add(&w->chunks_live, 1);
  return c;
}

static void chunks_free(struct qs_dev *w, value vc, struct chunk *c) {
  while (c) {
    struct chunk *n = c->next;
    hm_free(vc, Val_long(c->h));
    free(c);
    atomic_fetch_sub(&w->chunks_live, 1);
    c = n;
  }
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* hostmem's word and busy state, read as hm_signaled and hm_busy read them,
 * without the runtime: their Dev_val reads the device pointer from the
 * block's first field (Data_custom_val), and they touch nothing else of the
 * runtime. */
static int64_t inner_word(struct qs_dev *w) {
  value fake[2];
  fake[0] = 0;
  fake[1] = (value)w->inner;
  return (int64_t)Long_val(hm_signaled((value)&fake[0]));
}

static int inner_busy(struct qs_dev *w) {
  value fake[2];
  fake[0] = 0;
  fake[1] = (value)w->inner;
  return Bool_val(hm_busy((value)&fake[0]));
}

/* --------------------------------------------------- the C functions */

static int qs_room(void *dev, const struct rig_submission *s) {
  struct qs_dev *w = dev;
  uint32_t need = s->n_parts + 1;
  int answer = RIG_GROW;
  atomic_fetch_add(&w->inflight, 1);
  atomic_fetch_add(&w->events, 1);
  pthread_mutex_lock(&w->mu);
  struct qthr *t = thr_find(w, 1);
  if (t && !w->stopped) {
    uint32_t prev = t->reserved;
    w->reserved_total -= prev;
    t->reserved = 0;
    uint32_t avail = w->pool_free - w->reserved_total;
    int inner = w->fns->room(w->inner, s);
    if (inner == RIG_ROOM && (uint64_t)avail + t->earmark_units >= need) {
      adopt(w, t);
      t->need = 0;
      t->reserved = need;
      w->reserved_total += need;
      answer = RIG_ROOM;
    } else if (avail >= need) {
      /* hostmem's pool lacks room, this one has it: keep it for this thread,
       * so that once grow answers Grown the next room answers RIG_ROOM
       * (QUEUE-2) */
      t->need = 0;
      t->reserved = need;
      w->reserved_total += need;
    } else {
      /* grow makes room for the whole submission, for this thread alone
       * (as hostmem's grow does) */
      t->need = need;
      if (w->mode == M_PUBLISHES) {
        /* what grow claimed stays claimed */
        t->reserved = prev;
        w->reserved_total += prev;
      }
    }
    thr_maybe_free(t);
  }
  pthread_mutex_unlock(&w->mu);
  atomic_fetch_sub(&w->inflight, 1);
  return answer;
}

static int qs_submit(void *dev, const struct rig_submission *s, uint64_t value_) {
  struct qs_dev *w = dev;
  uint32_t need = s->n_parts + 1;
  int rc = 1;
  atomic_fetch_add(&w->inflight, 1);
  atomic_fetch_add(&w->events, 1);
  pthread_mutex_lock(&w->mu);
  atomic_store(&w->last_value, (int64_t)value_);
  struct qthr *t = thr_find(w, 0);
  int ok = !w->stopped && t && t->reserved >= need;
  /* hostmem records the value also for a failed submit (STOP-3) */
  int inner = w->fns->submit(w->inner, s, value_);
  if (ok && inner == 0) {
    t->reserved -= need;
    w->reserved_total -= need;
    w->pool_free -= need;
    t->open += need;
    rc = 0;
  }
  if (t) thr_maybe_free(t);
  pthread_mutex_unlock(&w->mu);
  atomic_fetch_sub(&w->inflight, 1);
  return rc;
}

static int qs_commit(void *dev) {
  struct qs_dev *w = dev;
  int rc;
  atomic_fetch_add(&w->inflight, 1);
  atomic_fetch_add(&w->events, 1);
  pthread_mutex_lock(&w->mu);
  struct qthr *t = thr_find(w, 0);
  if (w->stopped) rc = 1;
  else if (w->mode == M_COMMIT_REFUSES && atomic_load(&w->sleepers) > 0)
    rc = 1; /* "the fence channel is busy": the twist of qs-commit-busy-in-sleep */
  else {
    rc = w->fns->commit(w->inner);
    if (rc == 0 && t) {
      w->pool_free += t->open; /* the staging is flushed into hostmem's queue */
      t->open = 0;
    }
  }
  if (t) thr_maybe_free(t);
  pthread_mutex_unlock(&w->mu);
  atomic_fetch_sub(&w->inflight, 1);
  return rc;
}

static const struct rig_queue_fns qs_table = { qs_room, qs_submit, qs_commit };

/* ------------------------------------------------------- OCaml device */

#define Qs_val(v) (*(struct qs_dev **)Data_custom_val(v))

static void qs_finalize(value v) {
  struct qs_dev *w = Qs_val(v);
  if (!w) return;
  /* hostmem's device frees the chunks' memory itself: only the records */
  struct chunk *lists[2] = { w->pool_chunks, w->orphans };
  for (int k = 0; k < 2; k++)
    for (struct chunk *c = lists[k], *n; c; c = n) { n = c->next; free(c); }
  for (int i = 0; i < QS_MAX_THREADS; i++)
    for (struct chunk *c = w->thr[i].earmark, *n; c; c = n) { n = c->next; free(c); }
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static struct custom_operations qs_ops = {
  "rig.blindqs.dev", qs_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* qs_open inner_fns inner_dev mode */
CAMLprim value qs_open(value vfns, value vdev, value vmode) {
  CAMLparam3(vfns, vdev, vmode);
  CAMLlocal1(v);
  struct qs_dev *w = calloc(1, sizeof *w);
  if (!w) caml_raise_out_of_memory();
  pthread_mutex_init(&w->mu, NULL);
  w->fns = (const struct rig_queue_fns *)Nativeint_val(vfns);
  w->inner = (void *)Nativeint_val(vdev);
  w->mode = Int_val(vmode);
  w->pool_free = QS_INITIAL_UNITS;
  v = caml_alloc_custom(&qs_ops, sizeof(struct qs_dev *), 0, 1);
  Qs_val(v) = w;
  CAMLreturn(v);
}

CAMLprim value qs_dev_ptr(value v) { return caml_copy_nativeint((intnat)Qs_val(v)); }
CAMLprim value qs_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&qs_table); }

/* qs_grow w hm: grows this layer for the calling thread's last RIG_GROW;
 * the bytes still missing (0: grown). */
CAMLprim value qs_grow(value vw, value vc) {
  CAMLparam2(vw, vc);
  struct qs_dev *w = Qs_val(vw);
  intnat missing = 0;
  lock_from_ocaml(w);
  struct qthr *t = thr_find(w, 0);
  if (t && t->need && !w->stopped) {
    uint32_t have = t->earmark_units + (w->mode == M_PUBLISHES ? t->reserved : 0);
    if (have < t->need) {
      uint32_t want = t->need - have;
      struct chunk *made = NULL;
      uint32_t made_units = 0;
      if (w->mode == M_HALVES) {
        /* one chunk for all that is missing; where it does not fit, halves,
         * down to one unit; what fits stays */
        uint32_t u = want;
        while (made_units < want && u > 0) {
          if (u > want - made_units) u = want - made_units;
          struct chunk *c = chunk_new(w, vc, u, (intnat)u * QS_UNIT_BYTES);
          if (!c) { u /= 2; continue; }
          c->next = made;
          made = c;
          made_units += u;
        }
        if (made_units < want) missing = (intnat)(want - made_units) * QS_UNIT_BYTES;
      } else {
        while (made_units < want) {
          struct chunk *c = chunk_new(w, vc, QS_CHUNK_UNITS, QS_CHUNK_BYTES);
          if (!c) break;
          c->next = made;
          made = c;
          made_units += QS_CHUNK_UNITS;
        }
        if (made_units < want) {
          missing = (intnat)((want - made_units + QS_CHUNK_UNITS - 1) / QS_CHUNK_UNITS) * QS_CHUNK_BYTES;
          if (w->mode == M_SHORT_DROPS) {
            /* all or nothing: "no partial state on failure" */
            chunks_free(w, vc, made);
            made = NULL;
            made_units = 0;
          }
        } else if (w->mode == M_GENEROUS) {
          /* as much again, if the memory has it: no Short for the extra */
          uint32_t extra = 0;
          while (extra < want) {
            struct chunk *c = chunk_new(w, vc, QS_CHUNK_UNITS, QS_CHUNK_BYTES);
            if (!c) break;
            c->next = made;
            made = c;
            extra += QS_CHUNK_UNITS;
          }
          made_units += extra;
        }
      }
      if (w->mode == M_PUBLISHES) {
        /* the twist: the chunks go into the pool now, the thread claims its
         * share; the rest is there for everyone before the next room */
        w->pool_free += made_units;
        w->pool_chunks = list_append(made, w->pool_chunks);
        uint32_t others = w->reserved_total - t->reserved;
        uint32_t claim = w->pool_free - others;
        if (claim > t->need) claim = t->need;
        w->reserved_total = others + claim;
        t->reserved = claim;
      } else {
        t->earmark = list_append(made, t->earmark);
        t->earmark_units += made_units;
        if (missing && w->mode == M_SHORT_ORPHANS) {
          /* the twist: the partial growth goes to a spare list that room
           * never looks at (given back at stop) */
          w->orphans = list_append(t->earmark, w->orphans);
          t->earmark = NULL;
          t->earmark_units = 0;
        }
      }
    }
  }
  pthread_mutex_unlock(&w->mu);
  CAMLreturn(Val_long(missing));
}

/* qs_stop w: the layer refuses everything from now; drops the staging and
 * the reservations (what runs only once committed: STOP-4). */
CAMLprim value qs_stop(value vw) {
  CAMLparam1(vw);
  struct qs_dev *w = Qs_val(vw);
  lock_from_ocaml(w);
  w->stopped = 1;
  for (int i = 0; i < QS_MAX_THREADS; i++) {
    struct qthr *t = &w->thr[i];
    if (!t->used) continue;
    t->open = 0;
    t->reserved = 0;
    t->need = 0;
  }
  w->reserved_total = 0;
  pthread_mutex_unlock(&w->mu);
  CAMLreturn(Val_unit);
}

/* qs_release w hm: gives back every chunk the layer made (STOP-5). */
CAMLprim value qs_release(value vw, value vc) {
  CAMLparam2(vw, vc);
  struct qs_dev *w = Qs_val(vw);
  lock_from_ocaml(w);
  struct chunk *all = w->pool_chunks;
  w->pool_chunks = NULL;
  all = list_append(all, w->orphans);
  w->orphans = NULL;
  for (int i = 0; i < QS_MAX_THREADS; i++) {
    struct qthr *t = &w->thr[i];
    all = list_append(all, t->earmark);
    t->earmark = NULL;
    t->earmark_units = 0;
    if (t->used) thr_maybe_free(t);
  }
  w->pool_free = 0;
  chunks_free(w, vc, all);
  pthread_mutex_unlock(&w->mu);
  CAMLreturn(Val_unit);
}

/* The calling thread's units encoded and not committed. */
CAMLprim value qs_open_here(value vw) {
  CAMLparam1(vw);
  struct qs_dev *w = Qs_val(vw);
  lock_from_ocaml(w);
  struct qthr *t = thr_find(w, 0);
  uint32_t n = t ? t->open : 0;
  pthread_mutex_unlock(&w->mu);
  CAMLreturn(Val_long(n));
}

/* The calling thread's commit, as rig calls it (outside the runtime). */
CAMLprim value qs_commit_here(value vw) {
  struct qs_dev *w = Qs_val(vw);
  caml_enter_blocking_section();
  int rc = qs_commit(w);
  caml_leave_blocking_section();
  return Val_bool(rc == 0);
}

CAMLprim value qs_last(value vw) { return Val_long((intnat)atomic_load(&Qs_val(vw)->last_value)); }
CAMLprim value qs_events(value vw) { return Val_long((intnat)atomic_load(&Qs_val(vw)->events)); }
CAMLprim value qs_inflight(value vw) { return Val_long(atomic_load(&Qs_val(vw)->inflight)); }
CAMLprim value qs_chunks_live(value vw) { return Val_long(atomic_load(&Qs_val(vw)->chunks_live)); }
CAMLprim value qs_now_ms(value unit) { (void)unit; return Val_long((intnat)now_ms()); }

/* The pool's free units, as another thread's room would see them. */
CAMLprim value qs_avail(value vw) {
  CAMLparam1(vw);
  struct qs_dev *w = Qs_val(vw);
  lock_from_ocaml(w);
  intnat n = (intnat)w->pool_free - (intnat)w->reserved_total;
  pthread_mutex_unlock(&w->mu);
  CAMLreturn(Val_long(n));
}

/* A wait's blocking step that polls hostmem's word every millisecond until
 * it differs from seen or ms pass, entirely outside the runtime (SIG-3).
 * hold: with the layer's mutex held throughout (qs-sleep-holds-lock's
 * twist: room, submit and commit of other threads wait for it).
 * count: counted among the sleepers (qs-commit-busy-in-sleep's twist). */
static void poll_wait(struct qs_dev *w, int64_t seen, int64_t ms, int hold, int count) {
  int64_t end = now_ms() + (ms < 0 ? 0 : ms);
  if (count) atomic_fetch_add(&w->sleepers, 1);
  if (hold) {
    /* another sleep may hold it: never wait for it past this sleep's own
     * still_ms (TIME-4); without it, this sleep polls as the others do */
    for (;;) {
      if (pthread_mutex_trylock(&w->mu) == 0) break;
      int64_t left = end - now_ms();
      if (inner_word(w) != seen || left <= 0) { hold = 0; break; }
      struct timespec ts = { 0, 1000000L };
      nanosleep(&ts, NULL);
    }
  }
  /* work that ends without moving the word (a fault) ends the wait too */
  int busy0 = inner_busy(w);
  for (;;) {
    if (inner_word(w) != seen) break;
    if (busy0 && !inner_busy(w)) break;
    int64_t left = end - now_ms();
    if (left <= 0) break;
    struct timespec ts = { 0, (left < 1 ? left : 1) * 1000000L };
    nanosleep(&ts, NULL);
  }
  if (hold) pthread_mutex_unlock(&w->mu);
  if (count) atomic_fetch_sub(&w->sleepers, 1);
}

CAMLprim value qs_wait(value vw, value vseen, value vms, value vhold, value vcount) {
  struct qs_dev *w = Qs_val(vw);
  int64_t seen = Long_val(vseen), ms = Long_val(vms);
  int hold = Bool_val(vhold), count = Bool_val(vcount);
  caml_enter_blocking_section();
  poll_wait(w, seen, ms, hold, count);
  caml_leave_blocking_section();
  return Val_unit;
}
