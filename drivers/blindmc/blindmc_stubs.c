/* blindmc: hostmem's device (drivers/hostmem/hostmem_stubs.c), copied with
 * its prefix changed to mc_ so that it sits beside hostmem's own stubs in
 * blindmc.cmxs, and with a few per-device knobs (MC_* flags given at open)
 * that the mc-* drivers of blindmc.ml turn on one at a time:
 *   MC_GROW_ROLLBACK    grow gives back what it made when it answers Short
 *   MC_STOP_FREES_MEM   the stopped device's worker frees its memory regions
 *   MC_WORD_POOL        the word is a slot of a process-wide pool of words,
 *                       given back when rig frees the word (mc_word_release)
 *   MC_WORD_EARLY       with MC_WORD_POOL: the slot is given back as soon as
 *                       the last value is in it
 * Everything else is hostmem's device as it is.
 *
 * hostmem's description follows: a rig driver whose device is the host.
 *
 * The device (struct mc_dev):
 *   - memory is host memory (posix_memalign); Device memory is charged to a
 *     budget of the device's own (its "VRAM size"), Mapped/Pinned memory is
 *     not charged;
 *   - regions, mappings and entries are objects of a per-device table, named
 *     in submissions by a handle (generation << 32 | index), so that work
 *     naming a freed or foreign object faults the device instead of the host;
 *   - the queue is a pool of slots carved from blocks of Device memory; each
 *     submission takes one slot per part and one for its signal (the value it
 *     writes into the word once done);
 *   - work runs on a pthread of the device's own, started with every signal
 *     blocked but the fault signals;
 *   - the timeline word is a host 64-bit atomic inside the device, written
 *     with release order, read with acquire order.
 *
 * Locking: one pthread mutex per device (mu) guards every field but the
 * word.  It is only ever held inside C code that runs no OCaml code and no
 * signal handler, and is never held across a blocking section's enter or
 * leave, so it is not one of the locks rig_hold counts (LOCK-3).
 *
 * Lifetime: the device is reference counted: the OCaml custom block holds
 * one reference, the worker thread the other.  The word lives in the device,
 * so it outlives stop for as long as rig may read it (STOP-5).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* ------------------------------------------------------------ objects */

enum obj_kind { OBJ_NONE = 0, OBJ_MEM, OBJ_MAP, OBJ_ENTRY };
enum fn_kind { FN_NOP = 0, FN_SPIN = 1, FN_FAULT = 2, FN_HANG = 3, FN_REFUSE = 4 };

struct obj {
  uint32_t gen;      /* bumped at each free: stale handles miss */
  uint8_t kind;      /* enum obj_kind */
  uint8_t fn;        /* enum fn_kind, for entries */
  uint8_t charged;   /* its bytes count against the Device budget */
  char *addr;        /* memory (or scratch) */
  uint64_t size;
  uint32_t next_free;
};

/* ------------------------------------------------------------- queues */

struct slot {
  struct rig_part part;
  uint64_t value;     /* for a signal slot */
  int signal;         /* 1: write value into the word; 0: run part */
  struct slot *next;
};

#define SLOTS_PER_BLOCK 8
#define INITIAL_BLOCKS 8
struct block {
  struct block *next;
  struct slot slots[SLOTS_PER_BLOCK];
};
#define BLOCK_BYTES ((int64_t)sizeof(struct block))

/* What one thread has in the queues: room's reservation, what grow made for
 * it and room has not yet put into the queues, and what it encoded. */
struct thr {
  pthread_t tid;
  int used;
  uint32_t reserved;          /* slots room answered RIG_ROOM for */
  uint32_t need;              /* slots of the submission that asked to grow */
  uint32_t earmark_slots;     /* slots grow made for this thread */
  struct block *earmark;      /* those blocks */
  struct slot *open_head, *open_tail;  /* encoded, not committed */
};
#define MAX_THREADS 1024

struct mc_dev {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* the worker waits here for work or stop */
  pthread_cond_t event_cv;  /* sleepers wait here for the word or a fault */
  _Atomic uint64_t *word;   /* &own_word, or a slot of the pool */
  _Atomic uint64_t own_word;
  int flags;                /* MC_* */
  int slot;                 /* the pool slot the word is, or -1 */
  atomic_int refs;

