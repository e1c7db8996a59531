/* blindcl: hostmem's device (drivers/hostmem/hostmem_stubs.c), copied with
 * the prefix cl_, and a per-device mode (CL_* below, fixed at open) that the
 * cl-* drivers of blindcl.ml set, one twist each, all about what locate,
 * peer and signaled do in C (LOCK-5, LOCK-6):
 *
 *   CL_LOCATE_MUTEX    cl_locate reads the region's size from the object
 *                      table under the device's mutex (mu)
 *   CL_LOCATE_SPIN     alloc/free mirror each object's size into a side table
 *                      guarded by a pthread spinlock; cl_locate reads it
 *                      under that spinlock
 *   CL_LOCATE_SLOWPATH cl_locate probes a lock-free cache first and takes mu
 *                      on a miss; the cache is only filled for objects
 *                      flagged OBJ_CACHEABLE, which nothing ever sets, so
 *                      every call misses and takes mu
 *   CL_PEER_TRYLOCK    cl_peer reads both devices' fabric from the global
 *                      registry (filled at open) under pthread_mutex_trylock,
 *                      and answers from the default when the try fails
 *   CL_PEER_C11MTX     the same registry, a C11 one, read under mtx_lock
 *   CL_SIG_RWLOCK      the word's stores take a pthread rwlock for writing;
 *                      cl_signaled reads the word under it for reading
 *   CL_SIG_BARRIER     cl_signaled locks and unlocks mu with nothing between
 *                      ("a full barrier") before its acquire load
 *   CL_OK_ATOMICS      every object's (generation, size) is mirrored (under
 *                      mu) into a fixed array of C11 atomics; cl_locate and
 *                      cl_peer read atomics only
 *   CL_OK_SEQLOCK      the same mirror (and the fabric) under a seqlock: the
 *                      readers retry (a bounded number of times, then fall
 *                      back to the caller's answer), take nothing
 *   CL_OK_HELPER       a helper thread takes mu, a spinlock and an rwlock
 *                      in a loop for the device's life; locate takes none
 *   CL_OK_FINALISER    make registers the device in the global registry;
 *                      free and the device's OCaml finaliser (cl_retire)
 *                      take the registry's pthread mutex
 *   CL_OK_SNAPSHOT     make takes the registry mutex to publish an immutable
 *                      fabric snapshot (atomic pointer); alloc/free publish
 *                      sizes into a growable table swapped by atomic pointer
 *                      (old tables retired until the device dies): locate
 *                      and peer read the snapshots, lock-free
 *   CL_OK_RING         cl_locate records the handle in a wait-free telemetry
 *                      ring (fetch_add on its head); commit drains it under mu
 *   CL_OK_FENCE        cl_signaled is a relaxed load and an acquire fence
 *
 * None of these locks is ever held across anything that blocks or runs
 * OCaml code: each is held for a few loads and stores of C code.
 *
 * hostmem's own comment follows.
 */
/* hostmem: a rig driver whose device is the host.
 *
 * The device (struct cl_dev):
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
#include <stdio.h>
#include <sched.h>
#include <threads.h>

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
  uint8_t flags;     /* OBJ_CACHEABLE (CL_LOCATE_SLOWPATH) */
  char *addr;        /* memory (or scratch) */
  uint64_t size;
  uint32_t next_free;
};

/* An object whose size may be cached by cl_locate's fast path: meant for
 * regions that never move.  (CL_LOCATE_SLOWPATH: never set anywhere.) */
#define OBJ_CACHEABLE 1

/* ------------------------------------------------------------- modes */

enum cl_mode {
  CL_PLAIN = 0,
  CL_LOCATE_MUTEX = 1,
  CL_LOCATE_SPIN = 2,
  CL_LOCATE_SLOWPATH = 3,
  CL_PEER_TRYLOCK = 4,
  CL_PEER_C11MTX = 5,
  CL_SIG_RWLOCK = 6,
  CL_SIG_BARRIER = 7,
  CL_OK_ATOMICS = 8,
  CL_OK_SEQLOCK = 9,
  CL_OK_HELPER = 10,
  CL_OK_FINALISER = 11,
  CL_OK_SNAPSHOT = 12,
  CL_OK_RING = 13,
  CL_OK_FENCE = 14,
};

#define SNAP_N 16384   /* fixed mirrors: objects past this index are not mirrored */
#define CACHE_N 256
#define RING_N 1024
#define SEQ_TRIES 64
#define SIZE_MASK 0xffffffffULL

/* A seqlock-guarded mirror entry (CL_OK_SEQLOCK). */
struct seqent {
  _Atomic uint32_t gen, kind;
  _Atomic uint64_t size;
};