  int64_t capacity, used;   /* the Device budget, in bytes */

  struct obj *objs;
  uint32_t n_objs, cap_objs, free_obj;  /* free_obj: 0 = none */

  struct block *blocks;     /* every block in the queues */
  struct slot *free_slots;
  uint32_t free_count, reserved_total;
  struct thr thr[MAX_THREADS];
  struct slot *run_head, *run_tail;   /* committed, not yet run */

  int busy;                 /* the worker runs a part */
  int stopping;
  int final_written;
  int faulted;
  char fault_msg[160];
  uint64_t last_value;      /* the last value given to submit */
};

static void dev_release(struct mc_dev *d);

#define MC_GROW_ROLLBACK 1
#define MC_STOP_FREES_MEM 2
#define MC_WORD_POOL 4
#define MC_WORD_EARLY 8

/* ------------------------------------------------------ the word pool */

/* Timeline words of the pool: a fence page's slots, kept on a stack of
 * free ones (the slot given back last is handed out first, while it is
 * hot in the cache), reset to 0 for their new device. */
#define POOL_SLOTS 64
static _Atomic uint64_t pool_words[POOL_SLOTS];
static int pool_free[POOL_SLOTS];
static int pool_nfree = -1; /* -1: not filled yet */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

static int pool_take(void) {
  int k = -1;
  pthread_mutex_lock(&pool_mu);
  if (pool_nfree < 0) {
    for (int i = 0; i < POOL_SLOTS; i++) pool_free[i] = POOL_SLOTS - 1 - i;
    pool_nfree = POOL_SLOTS;
  }
  if (pool_nfree > 0) k = pool_free[--pool_nfree];
  pthread_mutex_unlock(&pool_mu);
  if (k >= 0) atomic_store_explicit(&pool_words[k], 0, memory_order_release);
  return k;
}

/* Give d's slot back to the pool, once. */
static void pool_give(struct mc_dev *d) {
  pthread_mutex_lock(&pool_mu);
  if (d->slot >= 0) {
    pool_free[pool_nfree++] = d->slot;
    d->slot = -1;
  }
  pthread_mutex_unlock(&pool_mu);
}

/* ------------------------------------------------------------ helpers */

static void deadline_after(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static uint64_t handle_of(struct mc_dev *d, uint32_t i) { return ((uint64_t)d->objs[i].gen << 32) | i; }

/* The object a handle names, or NULL.  Under mu. */
static struct obj *lookup(struct mc_dev *d, uint64_t h) {
  uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
  if (i == 0 || i >= d->n_objs) return NULL;
  struct obj *o = &d->objs[i];
  if (o->kind == OBJ_NONE || o->gen != gen) return NULL;
  return o;
}

/* A new object; 0 when the host has no memory for the table.  Under mu. */
static uint32_t obj_new(struct mc_dev *d) {
  uint32_t i;
  if (d->free_obj) {
    i = d->free_obj;
    d->free_obj = d->objs[i].next_free;
  } else {
    if (d->n_objs == d->cap_objs) {
      uint32_t cap = d->cap_objs ? 2 * d->cap_objs : 256;
      struct obj *o = realloc(d->objs, cap * sizeof *o);
      if (!o) return 0;
      memset(o + d->cap_objs, 0, (cap - d->cap_objs) * sizeof *o);
      d->objs = o;
      d->cap_objs = cap;
    }
    i = d->n_objs++;
    if (i == 0) i = d->n_objs++; /* index 0 is never a handle */
    d->objs[i].gen = 1;
  }
  d->objs[i].next_free = 0;
  return i;
}

static void obj_drop(struct mc_dev *d, struct obj *o) {
  uint32_t i = (uint32_t)(o - d->objs);
  if (o->charged) d->used -= (int64_t)o->size;
  o->kind = OBJ_NONE;
  o->addr = NULL;
  o->size = 0;
  o->charged = 0;
  o->gen++;
  if (o->gen == 0) o->gen = 1;
  o->next_free = d->free_obj;
  d->free_obj = i;
}

static struct thr *thr_find(struct mc_dev *d, int create) {
  pthread_t self = pthread_self();
  struct thr *spare = NULL;
  for (int i = 0; i < MAX_THREADS; i++) {
    struct thr *t = &d->thr[i];
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

static void thr_maybe_free(struct thr *t) {
  if (t->reserved == 0 && t->need == 0 && t->earmark == NULL && t->open_head == NULL) t->used = 0;
}

static void slots_give(struct mc_dev *d, struct slot *s) {
  while (s) {
    struct slot *n = s->next;
    s->next = d->free_slots;
    d->free_slots = s;
    d->free_count++;
    s = n;
  }
}

/* A new block of Device memory for the queues, or NULL when the budget or
 * the host has no room for it.  Under mu. */
static struct block *block_new(struct mc_dev *d) {
  if (d->used + BLOCK_BYTES > d->capacity) return NULL;
  struct block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  d->used += BLOCK_BYTES;
  return b;
}

/* Put blocks into the queues' pool.  Under mu. */
static void blocks_adopt(struct mc_dev *d, struct block *b) {
  while (b) {
    struct block *n = b->next;
    b->next = d->blocks;
    d->blocks = b;
    for (int i = 0; i < SLOTS_PER_BLOCK; i++) {
      b->slots[i].next = d->free_slots;
      d->free_slots = &b->slots[i];
      d->free_count++;
    }
    b = n;
  }
}

static void blocks_free(struct mc_dev *d, struct block *b) {
  while (b) {
    struct block *n = b->next;
    free(b);
    d->used -= BLOCK_BYTES;
    b = n;
  }
}

/* Drop every thread's encoded work and reservations.  Under mu. */
static void drop_encoded(struct mc_dev *d) {
  for (int i = 0; i < MAX_THREADS; i++) {
    struct thr *t = &d->thr[i];
    if (!t->used) continue;
    slots_give(d, t->open_head);
    t->open_head = t->open_tail = NULL;
    d->reserved_total -= t->reserved;
    t->reserved = 0;
  }
}

/* Publish the last value given to submit, once.  Under mu, with no work of
 * the device running. */
static void publish_last(struct mc_dev *d) {
  if (d->final_written) return;
  d->final_written = 1;
  atomic_store_explicit(d->word, d->last_value, memory_order_release);
  pthread_cond_broadcast(&d->event_cv);
  /* The last value is in and no work of d runs any more: the fence slot
   * has done its job, hand it to the next device. */
  if (d->flags & MC_WORD_EARLY) pool_give(d);
}

static void fault(struct mc_dev *d, const char *why, uint64_t a) {
  if (d->faulted) return;
  d->faulted = 1;
  snprintf(d->fault_msg, sizeof d->fault_msg, "blindmc: %s (0x%llx)", why, (unsigned long long)a);
  pthread_cond_broadcast(&d->event_cv);
}

/* ------------------------------------------------------------- worker */

/* Wait on work_cv until [ms] pass (ms < 0: for ever) or stop.  Under mu. */
static void pause_ms(struct mc_dev *d, int64_t ms) {
  struct timespec ts;
  if (ms >= 0) deadline_after(&ts, ms);
  while (!d->stopping) {
    int rc = ms >= 0 ? pthread_cond_timedwait(&d->work_cv, &d->mu, &ts) : pthread_cond_wait(&d->work_cv, &d->mu);
    if (rc == ETIMEDOUT) break;
  }
}

/* The memory [h] names, [off, off+len) of it, or NULL.  Under mu. */
static char *span(struct mc_dev *d, uint64_t h, uint64_t off, uint64_t len) {
  struct obj *o = lookup(d, h);
  if (!o || (o->kind != OBJ_MEM && o->kind != OBJ_MAP)) return NULL;
  if (off > o->size || len > o->size - off) return NULL;
  return o->addr + off;
}

/* Run one part.  Under mu; gives it up around memory traffic (rig frees
 * nothing that work may still use: MEM-3). */
static void run_part(struct mc_dev *d, const struct rig_part *p) {
  switch (p->op) {
  case RIG_OP_FILL: {
    char *dst = span(d, p->a[0], p->a[1], p->a[2]);
    if (!dst) return fault(d, "Fill out of a region's bounds or of no region", p->a[0]);
    pthread_mutex_unlock(&d->mu);
    memset(dst, (int)(p->a[3] & 0xff), p->a[2]);
    pthread_mutex_lock(&d->mu);
    return;
  }
  case RIG_OP_COPY: {
    char *src = span(d, p->a[0], p->a[1], p->a[4]);
    char *dst = span(d, p->a[2], p->a[3], p->a[4]);
    if (!src || !dst) return fault(d, "Copy out of a region's bounds or of no region", src ? p->a[2] : p->a[0]);
    pthread_mutex_unlock(&d->mu);
    memmove(dst, src, p->a[4]);
    pthread_mutex_lock(&d->mu);
    return;
  }
  case RIG_OP_LAUNCH: {
    struct obj *e = lookup(d, p->a[0]);
    if (!e || e->kind != OBJ_ENTRY) return fault(d, "Launch of no entry", p->a[0]);
    switch (e->fn) {
    case FN_SPIN: return pause_ms(d, (int64_t)(p->a[1] > 60000 ? 60000 : p->a[1]));
    case FN_HANG: return pause_ms(d, -1);
    case FN_FAULT: return fault(d, "the function faulted", p->a[0]);
    default:
      if (e->size) {
        char *s = e->addr;
        uint64_t n = e->size;
        pthread_mutex_unlock(&d->mu);
        memset(s, 0, n);
        pthread_mutex_lock(&d->mu);
      }
      return;
    }
  }
  default:
    return fault(d, "unknown part", p->op);
  }
}

static void *worker(void *arg) {
  struct mc_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stopping && (d->faulted || !d->run_head)) pthread_cond_wait(&d->work_cv, &d->mu);
    if (d->stopping) break;
    struct slot *s = d->run_head;
    d->run_head = s->next;
    if (!d->run_head) d->run_tail = NULL;
    s->next = NULL;
    if (s->signal) {
      atomic_store_explicit(d->word, s->value, memory_order_release);
      slots_give(d, s);
      pthread_cond_broadcast(&d->event_cv);
      continue;
    }
    struct rig_part p = s->part;
    slots_give(d, s);
    d->busy = 1;
    run_part(d, &p);
    d->busy = 0;
  }
  /* Stopped: what was committed and not run is dropped; no work runs any
   * more, so the last value goes in now if stop could not write it. */
  slots_give(d, d->run_head);
  d->run_head = d->run_tail = NULL;
  publish_last(d);
  /* Release the queues: stop made them useless (STOP-5). */
  for (int i = 0; i < MAX_THREADS; i++) {
    struct thr *t = &d->thr[i];
    if (!t->used) continue;
    blocks_free(d, t->earmark);
    t->earmark = NULL;
    t->used = 0;
  }
  blocks_free(d, d->blocks);
  d->blocks = NULL;
  /* Tear the device down: its memory goes back with its queues. */
  if (d->flags & MC_STOP_FREES_MEM) {
    for (uint32_t i = 1; i < d->n_objs; i++) {
      struct obj *o = &d->objs[i];
      if (o->kind != OBJ_MEM) continue;
      free(o->addr);
      obj_drop(d, o);
    }
  }
  d->free_slots = NULL;
  d->free_count = 0;
  d->reserved_total = 0;
  pthread_mutex_unlock(&d->mu);
  dev_release(d);
  return NULL;
}

/* --------------------------------------------------- the C functions */

static int mc_room(void *dev, const struct rig_submission *s) {
  struct mc_dev *d = dev;
  uint32_t need = s->n_parts + 1;
  int answer = RIG_GROW;
  pthread_mutex_lock(&d->mu);
  struct thr *t = thr_find(d, 1);
  if (t && !d->stopping) {
    d->reserved_total -= t->reserved;
    t->reserved = 0;
    uint32_t avail = d->free_count - d->reserved_total;
    if ((uint64_t)avail + t->earmark_slots >= need) {
      blocks_adopt(d, t->earmark);
      t->earmark = NULL;
      t->earmark_slots = 0;
      t->need = 0;
      t->reserved = need;
      d->reserved_total += need;
      answer = RIG_ROOM;
    } else {
      /* grow makes room for the whole submission, for this thread alone:
       * once it answers Grown, room answers RIG_ROOM whatever other threads
       * took meanwhile (QUEUE-2). */
      t->need = need;
    }
    thr_maybe_free(t);
  }
  pthread_mutex_unlock(&d->mu);
  return answer;
}

static int mc_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct mc_dev *d = dev;
  uint32_t need = s->n_parts + 1;
  int rc = 1;
  pthread_mutex_lock(&d->mu);
  d->last_value = value; /* also for a failed submit (STOP-3) */
  struct thr *t = thr_find(d, 0);
  if (d->stopping || !t || t->reserved < need) goto out;
  for (uint32_t i = 0; i < s->n_parts; i++) {
    const struct rig_part *p = &s->parts[i];
    if (p->op < RIG_OP_FILL || p->op > RIG_OP_LAUNCH) goto out;
    /* the refused function of the kit: its launches are refused here */
    struct obj *e = p->op == RIG_OP_LAUNCH ? lookup(d, p->a[0]) : NULL;
    if (e && e->kind == OBJ_ENTRY && e->fn == FN_REFUSE) goto out;
  }
  for (uint32_t i = 0; i <= s->n_parts; i++) {
    struct slot *sl = d->free_slots;
    d->free_slots = sl->next;
    d->free_count--;
    sl->next = NULL;
    if (i < s->n_parts) {
      sl->part = s->parts[i];
      sl->signal = 0;
    } else {
      sl->signal = 1;
      sl->value = value;
    }
    if (t->open_tail) t->open_tail->next = sl;
    else t->open_head = sl;
    t->open_tail = sl;
  }
  t->reserved -= need;
  d->reserved_total -= need;
  rc = 0;
out:
  if (t) thr_maybe_free(t);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

static int mc_commit(void *dev) {
  struct mc_dev *d = dev;
  int rc = 0;
  pthread_mutex_lock(&d->mu);
  struct thr *t = thr_find(d, 0);
  if (d->stopping) rc = 1;
  else if (t && t->open_head) {
    if (d->run_tail) d->run_tail->next = t->open_head;
    else d->run_head = t->open_head;
    d->run_tail = t->open_tail;
    t->open_head = t->open_tail = NULL;
    pthread_cond_signal(&d->work_cv);
  }
  if (t) thr_maybe_free(t);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

static const struct rig_queue_fns mc_table = { mc_room, mc_submit, mc_commit };

/* ------------------------------------------------------- OCaml device */

static void dev_release(struct mc_dev *d) {
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  pool_give(d);
  for (uint32_t i = 1; i < d->n_objs; i++) {
    struct obj *o = &d->objs[i];
    if (o->kind == OBJ_MEM || (o->kind == OBJ_ENTRY && o->addr)) free(o->addr);
  }
  free(d->objs);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->work_cv);
  pthread_cond_destroy(&d->event_cv);
  free(d);
}

#define Dev_val(v) (*(struct mc_dev **)Data_custom_val(v))

static void dev_finalize(value v) {
  struct mc_dev *d = Dev_val(v);
  if (d) dev_release(d);
}

static struct custom_operations dev_ops = {
  "rig.blindmc.dev", dev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* mc_open capacity: a new device with [capacity] bytes of Device memory and
 * its worker thread.  Called with signals blocked (rig_mask): the worker
 * inherits that mask, and sets it again itself to be sure (SIG-8). */
CAMLprim value mc_open(value vcap, value vflags) {
  CAMLparam2(vcap, vflags);
  CAMLlocal1(v);
  struct mc_dev *d = calloc(1, sizeof *d);
  if (!d) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work_cv, &ca);
  pthread_cond_init(&d->event_cv, &ca);
  pthread_condattr_destroy(&ca);
  d->capacity = Long_val(vcap);
  d->flags = Int_val(vflags);
  d->slot = -1;
  atomic_init(&d->own_word, 0);
  d->word = &d->own_word;
  if (d->flags & MC_WORD_POOL) {
    d->slot = pool_take();
    if (d->slot >= 0) d->word = &pool_words[d->slot];
  }
  atomic_init(&d->refs, 2);
  struct block *bs = NULL;
  for (int i = 0; i < INITIAL_BLOCKS; i++) {
    struct block *b = block_new(d);
    if (!b) break;
    b->next = bs;
    bs = b;
  }
  blocks_adopt(d, bs);
  /* The worker: every signal blocked but the fault signals, for its life. */
  sigset_t old;
  rig_mask(&old);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, worker, d);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
  if (rc != 0) {
    atomic_store(&d->refs, 1);
    dev_release(d);
    caml_failwith("blindmc: cannot start the device's thread");
  }
  v = caml_alloc_custom(&dev_ops, sizeof(struct mc_dev *), 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

CAMLprim value mc_dev_ptr(value v) { return caml_copy_nativeint((intnat)Dev_val(v)); }
CAMLprim value mc_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&mc_table); }