/* A growable lock-free mirror (CL_OK_SNAPSHOT). */
struct snaptab {
  struct snaptab *retired_next;
  uint32_t cap;
  _Atomic uint64_t ent[];
};

/* What a device learned at open about its fabric (CL_OK_SNAPSHOT). */
struct fabsnap {
  uint32_t fabric;
  uint64_t serial;
};

struct cache_ent {
  _Atomic uint64_t h, size;
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

struct cl_dev {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* the worker waits here for work or stop */
  pthread_cond_t event_cv;  /* sleepers wait here for the word or a fault */
  _Atomic uint64_t word;
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

  /* blindcl */
  int mode;                 /* enum cl_mode, fixed at open */
  pthread_spinlock_t spin;  /* CL_LOCATE_SPIN: spin_sizes; CL_OK_HELPER */
  pthread_rwlock_t word_rw; /* CL_SIG_RWLOCK: the word's stores; CL_OK_HELPER */
  uint64_t *spin_sizes;     /* CL_LOCATE_SPIN: gen << 32 | size, under spin */
  struct cache_ent cache[CACHE_N];  /* CL_LOCATE_SLOWPATH */
  _Atomic uint64_t *asnap;  /* CL_OK_ATOMICS: gen << 32 | size */
  _Atomic uint32_t fabric;  /* CL_OK_ATOMICS */
  struct seqent *ssnap;     /* CL_OK_SEQLOCK */
  _Atomic uint32_t sseq;    /* CL_OK_SEQLOCK: ssnap's sequence */
  _Atomic uint32_t fseq, ffabric;   /* CL_OK_SEQLOCK: the fabric, seqlocked */
  _Atomic uint64_t fserial;
  _Atomic(struct snaptab *) tab;    /* CL_OK_SNAPSHOT */
  struct snaptab *retired;          /* CL_OK_SNAPSHOT: old tabs, under mu */
  _Atomic(struct fabsnap *) fsnap;  /* CL_OK_SNAPSHOT */
  _Atomic uint64_t ring[RING_N];    /* CL_OK_RING */
  _Atomic uint64_t ring_head;
  uint64_t ring_tail, ring_seen;    /* under mu */
  atomic_int orphan;        /* CL_OK_HELPER: the OCaml device is gone */
  uint64_t helper_ticks;    /* CL_OK_HELPER: under spin */
  uint64_t helper_live;     /* CL_OK_HELPER: under mu */
  int retired_dev;          /* CL_OK_FINALISER: under mu */
};

static void dev_release(struct cl_dev *d);

/* ------------------------------------------------------------ registry */

/* The devices opened, with the fabric each learned at open (every device of
 * this process shares fabric 0: host memory).  Two registries, one under a
 * pthread mutex, one under a C11 mutex.  Held for a scan of at most REG_N
 * entries; nothing that blocks or runs OCaml code happens under them. */
#define REG_N 4096
struct reg_ent {
  struct cl_dev *dev;
  uint32_t fabric;
};
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reg_ent reg_p[REG_N];
static uint64_t reg_serial;        /* under reg_mu */
static uint64_t reg_freed_bytes;   /* under reg_mu (CL_OK_FINALISER) */
static uint64_t reg_retired;       /* under reg_mu (CL_OK_FINALISER) */
static mtx_t reg_c11_mu;
static struct reg_ent reg_c[REG_N];

__attribute__((constructor)) static void reg_init(void) { mtx_init(&reg_c11_mu, mtx_plain); }

static void reg_add(struct reg_ent *r, struct cl_dev *d, uint32_t fabric) {
  for (int i = 0; i < REG_N; i++)
    if (!r[i].dev) {
      r[i].dev = d;
      r[i].fabric = fabric;
      return;
    }
}

static void reg_del(struct reg_ent *r, struct cl_dev *d) {
  for (int i = 0; i < REG_N; i++)
    if (r[i].dev == d) r[i].dev = NULL;
}

/* The fabric d learned at open, or -1 if it is not registered. */
static int64_t reg_find(const struct reg_ent *r, const struct cl_dev *d) {
  for (int i = 0; i < REG_N; i++)
    if (r[i].dev == d) return r[i].fabric;
  return -1;
}

static int uses_reg_p(int mode) {
  return mode == CL_PEER_TRYLOCK || mode == CL_OK_FINALISER || mode == CL_OK_SNAPSHOT;
}

/* ------------------------------------------------------------- mirrors */

/* The word's stores (release order).  CL_SIG_RWLOCK takes word_rw for
 * writing around them. */
static void word_store(struct cl_dev *d, uint64_t v) {
  if (d->mode == CL_SIG_RWLOCK) pthread_rwlock_wrlock(&d->word_rw);
  atomic_store_explicit(&d->word, v, memory_order_release);
  if (d->mode == CL_SIG_RWLOCK) pthread_rwlock_unlock(&d->word_rw);
}

/* A growable mirror of cap entries, old's copied in.  Under mu. */
static struct snaptab *tab_new(struct snaptab *old, uint32_t cap) {
  struct snaptab *t = calloc(1, sizeof *t + (size_t)cap * sizeof(_Atomic uint64_t));
  if (!t) return NULL;
  t->cap = cap;
  for (uint32_t i = 0; i < cap; i++) atomic_init(&t->ent[i], 0);
  if (old)
    for (uint32_t i = 0; i < old->cap; i++)
      atomic_init(&t->ent[i], atomic_load_explicit(&old->ent[i], memory_order_relaxed));
  return t;
}

/* Mirror object i (its generation and size, or nothing once it is no
 * region) for the lock-free and locked side tables of the modes.  Under mu;
 * called after each change of the object. */
static void mirror(struct cl_dev *d, uint32_t i) {
  struct obj *o = &d->objs[i];
  int region = o->kind == OBJ_MEM || o->kind == OBJ_MAP;
  uint64_t packed = region && o->size < SIZE_MASK ? ((uint64_t)o->gen << 32) | o->size : 0;
  switch (d->mode) {
  case CL_LOCATE_SPIN:
    if (i < SNAP_N) {
      pthread_spin_lock(&d->spin);
      d->spin_sizes[i] = packed;
      pthread_spin_unlock(&d->spin);
    }
    break;
  case CL_OK_ATOMICS:
    if (i < SNAP_N) atomic_store_explicit(&d->asnap[i], packed, memory_order_release);
    break;
  case CL_OK_SEQLOCK:
    if (i < SNAP_N) {
      uint32_t q = atomic_load_explicit(&d->sseq, memory_order_relaxed);
      atomic_store_explicit(&d->sseq, q + 1, memory_order_relaxed);
      atomic_thread_fence(memory_order_release);
      atomic_store_explicit(&d->ssnap[i].gen, o->gen, memory_order_relaxed);
      atomic_store_explicit(&d->ssnap[i].kind, region ? o->kind : OBJ_NONE, memory_order_relaxed);
      atomic_store_explicit(&d->ssnap[i].size, o->size, memory_order_relaxed);
      atomic_store_explicit(&d->sseq, q + 2, memory_order_release);
    }
    break;
  case CL_OK_SNAPSHOT: {
    struct snaptab *t = atomic_load_explicit(&d->tab, memory_order_relaxed);
    if (t && i >= t->cap) {
      uint32_t cap = t->cap;
      while (cap <= i) cap *= 2;
      struct snaptab *n = tab_new(t, cap);
      if (n) {
        /* readers may still hold t: it is kept until the device dies */
        t->retired_next = d->retired;
        d->retired = t;
        atomic_store_explicit(&d->tab, n, memory_order_release);
        t = n;
      }
    }
    if (t && i < t->cap) atomic_store_explicit(&t->ent[i], packed, memory_order_release);
    break;
  }
  default:
    break;
  }
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

static uint64_t handle_of(struct cl_dev *d, uint32_t i) { return ((uint64_t)d->objs[i].gen << 32) | i; }

/* The object a handle names, or NULL.  Under mu. */
static struct obj *lookup(struct cl_dev *d, uint64_t h) {
  uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
  if (i == 0 || i >= d->n_objs) return NULL;
  struct obj *o = &d->objs[i];
  if (o->kind == OBJ_NONE || o->gen != gen) return NULL;
  return o;
}

/* A new object; 0 when the host has no memory for the table.  Under mu. */
static uint32_t obj_new(struct cl_dev *d) {
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

static void obj_drop(struct cl_dev *d, struct obj *o) {
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
  mirror(d, i);
}

static struct thr *thr_find(struct cl_dev *d, int create) {
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

static void slots_give(struct cl_dev *d, struct slot *s) {
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
static struct block *block_new(struct cl_dev *d) {
  if (d->used + BLOCK_BYTES > d->capacity) return NULL;
  struct block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  d->used += BLOCK_BYTES;
  return b;
}

/* Put blocks into the queues' pool.  Under mu. */
static void blocks_adopt(struct cl_dev *d, struct block *b) {
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

static void blocks_free(struct cl_dev *d, struct block *b) {
  while (b) {
    struct block *n = b->next;
    free(b);
    d->used -= BLOCK_BYTES;
    b = n;
  }
}

/* Drop every thread's encoded work and reservations.  Under mu. */
static void drop_encoded(struct cl_dev *d) {
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
static void publish_last(struct cl_dev *d) {
  if (d->final_written) return;
  d->final_written = 1;
  word_store(d, d->last_value);
  pthread_cond_broadcast(&d->event_cv);
}

static void fault(struct cl_dev *d, const char *why, uint64_t a) {
  if (d->faulted) return;
  d->faulted = 1;
  snprintf(d->fault_msg, sizeof d->fault_msg, "blindcl: %s (0x%llx)", why, (unsigned long long)a);
  pthread_cond_broadcast(&d->event_cv);
}

/* ------------------------------------------------------------- worker */

/* Wait on work_cv until [ms] pass (ms < 0: for ever) or stop.  Under mu. */
static void pause_ms(struct cl_dev *d, int64_t ms) {
  struct timespec ts;
  if (ms >= 0) deadline_after(&ts, ms);
  while (!d->stopping) {
    int rc = ms >= 0 ? pthread_cond_timedwait(&d->work_cv, &d->mu, &ts) : pthread_cond_wait(&d->work_cv, &d->mu);
    if (rc == ETIMEDOUT) break;
  }
}

/* The memory [h] names, [off, off+len) of it, or NULL.  Under mu. */
static char *span(struct cl_dev *d, uint64_t h, uint64_t off, uint64_t len) {
  struct obj *o = lookup(d, h);
  if (!o || (o->kind != OBJ_MEM && o->kind != OBJ_MAP)) return NULL;
  if (off > o->size || len > o->size - off) return NULL;
  return o->addr + off;
}

/* Run one part.  Under mu; gives it up around memory traffic (rig frees
 * nothing that work may still use: MEM-3). */
static void run_part(struct cl_dev *d, const struct rig_part *p) {
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
  struct cl_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stopping && (d->faulted || !d->run_head)) pthread_cond_wait(&d->work_cv, &d->mu);
    if (d->stopping) break;
    struct slot *s = d->run_head;
    d->run_head = s->next;
    if (!d->run_head) d->run_tail = NULL;
    s->next = NULL;
    if (s->signal) {
      word_store(d, s->value);
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
  d->free_slots = NULL;
  d->free_count = 0;
  d->reserved_total = 0;
  pthread_mutex_unlock(&d->mu);
  dev_release(d);
  return NULL;
}

/* --------------------------------------------------- the C functions */

static int cl_room(void *dev, const struct rig_submission *s) {
  struct cl_dev *d = dev;
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

static int cl_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct cl_dev *d = dev;
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

static int cl_commit(void *dev) {
  struct cl_dev *d = dev;
  int rc = 0;
  pthread_mutex_lock(&d->mu);
  struct thr *t = thr_find(d, 0);
  if (d->mode == CL_OK_RING) {
    /* what locate recorded since the last commit: how many of the handles
     * it was asked for still name an object (telemetry only) */
    uint64_t head = atomic_load_explicit(&d->ring_head, memory_order_acquire);
    if (head - d->ring_tail > RING_N) d->ring_tail = head - RING_N;
    for (; d->ring_tail < head; d->ring_tail++)
      if (lookup(d, atomic_load_explicit(&d->ring[d->ring_tail % RING_N], memory_order_relaxed))) d->ring_seen++;
  }
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

static const struct rig_queue_fns cl_table = { cl_room, cl_submit, cl_commit };

/* ------------------------------------------------------- OCaml device */

static void dev_release(struct cl_dev *d) {
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  for (uint32_t i = 1; i < d->n_objs; i++) {
    struct obj *o = &d->objs[i];
    if (o->kind == OBJ_MEM || (o->kind == OBJ_ENTRY && o->addr)) free(o->addr);
  }
  free(d->objs);
  if (uses_reg_p(d->mode)) {
    pthread_mutex_lock(&reg_mu);
    reg_del(reg_p, d);
    pthread_mutex_unlock(&reg_mu);
  }
  if (d->mode == CL_PEER_C11MTX) {
    mtx_lock(&reg_c11_mu);
    reg_del(reg_c, d);
    mtx_unlock(&reg_c11_mu);
  }
  free(d->spin_sizes);
  free(d->asnap);
  free(d->ssnap);
  free(atomic_load(&d->tab));
  for (struct snaptab *t = d->retired, *n; t; t = n) {
    n = t->retired_next;
    free(t);
  }
  free(atomic_load(&d->fsnap));
  pthread_spin_destroy(&d->spin);
  pthread_rwlock_destroy(&d->word_rw);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->work_cv);
  pthread_cond_destroy(&d->event_cv);
  free(d);
}

#define Dev_val(v) (*(struct cl_dev **)Data_custom_val(v))

static void dev_finalize(value v) {
  struct cl_dev *d = Dev_val(v);
  if (!d) return;
  if (d->mode == CL_OK_HELPER) atomic_store_explicit(&d->orphan, 1, memory_order_release);
  dev_release(d);
}

/* CL_OK_HELPER: the device's helper thread, started with the worker's mask
 * (SIG-8).  For the device's life it takes mu (to count live objects), the
 * spinlock and the rwlock, then naps 0.5 ms; it leaves once the device is
 * stopped or its OCaml value is gone. */
static void *helper(void *arg) {
  struct cl_dev *d = arg;
  struct timespec nap = { 0, 500000 };
  while (!atomic_load_explicit(&d->orphan, memory_order_acquire)) {
    pthread_mutex_lock(&d->mu);
    int stop = d->stopping;
    uint64_t live = 0;
    for (uint32_t i = 1; i < d->n_objs; i++) live += d->objs[i].kind != OBJ_NONE;
    d->helper_live = live;
    pthread_mutex_unlock(&d->mu);
    if (stop) break;
    pthread_spin_lock(&d->spin);
    d->helper_ticks++;
    pthread_spin_unlock(&d->spin);
    pthread_rwlock_wrlock(&d->word_rw);
    pthread_rwlock_unlock(&d->word_rw);
    nanosleep(&nap, NULL);
  }
  dev_release(d);
  return NULL;
}

static struct custom_operations dev_ops = {
  "rig.blindcl.dev", dev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* cl_open capacity mode: a new device with [capacity] bytes of Device
 * memory, the twist [mode] (enum cl_mode) and its worker thread (and, for
 * CL_OK_HELPER, its helper thread).  Called with signals blocked (rig_mask):
 * the threads inherit that mask, set again around their creation (SIG-8). */
CAMLprim value cl_open(value vcap, value vmode) {
  CAMLparam2(vcap, vmode);
  CAMLlocal1(v);
  struct cl_dev *d = calloc(1, sizeof *d);
  if (!d) caml_raise_out_of_memory();
  d->mode = Int_val(vmode);
  pthread_spin_init(&d->spin, PTHREAD_PROCESS_PRIVATE);
  pthread_rwlock_init(&d->word_rw, NULL);
  int nomem = 0;
  switch (d->mode) {
  case CL_LOCATE_SPIN:
    nomem = !(d->spin_sizes = calloc(SNAP_N, sizeof *d->spin_sizes));
    break;
  case CL_OK_ATOMICS:
    nomem = !(d->asnap = calloc(SNAP_N, sizeof *d->asnap));
    if (!nomem)
      for (int i = 0; i < SNAP_N; i++) atomic_init(&d->asnap[i], 0);
    atomic_store_explicit(&d->fabric, 0, memory_order_release);
    break;
  case CL_OK_SEQLOCK:
    nomem = !(d->ssnap = calloc(SNAP_N, sizeof *d->ssnap));
    break;
  case CL_OK_SNAPSHOT: {
    struct snaptab *t = tab_new(NULL, 256);
    nomem = !t;
    atomic_init(&d->tab, t);
    break;
  }
  default:
    break;
  }
  if (nomem) {
    free(d->spin_sizes);
    free(d->asnap);
    free(d->ssnap);
    pthread_spin_destroy(&d->spin);
    pthread_rwlock_destroy(&d->word_rw);
    free(d);
    caml_raise_out_of_memory();
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work_cv, &ca);
  pthread_cond_init(&d->event_cv, &ca);
  pthread_condattr_destroy(&ca);
  d->capacity = Long_val(vcap);
  atomic_init(&d->word, 0);
  atomic_init(&d->refs, d->mode == CL_OK_HELPER ? 3 : 2);
  /* What the device learns at open about its fabric: the registries, the
   * seqlocked fabric, the snapshot. */
  if (d->mode == CL_PEER_TRYLOCK || d->mode == CL_OK_FINALISER) {
    pthread_mutex_lock(&reg_mu);
    reg_serial++;
    reg_add(reg_p, d, 0);
    pthread_mutex_unlock(&reg_mu);
  } else if (d->mode == CL_PEER_C11MTX) {
    mtx_lock(&reg_c11_mu);
    reg_add(reg_c, d, 0);
    mtx_unlock(&reg_c11_mu);
  } else if (d->mode == CL_OK_SNAPSHOT) {
    struct fabsnap *f = malloc(sizeof *f);
    pthread_mutex_lock(&reg_mu);
    uint64_t serial = ++reg_serial;
    reg_add(reg_p, d, 0);
    pthread_mutex_unlock(&reg_mu);
    if (f) {
      f->fabric = 0;
      f->serial = serial;
    }
    atomic_store_explicit(&d->fsnap, f, memory_order_release);
  } else if (d->mode == CL_OK_SEQLOCK) {
    pthread_mutex_lock(&d->mu);
    uint32_t q = atomic_load_explicit(&d->fseq, memory_order_relaxed);
    atomic_store_explicit(&d->fseq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&d->ffabric, 0, memory_order_relaxed);
    atomic_store_explicit(&d->fserial, (uint64_t)(uintptr_t)d, memory_order_relaxed);
    atomic_store_explicit(&d->fseq, q + 2, memory_order_release);
    pthread_mutex_unlock(&d->mu);
  }
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
  int hrc = 0;
  if (rc == 0 && d->mode == CL_OK_HELPER) hrc = pthread_create(&tid, &attr, helper, d);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
  if (rc != 0) {
    atomic_store(&d->refs, 1);
    dev_release(d);
    caml_failwith("blindcl: cannot start the device's thread");
  }
  if (hrc != 0) atomic_fetch_sub(&d->refs, 1); /* no helper: its reference goes */
  v = caml_alloc_custom(&dev_ops, sizeof(struct cl_dev *), 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

CAMLprim value cl_dev_ptr(value v) { return caml_copy_nativeint((intnat)Dev_val(v)); }
CAMLprim value cl_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&cl_table); }

/* cl_alloc dev charged n: a region of n bytes (0: none). */
CAMLprim value cl_alloc(value v, value vcharged, value vn) {
  struct cl_dev *d = Dev_val(v);
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
        mirror(d, i);
      } else free(p);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* cl_map dev addr n: a mapping of host memory (0: none). */
CAMLprim value cl_map(value v, value vaddr, value vn) {
  struct cl_dev *d = Dev_val(v);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  uint32_t i = obj_new(d);
  if (i) {
    struct obj *o = &d->objs[i];
    o->kind = OBJ_MAP;
    o->addr = (char *)Nativeint_val(vaddr);
    o->size = (uint64_t)Long_val(vn);
    h = handle_of(d, i);
    mirror(d, i);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* cl_map_peer dev src h: dev's mapping of src's object h (0: none). */
CAMLprim value cl_map_peer(value v, value vsrc, value vh) {
  struct cl_dev *s = Dev_val(vsrc);
  pthread_mutex_lock(&s->mu);
  struct obj *o = lookup(s, (uint64_t)Long_val(vh));
  char *addr = o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP) ? o->addr : NULL;
  uint64_t size = addr ? o->size : 0;
  pthread_mutex_unlock(&s->mu);
  if (!addr) return Val_long(0);
  struct cl_dev *d = Dev_val(v);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  uint32_t i = obj_new(d);
  if (i) {
    d->objs[i].kind = OBJ_MAP;
    d->objs[i].addr = addr;
    d->objs[i].size = size;
    h = handle_of(d, i);
    mirror(d, i);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* cl_free dev h: false if h names nothing. */
CAMLprim value cl_free(value v, value vh) {
  struct cl_dev *d = Dev_val(v);
  char *mem = NULL;
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  struct obj *o = lookup(d, (uint64_t)Long_val(vh));
  uint64_t size = 0;
  if (o && o->kind != OBJ_NONE) {
    if (o->kind == OBJ_MEM || o->kind == OBJ_ENTRY) mem = o->addr;
    size = o->size;
    obj_drop(d, o);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  free(mem);
  if (ok && d->mode == CL_OK_FINALISER) {
    pthread_mutex_lock(&reg_mu);
    reg_freed_bytes += size;
    pthread_mutex_unlock(&reg_mu);
  }
  return Val_bool(ok);
}

/* cl_access dev h off buf boff len write: copies between the object's bytes
 * and buf; false if out of bounds or of no object. */
CAMLprim value cl_access(value v, value vh, value voff, value vbuf, value vboff, value vlen, value vwrite) {
  struct cl_dev *d = Dev_val(v);
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
CAMLprim value cl_access_byte(value *argv, int argn) {
  (void)argn;
  return cl_access(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6]);
}

/* cl_entry dev fn scratch: an entry of function kind fn with [scratch]
 * bytes of Device memory: its handle, or 0 when the budget lacks them. */
CAMLprim value cl_entry(value v, value vfn, value vscratch) {
  struct cl_dev *d = Dev_val(v);
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
        mirror(d, i);
      } else free(p);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

CAMLprim value cl_capacity(value v) { return Val_long(Dev_val(v)->capacity); }

/* cl_grow dev: 0 (Grown) or the bytes still missing (Short n). */
CAMLprim value cl_grow(value v) {
  struct cl_dev *d = Dev_val(v);
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
    if (t->earmark_slots < t->need)
      missing = (int64_t)((t->need - t->earmark_slots + SLOTS_PER_BLOCK - 1) / SLOTS_PER_BLOCK) * BLOCK_BYTES;
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long(missing);
}

/* The word, with acquire order: no allocation (TIME-1).  The modes'
 * twists: CL_SIG_RWLOCK reads it under word_rw, CL_SIG_BARRIER locks and
 * unlocks mu first, CL_OK_FENCE loads it relaxed and fences. */
CAMLprim value cl_signaled(value v) {
  struct cl_dev *d = Dev_val(v);
  uint64_t w;
  switch (d->mode) {
  case CL_SIG_RWLOCK:
    pthread_rwlock_rdlock(&d->word_rw);
    w = atomic_load_explicit(&d->word, memory_order_acquire);
    pthread_rwlock_unlock(&d->word_rw);
    break;
  case CL_SIG_BARRIER:
    /* a full barrier against the worker's last store */
    pthread_mutex_lock(&d->mu);
    pthread_mutex_unlock(&d->mu);
    w = atomic_load_explicit(&d->word, memory_order_acquire);
    break;
  case CL_OK_FENCE:
    w = atomic_load_explicit(&d->word, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    break;
  default:
    w = atomic_load_explicit(&d->word, memory_order_acquire);
    break;
  }
  return Val_long((intnat)w);
}

/* cl_word dev: the word, with acquire order, whatever the mode: what sleep
 * reads (the modes change signaled only). */
CAMLprim value cl_word(value v) {
  return Val_long((intnat)atomic_load_explicit(&Dev_val(v)->word, memory_order_acquire));
}

/* cl_locate dev h size: the size of the region h names, as locate answers
 * it.  [size] is the size the OCaml region records (the same number): the
 * answer wherever the mode's table has nothing for h.  No allocation, no
 * exception. */
CAMLprim value cl_locate(value v, value vh, value vsize) {
  struct cl_dev *d = Dev_val(v);
  uint64_t h = (uint64_t)Long_val(vh);
  uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
  intnat size = Long_val(vsize);
  switch (d->mode) {
  case CL_LOCATE_MUTEX: {
    pthread_mutex_lock(&d->mu);
    struct obj *o = lookup(d, h);
    if (o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP)) size = (intnat)o->size;
    pthread_mutex_unlock(&d->mu);
    break;
  }
  case CL_LOCATE_SPIN:
    if (i < SNAP_N) {
      pthread_spin_lock(&d->spin);
      uint64_t e = d->spin_sizes[i];
      pthread_spin_unlock(&d->spin);
      if (e && (uint32_t)(e >> 32) == gen) size = (intnat)(e & SIZE_MASK);
    }
    break;
  case CL_LOCATE_SLOWPATH: {
    /* fast path: the cache */
    struct cache_ent *c = &d->cache[i % CACHE_N];
    if (h && atomic_load_explicit(&c->h, memory_order_acquire) == h) {
      size = (intnat)atomic_load_explicit(&c->size, memory_order_relaxed);
      break;
    }
    /* slow path: a miss, rare once the cache is warm */
    pthread_mutex_lock(&d->mu);
    struct obj *o = lookup(d, h);
    if (o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP)) {
      size = (intnat)o->size;
      if (o->flags & OBJ_CACHEABLE) {
        atomic_store_explicit(&c->size, o->size, memory_order_relaxed);
        atomic_store_explicit(&c->h, h, memory_order_release);
      }
    }
    pthread_mutex_unlock(&d->mu);
    break;
  }
  case CL_OK_ATOMICS:
    if (i < SNAP_N) {
      uint64_t e = atomic_load_explicit(&d->asnap[i], memory_order_acquire);
      if (e && (uint32_t)(e >> 32) == gen) size = (intnat)(e & SIZE_MASK);
    }
    break;
  case CL_OK_SEQLOCK:
    if (i < SNAP_N)
      for (int k = 0; k < SEQ_TRIES; k++) {
        uint32_t q = atomic_load_explicit(&d->sseq, memory_order_acquire);
        if (q & 1) continue;
        uint32_t g = atomic_load_explicit(&d->ssnap[i].gen, memory_order_relaxed);
        uint32_t kind = atomic_load_explicit(&d->ssnap[i].kind, memory_order_relaxed);
        uint64_t n = atomic_load_explicit(&d->ssnap[i].size, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&d->sseq, memory_order_relaxed) != q) continue;
        if (kind != OBJ_NONE && g == gen) size = (intnat)n;
        break;
      }
    break;
  case CL_OK_SNAPSHOT: {
    struct snaptab *t = atomic_load_explicit(&d->tab, memory_order_acquire);
    if (t && i < t->cap) {
      uint64_t e = atomic_load_explicit(&t->ent[i], memory_order_acquire);
      if (e && (uint32_t)(e >> 32) == gen) size = (intnat)(e & SIZE_MASK);
    }
    break;
  }
  case CL_OK_RING: {
    uint64_t at = atomic_fetch_add_explicit(&d->ring_head, 1, memory_order_relaxed);
    atomic_store_explicit(&d->ring[at % RING_N], h, memory_order_relaxed);
    break;
  }
  default:
    break;
  }
  return Val_long(size);
}

/* The fabric d learned at open, read with the seqlock (CL_OK_SEQLOCK); -1
 * if the reads kept meeting a write. */
static int64_t seq_fabric(struct cl_dev *d) {
  for (int k = 0; k < SEQ_TRIES; k++) {
    uint32_t q = atomic_load_explicit(&d->fseq, memory_order_acquire);
    if (q & 1) continue;
    uint32_t f = atomic_load_explicit(&d->ffabric, memory_order_relaxed);
    (void)atomic_load_explicit(&d->fserial, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&d->fseq, memory_order_relaxed) == q) return f;
  }
  return -1;
}

/* cl_peer d d': whether d maps d''s Device memory: iff both learned the same
 * fabric at open (every device here: fabric 0).  Where a mode learns
 * nothing (a registry miss, a busy try), the answer is the fabric's
 * default, true.  No allocation, no exception. */
CAMLprim value cl_peer(value v1, value v2) {
  struct cl_dev *a = Dev_val(v1), *b = Dev_val(v2);
  int64_t fa = -1, fb = -1;
  switch (a->mode) {
  case CL_PEER_TRYLOCK:
    if (pthread_mutex_trylock(&reg_mu) == 0) {
      fa = reg_find(reg_p, a);
      fb = reg_find(reg_p, b);
      pthread_mutex_unlock(&reg_mu);
    }
    break;
  case CL_PEER_C11MTX:
    if (mtx_lock(&reg_c11_mu) == thrd_success) {
      fa = reg_find(reg_c, a);
      fb = reg_find(reg_c, b);
      mtx_unlock(&reg_c11_mu);
    }
    break;
  case CL_OK_ATOMICS:
    fa = atomic_load_explicit(&a->fabric, memory_order_acquire);
    fb = atomic_load_explicit(&b->fabric, memory_order_acquire);
    break;
  case CL_OK_SEQLOCK:
    fa = seq_fabric(a);
    fb = seq_fabric(b);
    break;
  case CL_OK_SNAPSHOT: {
    struct fabsnap *sa = atomic_load_explicit(&a->fsnap, memory_order_acquire);
    struct fabsnap *sb = atomic_load_explicit(&b->fsnap, memory_order_acquire);
    if (sa) fa = sa->fabric;
    if (sb) fb = sb->fabric;
    break;
  }
  default:
    break;
  }
  return Val_bool(fa < 0 || fb < 0 || fa == fb);
}

/* cl_retire dev: the device's OCaml finaliser (CL_OK_FINALISER): it leaves
 * the registry, under the registry's mutex, and is marked retired, under
 * mu.  Runs no OCaml code under either. */
CAMLprim value cl_retire(value v) {
  struct cl_dev *d = Dev_val(v);
  pthread_mutex_lock(&reg_mu);
  reg_del(reg_p, d);
  reg_retired++;
  pthread_mutex_unlock(&reg_mu);
  pthread_mutex_lock(&d->mu);
  d->retired_dev = 1;
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* cl_wait dev seen ms: blocks, without the OCaml runtime (SIG-3), until the
 * word differs from seen, the device faults, stops, or ms pass. */
CAMLprim value cl_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  struct cl_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t ms = Long_val(vms);
  struct timespec ts;
  deadline_after(&ts, ms < 0 ? 0 : ms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  while (atomic_load_explicit(&d->word, memory_order_acquire) == seen && !d->faulted && !d->stopping)
    if (pthread_cond_timedwait(&d->event_cv, &d->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* cl_fault dev: Some why once the device faulted.  The fault stays
 * recorded: every later sleep raises it (TIME-5). */
CAMLprim value cl_fault(value v) {
  CAMLparam1(v);
  CAMLlocal1(msg);
  struct cl_dev *d = Dev_val(v);
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

/* cl_stop dev publish: stops the device without waiting for its work.
 * Drops what was encoded and not committed (STOP-4); with no work running,
 * writes the last value given to submit now (STOP-3), else the worker does
 * once its part ends.  With publish false (abort), the word keeps what it
 * reads. */
CAMLprim value cl_stop(value v, value vpublish) {
  struct cl_dev *d = Dev_val(v);
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

/* cl_busy dev: committed work not yet done (false once stopped or faulted). */
CAMLprim value cl_busy(value v) {
  struct cl_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int busy = !d->stopping && !d->faulted && (d->busy || d->run_head != NULL);
  pthread_mutex_unlock(&d->mu);
  return Val_bool(busy);
}

CAMLprim value cl_stopped(value v) {
  struct cl_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int s = d->stopping;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(s);
}