/* mc_alloc dev charged n: a region of n bytes (0: none). */
CAMLprim value mc_alloc(value v, value vcharged, value vn) {
  struct mc_dev *d = Dev_val(v);
  int64_t n = Long_val(vn);
  int charged = Bool_val(vcharged);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  if (n > 0 && (!charged || d->used + n <= d->capacity)) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)n) == 0) {
      uint32_t i = obj_new(d);
      if (i) {
        struct obj *o = &d->objs[i];
        o->kind = OBJ_MEM;
        o->charged = (uint8_t)charged;
        o->addr = p;
        o->size = (uint64_t)n;
        if (charged) d->used += n;
        h = handle_of(d, i);
      } else free(p);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* mc_map dev addr n: a mapping of host memory (0: none). */
CAMLprim value mc_map(value v, value vaddr, value vn) {
  struct mc_dev *d = Dev_val(v);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  uint32_t i = obj_new(d);
  if (i) {
    struct obj *o = &d->objs[i];
    o->kind = OBJ_MAP;
    o->addr = (char *)Nativeint_val(vaddr);
    o->size = (uint64_t)Long_val(vn);
    h = handle_of(d, i);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* mc_map_peer dev src h: dev's mapping of src's object h (0: none). */
CAMLprim value mc_map_peer(value v, value vsrc, value vh) {
  struct mc_dev *s = Dev_val(vsrc);
  pthread_mutex_lock(&s->mu);
  struct obj *o = lookup(s, (uint64_t)Long_val(vh));
  char *addr = o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP) ? o->addr : NULL;
  uint64_t size = addr ? o->size : 0;
  pthread_mutex_unlock(&s->mu);
  if (!addr) return Val_long(0);
  struct mc_dev *d = Dev_val(v);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  uint32_t i = obj_new(d);
  if (i) {
    d->objs[i].kind = OBJ_MAP;
    d->objs[i].addr = addr;
    d->objs[i].size = size;
    h = handle_of(d, i);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* mc_free dev h: false if h names nothing. */
CAMLprim value mc_free(value v, value vh) {
  struct mc_dev *d = Dev_val(v);
  char *mem = NULL;
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  struct obj *o = lookup(d, (uint64_t)Long_val(vh));
  if (o && o->kind != OBJ_NONE) {
    if (o->kind == OBJ_MEM || o->kind == OBJ_ENTRY) mem = o->addr;
    obj_drop(d, o);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  free(mem);
  return Val_bool(ok);
}

/* mc_access dev h off buf boff len write: copies between the object's bytes
 * and buf; false if out of bounds or of no object. */
CAMLprim value mc_access(value v, value vh, value voff, value vbuf, value vboff, value vlen, value vwrite) {
  struct mc_dev *d = Dev_val(v);
  uint64_t off = (uint64_t)Long_val(voff), len = (uint64_t)Long_val(vlen);
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  char *p = span(d, (uint64_t)Long_val(vh), off, len);
  if (p) {
    char *b = (char *)Bytes_val(vbuf) + Long_val(vboff);
    if (Bool_val(vwrite)) memcpy(p, b, len);
    else memcpy(b, p, len);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  return Val_bool(ok);
}
CAMLprim value mc_access_byte(value *argv, int argn) {
  (void)argn;
  return mc_access(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6]);
}

/* mc_entry dev fn scratch: an entry of function kind fn with [scratch]
 * bytes of Device memory: its handle, or 0 when the budget lacks them. */
CAMLprim value mc_entry(value v, value vfn, value vscratch) {
  struct mc_dev *d = Dev_val(v);
  int64_t n = Long_val(vscratch);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  if (d->used + n <= d->capacity) {
    void *p = NULL;
    if (n == 0 || posix_memalign(&p, 64, (size_t)n) == 0) {
      uint32_t i = obj_new(d);
      if (i) {
        struct obj *o = &d->objs[i];
        o->kind = OBJ_ENTRY;
        o->fn = (uint8_t)Int_val(vfn);
        o->charged = 1;
        o->addr = p;
        o->size = (uint64_t)n;
        d->used += n;
        h = handle_of(d, i);
      } else free(p);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

CAMLprim value mc_capacity(value v) { return Val_long(Dev_val(v)->capacity); }

/* mc_grow dev: 0 (Grown) or the bytes still missing (Short n). */
CAMLprim value mc_grow(value v) {
  struct mc_dev *d = Dev_val(v);
  int64_t missing = 0;
  pthread_mutex_lock(&d->mu);
  struct thr *t = thr_find(d, 0);
  if (!t) missing = 0; /* nothing asked to grow on this thread */
  else {
    while (t->earmark_slots < t->need) {
      struct block *b = block_new(d);
      if (!b) break;
      b->next = t->earmark;
      t->earmark = b;
      t->earmark_slots += SLOTS_PER_BLOCK;
    }
    if (t->earmark_slots < t->need) {
      missing = (int64_t)((t->need - t->earmark_slots + SLOTS_PER_BLOCK - 1) / SLOTS_PER_BLOCK) * BLOCK_BYTES;
      if (d->flags & MC_GROW_ROLLBACK) {
        /* all or nothing: a growth that cannot complete keeps nothing */
        blocks_free(d, t->earmark);
        t->earmark = NULL;
        t->earmark_slots = 0;
      }
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long(missing);
}

/* The word, with acquire order: no lock, no allocation (TIME-1, LOCK-5). */
CAMLprim value mc_signaled(value v) {
  return Val_long((intnat)atomic_load_explicit(Dev_val(v)->word, memory_order_acquire));
}

/* mc_wait dev seen ms: blocks, without the OCaml runtime (SIG-3), until the
 * word differs from seen, the device faults, stops, or ms pass. */
CAMLprim value mc_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  struct mc_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t ms = Long_val(vms);
  struct timespec ts;
  deadline_after(&ts, ms < 0 ? 0 : ms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  while (atomic_load_explicit(d->word, memory_order_acquire) == seen && !d->faulted && !d->stopping)
    if (pthread_cond_timedwait(&d->event_cv, &d->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* mc_fault dev: Some why once the device faulted.  The fault stays
 * recorded: every later sleep raises it (TIME-5). */
CAMLprim value mc_fault(value v) {
  CAMLparam1(v);
  CAMLlocal1(msg);
  struct mc_dev *d = Dev_val(v);
  char buf[sizeof d->fault_msg];
  int faulted;
  pthread_mutex_lock(&d->mu);
  faulted = d->faulted;
  if (faulted) memcpy(buf, d->fault_msg, sizeof buf);
  pthread_mutex_unlock(&d->mu);
  if (!faulted) CAMLreturn(Val_none);
  msg = caml_copy_string(buf);
  CAMLreturn(caml_alloc_some(msg));
}

/* mc_stop dev publish: stops the device without waiting for its work.
 * Drops what was encoded and not committed (STOP-4); with no work running,
 * writes the last value given to submit now (STOP-3), else the worker does
 * once its part ends.  With publish false (abort), the word keeps what it
 * reads. */
CAMLprim value mc_stop(value v, value vpublish) {
  struct mc_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  if (!d->stopping) {
    d->stopping = 1;
    if (!Bool_val(vpublish)) d->final_written = 1;
    drop_encoded(d);
    if (!d->busy) publish_last(d);
    pthread_cond_broadcast(&d->work_cv);
    pthread_cond_broadcast(&d->event_cv);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* mc_busy dev: committed work not yet done (false once stopped or faulted). */
CAMLprim value mc_busy(value v) {
  struct mc_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int busy = !d->stopping && !d->faulted && (d->busy || d->run_head != NULL);
  pthread_mutex_unlock(&d->mu);
  return Val_bool(busy);
}

CAMLprim value mc_stopped(value v) {
  struct mc_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int s = d->stopping;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(s);
}

/* mc_word_release dev: rig frees the device's word.  A pool slot goes back
 * to the pool once the last value is in it (the device is stopped and no
 * work of it runs); otherwise the device's end gives it back. */
CAMLprim value mc_word_release(value v) {
  struct mc_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int done = d->stopping && d->final_written;
  pthread_mutex_unlock(&d->mu);
  if (done) pool_give(d);
  return Val_unit;
}
