/* blindfw: hostmem's device (drivers/hostmem/hostmem_stubs.c), copied with
 * the prefix fw_, and a few knobs (FW_* below) that the fw-* drivers of
 * blindfw.ml turn on, one behaviour each:
 *
 *   FW_CHARGE_MAPPED  Mapped memory is carved from the Device budget (a BAR
 *                     window), as Device memory is
 *   FW_LEAK_MAPPED    free uncharges only Device memory: a freed Mapped
 *                     region's bytes stay charged for good
 *   FW_SIZE_BINS      free keeps charged blocks on a per-size free list that
 *                     only an alloc of exactly that size takes from
 *   FW_POOL           charged allocations of up to 64 KiB come from power-of-
 *                     two size classes (>= 256 B); freed blocks are cached
 *                     per class, and trimmed when the budget runs short
 *   FW_FREE_DEFERRED  free hands charged blocks to a reaper thread that gives
 *                     them back FW_REAP_MS later; fw_drain waits for it
 *   FW_WORD_HALVES    the device writes the word as two 32-bit halves (low,
 *                     then high, FW_HALF_GAP_NS apart), under a seqlock
 *   FW_WORD_MAPPING   the word lives in a page of its own (mmap), unmapped
 *                     when rig frees the word
 *
 * Beyond hostmem's, the device keeps a count of the signals it ran
 * (completions) and the last value given to submit in atomics, a global
 * registry of the devices opened (a mutex-guarded table), and debug stubs
 * for drivers/blindfw/check (fw_debug_*).
 *
 * hostmem's own comment follows.
 *
 */
/* hostmem: a rig driver whose device is the host.
 *
 * The device (struct fw_dev):
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
#include <sys/mman.h>
#include <sched.h>
#include <stdio.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

#define FW_CHARGE_MAPPED 1
#define FW_LEAK_MAPPED 2
#define FW_SIZE_BINS 4
#define FW_POOL 8
#define FW_FREE_DEFERRED 16
#define FW_WORD_HALVES 32
#define FW_WORD_MAPPING 64

#define FW_REAP_MS 20
#define FW_HALF_GAP_NS 5000
#define FW_POOL_MAX 65536
#define FW_POOL_MIN 256

enum mem_kind { MK_DEVICE = 0, MK_MAPPED = 1, MK_PINNED = 2 };

/* ------------------------------------------------------------ objects */

enum obj_kind { OBJ_NONE = 0, OBJ_MEM, OBJ_MAP, OBJ_ENTRY };
enum fn_kind { FN_NOP = 0, FN_SPIN = 1, FN_FAULT = 2, FN_HANG = 3, FN_REFUSE = 4 };

struct obj {
  uint32_t gen;      /* bumped at each free: stale handles miss */
  uint8_t kind;      /* enum obj_kind */
  uint8_t fn;        /* enum fn_kind, for entries */
  uint8_t charged;   /* its bytes count against the Device budget */
  uint8_t mkind;     /* enum mem_kind, for memory */
  uint64_t charge;   /* the bytes charged (its size, or its size class) */
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

struct fw_dev {
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

  /* blindfw's */
  int flags;                /* FW_* */
  uint64_t serial;          /* its number in the registry */
  _Atomic uint64_t *wordp;  /* where the word is: &word, or a page of its own */
  void *word_page;          /* FW_WORD_MAPPING: the page; NULL once unmapped */
  _Atomic uint32_t w_lo, w_hi, w_seq;  /* FW_WORD_HALVES */
  _Atomic uint64_t completions;        /* signals run */
  _Atomic uint64_t submitted;          /* last_value, readable without mu */
  struct cached *cache;     /* FW_SIZE_BINS, FW_POOL: freed, still charged */
  struct cached *deferred;  /* FW_FREE_DEFERRED: freed, not yet given back */
  int reaper_gone;
  pthread_cond_t reap_cv, drain_cv;
  atomic_int debug_held;    /* fw_debug_hold_mu holds mu */
};

struct cached {
  char *addr;
  uint64_t charge;
  struct cached *next;
};

static void dev_release(struct fw_dev *d);

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

static uint64_t handle_of(struct fw_dev *d, uint32_t i) { return ((uint64_t)d->objs[i].gen << 32) | i; }

/* The object a handle names, or NULL.  Under mu. */
static struct obj *lookup(struct fw_dev *d, uint64_t h) {
  uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
  if (i == 0 || i >= d->n_objs) return NULL;
  struct obj *o = &d->objs[i];
  if (o->kind == OBJ_NONE || o->gen != gen) return NULL;
  return o;
}

/* A new object; 0 when the host has no memory for the table.  Under mu. */
static uint32_t obj_new(struct fw_dev *d) {
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

static void obj_drop(struct fw_dev *d, struct obj *o) {
  uint32_t i = (uint32_t)(o - d->objs);
  if (o->charged) d->used -= (int64_t)o->charge;
  o->kind = OBJ_NONE;
  o->addr = NULL;
  o->size = 0;
  o->charge = 0;
  o->charged = 0;
  o->gen++;
  if (o->gen == 0) o->gen = 1;
  o->next_free = d->free_obj;
  d->free_obj = i;
}

static struct thr *thr_find(struct fw_dev *d, int create) {
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

static void slots_give(struct fw_dev *d, struct slot *s) {
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
static void reclaim(struct fw_dev *d);

static struct block *block_new(struct fw_dev *d) {
  if (d->used + BLOCK_BYTES > d->capacity) reclaim(d);
  if (d->used + BLOCK_BYTES > d->capacity) return NULL;
  struct block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  d->used += BLOCK_BYTES;
  return b;
}

/* Put blocks into the queues' pool.  Under mu. */
static void blocks_adopt(struct fw_dev *d, struct block *b) {
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

static void blocks_free(struct fw_dev *d, struct block *b) {
  while (b) {
    struct block *n = b->next;
    free(b);
    d->used -= BLOCK_BYTES;
    b = n;
  }
}

/* Drop every thread's encoded work and reservations.  Under mu. */
static void drop_encoded(struct fw_dev *d) {
  for (int i = 0; i < MAX_THREADS; i++) {
    struct thr *t = &d->thr[i];
    if (!t->used) continue;
    slots_give(d, t->open_head);
    t->open_head = t->open_tail = NULL;
    d->reserved_total -= t->reserved;
    t->reserved = 0;
  }
}

/* ----------------------------------------------------------- the word */

static void half_gap(void) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do {
    clock_gettime(CLOCK_MONOTONIC, &b);
  } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < FW_HALF_GAP_NS);
}

/* The device's write of the word, with release order.  Writers are
 * serialised by mu. */
static void word_store(struct fw_dev *d, uint64_t v) {
  if (d->flags & FW_WORD_HALVES) {
    uint32_t s = atomic_load_explicit(&d->w_seq, memory_order_relaxed);
    atomic_store_explicit(&d->w_seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&d->w_lo, (uint32_t)v, memory_order_relaxed);
    half_gap(); /* two posted 32-bit writes on the device's bus */
    atomic_store_explicit(&d->w_hi, (uint32_t)(v >> 32), memory_order_relaxed);
    atomic_store_explicit(&d->w_seq, s + 2, memory_order_release);
  } else
    atomic_store_explicit(d->wordp, v, memory_order_release);
}

/* The word, with acquire order; in halves, a value the word held whole
 * (the seqlock's read: retried while a write is under way). */
static uint64_t word_load(struct fw_dev *d) {
  if (d->flags & FW_WORD_HALVES) {
    for (;;) {
      uint32_t s1 = atomic_load_explicit(&d->w_seq, memory_order_acquire);
      if (s1 & 1) {
        __builtin_ia32_pause();
        continue;
      }
      uint32_t lo = atomic_load_explicit(&d->w_lo, memory_order_relaxed);
      uint32_t hi = atomic_load_explicit(&d->w_hi, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&d->w_seq, memory_order_relaxed) == s1) return ((uint64_t)hi << 32) | lo;
    }
  }
  return atomic_load_explicit(d->wordp, memory_order_acquire);
}

/* Publish the last value given to submit, once.  Under mu, with no work of
 * the device running. */
static void publish_last(struct fw_dev *d) {
  if (d->final_written) return;
  d->final_written = 1;
  word_store(d, d->last_value);
  pthread_cond_broadcast(&d->event_cv);
}

static void fault(struct fw_dev *d, const char *why, uint64_t a) {
  if (d->faulted) return;
  d->faulted = 1;
  snprintf(d->fault_msg, sizeof d->fault_msg, "hostmem: %s (0x%llx)", why, (unsigned long long)a);
  pthread_cond_broadcast(&d->event_cv);
}

/* ------------------------------------------------------------- worker */

/* Wait on work_cv until [ms] pass (ms < 0: for ever) or stop.  Under mu. */
static void pause_ms(struct fw_dev *d, int64_t ms) {
  struct timespec ts;
  if (ms >= 0) deadline_after(&ts, ms);
  while (!d->stopping) {
    int rc = ms >= 0 ? pthread_cond_timedwait(&d->work_cv, &d->mu, &ts) : pthread_cond_wait(&d->work_cv, &d->mu);
    if (rc == ETIMEDOUT) break;
  }
}

/* The memory [h] names, [off, off+len) of it, or NULL.  Under mu. */
static char *span(struct fw_dev *d, uint64_t h, uint64_t off, uint64_t len) {
  struct obj *o = lookup(d, h);
  if (!o || (o->kind != OBJ_MEM && o->kind != OBJ_MAP)) return NULL;
  if (off > o->size || len > o->size - off) return NULL;
  return o->addr + off;
}

/* Run one part.  Under mu; gives it up around memory traffic (rig frees
 * nothing that work may still use: MEM-3). */
static void run_part(struct fw_dev *d, const struct rig_part *p) {
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
  struct fw_dev *d = arg;
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
      atomic_fetch_add_explicit(&d->completions, 1, memory_order_release);
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

static int fw_room(void *dev, const struct rig_submission *s) {
  struct fw_dev *d = dev;
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

static int fw_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct fw_dev *d = dev;
  uint32_t need = s->n_parts + 1;
  int rc = 1;
  pthread_mutex_lock(&d->mu);
  d->last_value = value; /* also for a failed submit (STOP-3) */
  atomic_store_explicit(&d->submitted, value, memory_order_release);
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

static int fw_commit(void *dev) {
  struct fw_dev *d = dev;
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

static const struct rig_queue_fns fw_table = { fw_room, fw_submit, fw_commit };

/* ------------------------------------------------------- OCaml device */

/* Give back a list of freed blocks: their memory and their charge.  Under
 * mu (or with the device no one else's). */
static void cached_free(struct fw_dev *d, struct cached **l) {
  struct cached *c = *l;
  *l = NULL;
  while (c) {
    struct cached *n = c->next;
    free(c->addr);
    d->used -= (int64_t)c->charge;
    free(c);
    c = n;
  }
}

/* Before the queues (grow) or an entry's scratch say there is no memory:
 * what free kept charged goes back now, whatever the knob (the fw-* drivers'
 * changed behaviour is alloc's alone).  Under mu. */
static void reclaim(struct fw_dev *d) {
  cached_free(d, &d->cache);
  if (d->deferred) {
    cached_free(d, &d->deferred);
    pthread_cond_broadcast(&d->drain_cv);
  }
}

/* The registry of the devices opened in this process, by serial: what a
 * device learns as it opens. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *reg = NULL;
static uint64_t n_reg = 0, cap_reg = 0, next_serial = 1;
static atomic_int reg_debug_held;

static int registered(uint64_t serial) {
  for (uint64_t i = 0; i < n_reg; i++)
    if (reg[i] == serial) return 1;
  return 0;
}

/* FW_FREE_DEFERRED: the reaper gives back what free handed it, FW_REAP_MS
 * after it noticed it, as a driver that defers frees to a worker. */
static void *reaper(void *arg) {
  struct fw_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stopping && !d->deferred) pthread_cond_wait(&d->reap_cv, &d->mu);
    if (d->stopping) break;
    struct timespec ts;
    deadline_after(&ts, FW_REAP_MS);
    while (!d->stopping)
      if (pthread_cond_timedwait(&d->reap_cv, &d->mu, &ts) == ETIMEDOUT) break;
    cached_free(d, &d->deferred);
    pthread_cond_broadcast(&d->drain_cv);
  }
  cached_free(d, &d->deferred);
  d->reaper_gone = 1;
  pthread_cond_broadcast(&d->drain_cv);
  pthread_mutex_unlock(&d->mu);
  dev_release(d);
  return NULL;
}

static void dev_release(struct fw_dev *d) {
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  for (uint32_t i = 1; i < d->n_objs; i++) {
    struct obj *o = &d->objs[i];
    if (o->kind == OBJ_MEM || (o->kind == OBJ_ENTRY && o->addr)) free(o->addr);
  }
  free(d->objs);
  cached_free(d, &d->cache);
  cached_free(d, &d->deferred);
  if (d->word_page) munmap(d->word_page, 4096);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->work_cv);
  pthread_cond_destroy(&d->event_cv);
  pthread_cond_destroy(&d->reap_cv);
  pthread_cond_destroy(&d->drain_cv);
  free(d);
}

#define Dev_val(v) (*(struct fw_dev **)Data_custom_val(v))

static void dev_finalize(value v) {
  struct fw_dev *d = Dev_val(v);
  if (d) dev_release(d);
}

static struct custom_operations dev_ops = {
  "rig.blindfw.dev", dev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* fw_open capacity: a new device with [capacity] bytes of Device memory and
 * its worker thread.  Called with signals blocked (rig_mask): the worker
 * inherits that mask, and sets it again itself to be sure (SIG-8). */
CAMLprim value fw_open(value vcap, value vflags) {
  CAMLparam2(vcap, vflags);
  CAMLlocal1(v);
  struct fw_dev *d = calloc(1, sizeof *d);
  if (!d) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work_cv, &ca);
  pthread_cond_init(&d->event_cv, &ca);
  pthread_cond_init(&d->reap_cv, &ca);
  pthread_cond_init(&d->drain_cv, &ca);
  pthread_condattr_destroy(&ca);
  d->capacity = Long_val(vcap);
  d->flags = Int_val(vflags);
  atomic_init(&d->word, 0);
  d->wordp = &d->word;
  if (d->flags & FW_WORD_MAPPING) {
    void *pg = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED) {
      free(d);
      caml_failwith("blindfw: no page for the word");
    }
    d->word_page = pg;
    d->wordp = pg;
    atomic_init(d->wordp, 0);
  }
  int deferred = (d->flags & FW_FREE_DEFERRED) != 0;
  atomic_init(&d->refs, deferred ? 3 : 2);
  pthread_mutex_lock(&reg_mu);
  d->serial = next_serial++;
  if (n_reg == cap_reg) {
    uint64_t cap = cap_reg ? 2 * cap_reg : 64;
    uint64_t *r = realloc(reg, cap * sizeof *r);
    if (r) {
      reg = r;
      cap_reg = cap;
    }
  }
  if (n_reg < cap_reg) reg[n_reg++] = d->serial;
  pthread_mutex_unlock(&reg_mu);
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
  int rc2 = 0;
  if (rc == 0 && deferred) rc2 = pthread_create(&tid, &attr, reaper, d);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
  if (rc != 0) {
    atomic_store(&d->refs, 1);
    dev_release(d);
    caml_failwith("blindfw: cannot start the device's thread");
  }
  if (rc2 != 0) {
    /* the worker runs: stop it, and let it and this call release */
    pthread_mutex_lock(&d->mu);
    d->stopping = 1;
    d->reaper_gone = 1;
    pthread_cond_broadcast(&d->work_cv);
    pthread_mutex_unlock(&d->mu);
    atomic_fetch_sub(&d->refs, 1);
    dev_release(d);
    caml_failwith("blindfw: cannot start the device's reaper");
  }
  v = caml_alloc_custom(&dev_ops, sizeof(struct fw_dev *), 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

CAMLprim value fw_dev_ptr(value v) { return caml_copy_nativeint((intnat)Dev_val(v)); }
CAMLprim value fw_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&fw_table); }

/* A power of two, at least FW_POOL_MIN, that holds n. */
static uint64_t size_class(uint64_t n) {
  uint64_t c = FW_POOL_MIN;
  while (c < n) c <<= 1;
  return c;
}

/* A cached block of exactly [charge] bytes, taken off the cache, or NULL.
 * Under mu. */
static char *cache_take(struct fw_dev *d, uint64_t charge) {
  for (struct cached **l = &d->cache; *l; l = &(*l)->next)
    if ((*l)->charge == charge) {
      struct cached *c = *l;
      char *a = c->addr;
      *l = c->next;
      free(c);
      return a;
    }
  return NULL;
}

/* fw_alloc dev kind n: a region of n bytes of memory kind (enum mem_kind)
 * (0: none). */
CAMLprim value fw_alloc(value v, value vkind, value vn) {
  struct fw_dev *d = Dev_val(v);
  int64_t n = Long_val(vn);
  int kind = Int_val(vkind);
  int charged = kind == MK_DEVICE || (kind == MK_MAPPED && (d->flags & FW_CHARGE_MAPPED));
  uint64_t charge = (uint64_t)n;
  uint64_t h = 0;
  if (n <= 0) return Val_long(0);
  pthread_mutex_lock(&d->mu);
  void *p = NULL;
  if (charged && (d->flags & FW_POOL) && n <= FW_POOL_MAX) charge = size_class((uint64_t)n);
  if (charged && (d->flags & (FW_POOL | FW_SIZE_BINS))) p = cache_take(d, charge);
  if (!p && charged && (d->flags & FW_POOL) && d->used + (int64_t)charge > d->capacity)
    cached_free(d, &d->cache); /* the pool trims its classes before it says None */
  if (!p && (!charged || d->used + (int64_t)charge <= d->capacity)) {
    if (posix_memalign(&p, 64, (size_t)charge) != 0) p = NULL;
    else if (charged) d->used += (int64_t)charge;
  }
  if (p) {
    uint32_t i = obj_new(d);
    if (i) {
      struct obj *o = &d->objs[i];
      o->kind = OBJ_MEM;
      o->charged = (uint8_t)charged;
      o->mkind = (uint8_t)kind;
      o->addr = p;
      o->size = (uint64_t)n;
      o->charge = charge;
      h = handle_of(d, i);
    } else {
      free(p);
      if (charged) d->used -= (int64_t)charge;
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* fw_map dev addr n: a mapping of host memory (0: none). */
CAMLprim value fw_map(value v, value vaddr, value vn) {
  struct fw_dev *d = Dev_val(v);
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

/* fw_map_peer dev src h: dev's mapping of src's object h (0: none). */
CAMLprim value fw_map_peer(value v, value vsrc, value vh) {
  struct fw_dev *s = Dev_val(vsrc);
  pthread_mutex_lock(&s->mu);
  struct obj *o = lookup(s, (uint64_t)Long_val(vh));
  char *addr = o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP) ? o->addr : NULL;
  uint64_t size = addr ? o->size : 0;
  pthread_mutex_unlock(&s->mu);
  if (!addr) return Val_long(0);
  struct fw_dev *d = Dev_val(v);
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

/* fw_free dev h: false if h names nothing.  Memory goes back at once, but
 * where a knob keeps it: FW_LEAK_MAPPED (Mapped memory's charge stays),
 * FW_SIZE_BINS and FW_POOL (the block stays charged, in the cache),
 * FW_FREE_DEFERRED (the reaper gives it back later). */
CAMLprim value fw_free(value v, value vh) {
  struct fw_dev *d = Dev_val(v);
  char *mem = NULL;
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  struct obj *o = lookup(d, (uint64_t)Long_val(vh));
  if (o && o->kind != OBJ_NONE) {
    if (o->kind == OBJ_MEM || o->kind == OBJ_ENTRY) mem = o->addr;
    if (o->kind == OBJ_MEM && o->charged) {
      struct cached *c = NULL;
      if ((d->flags & FW_LEAK_MAPPED) && o->mkind != MK_DEVICE) {
        o->charged = 0; /* the bug: only Device memory is uncharged */
      } else if ((d->flags & (FW_SIZE_BINS | FW_POOL)) ||
                 ((d->flags & FW_FREE_DEFERRED) && !d->reaper_gone)) {
        c = malloc(sizeof *c);
        if (c) {
          c->addr = mem;
          c->charge = o->charge;
          if (d->flags & FW_FREE_DEFERRED) {
            c->next = d->deferred;
            d->deferred = c;
            pthread_cond_signal(&d->reap_cv);
          } else {
            c->next = d->cache;
            d->cache = c;
          }
          o->charged = 0; /* charged still, as the block in the cache */
          mem = NULL;
        }
      }
    }
    obj_drop(d, o);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  free(mem);
  return Val_bool(ok);
}

/* fw_access dev h off buf boff len write: copies between the object's bytes
 * and buf; false if out of bounds or of no object. */
CAMLprim value fw_access(value v, value vh, value voff, value vbuf, value vboff, value vlen, value vwrite) {
  struct fw_dev *d = Dev_val(v);
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
CAMLprim value fw_access_byte(value *argv, int argn) {
  (void)argn;
  return fw_access(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6]);
}

/* fw_entry dev fn scratch: an entry of function kind fn with [scratch]
 * bytes of Device memory: its handle, or 0 when the budget lacks them. */
CAMLprim value fw_entry(value v, value vfn, value vscratch) {
  struct fw_dev *d = Dev_val(v);
  int64_t n = Long_val(vscratch);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  if (d->used + n > d->capacity) reclaim(d);
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
        o->charge = (uint64_t)n;
        d->used += n;
        h = handle_of(d, i);
      } else free(p);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

CAMLprim value fw_capacity(value v) { return Val_long(Dev_val(v)->capacity); }

/* fw_grow dev: 0 (Grown) or the bytes still missing (Short n). */
CAMLprim value fw_grow(value v) {
  struct fw_dev *d = Dev_val(v);
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

/* The word, with acquire order: no lock, no allocation (TIME-1, LOCK-5). */
CAMLprim value fw_signaled(value v) { return Val_long((intnat)word_load(Dev_val(v))); }

/* The signaleds of the fw-* drivers (all without lock or allocation but
 * fw_peer_trylock's and fw_live's, which take a lock). */

/* The word's address, for a driver that caches it (fw-ok-signaled-cached-ptr). */
CAMLprim value fw_word_addr(value v) { return caml_copy_nativeint((intnat)Dev_val(v)->wordp); }

/* The word read through that address, with acquire order. */
CAMLprim value fw_signaled_at(value vp) {
  _Atomic uint64_t *w = (_Atomic uint64_t *)Nativeint_val(vp);
  return Val_long((intnat)atomic_load_explicit(w, memory_order_acquire));
}

/* FW_WORD_HALVES: the two halves, each read with acquire order, low then
 * high, without the seqlock. */
CAMLprim value fw_signaled_halves(value v) {
  struct fw_dev *d = Dev_val(v);
  uint32_t lo = atomic_load_explicit(&d->w_lo, memory_order_acquire);
  uint32_t hi = atomic_load_explicit(&d->w_hi, memory_order_acquire);
  return Val_long((intnat)(((uint64_t)hi << 32) | lo));
}

/* The number of signals the device ran. */
CAMLprim value fw_completions(value v) {
  return Val_long((intnat)atomic_load_explicit(&Dev_val(v)->completions, memory_order_acquire));
}

/* The last value given to submit. */
CAMLprim value fw_submitted(value v) {
  return Val_long((intnat)atomic_load_explicit(&Dev_val(v)->submitted, memory_order_acquire));
}

CAMLprim value fw_serial(value v) { return Val_long((intnat)Dev_val(v)->serial); }

/* Whether both devices are in the registry, under its lock taken with a
 * try: false when another thread holds it (fw-peer-trylock). */
CAMLprim value fw_peer_trylock(value va, value vb) {
  if (pthread_mutex_trylock(&reg_mu) != 0) return Val_false;
  int r = registered((uint64_t)Long_val(va)) && registered((uint64_t)Long_val(vb));
  pthread_mutex_unlock(&reg_mu);
  return Val_bool(r);
}

/* Whether h names a live object of the device, under its mutex
 * (fw-locate-validates-locked). */
CAMLprim value fw_live(value v, value vh) {
  struct fw_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int r = lookup(d, (uint64_t)Long_val(vh)) != NULL;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(r);
}

/* FW_WORD_MAPPING: rig frees the word: its page goes. */
CAMLprim value fw_word_free(value v) {
  struct fw_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  void *pg = d->word_page;
  d->word_page = NULL;
  if (pg) d->wordp = &d->word;
  pthread_mutex_unlock(&d->mu);
  if (pg) munmap(pg, 4096);
  return Val_unit;
}

CAMLprim value fw_word_mapped(value v) { return Val_bool(Dev_val(v)->word_page != NULL); }

/* FW_FREE_DEFERRED: waits, without the OCaml runtime, until the reaper has
 * given back every block handed to it; whether there was one. */
CAMLprim value fw_drain(value v) {
  CAMLparam1(v);
  struct fw_dev *d = Dev_val(v);
  int had;
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  had = d->deferred != NULL;
  while (d->deferred && !d->reaper_gone) pthread_cond_wait(&d->drain_cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_bool(had));
}

CAMLprim value fw_used(value v) {
  struct fw_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int64_t u = d->used;
  pthread_mutex_unlock(&d->mu);
  return Val_long(u);
}

/* ------------------------------------------------ the check's debug stubs */

static void sleep_ms(int64_t ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Holds the device's mutex for ms milliseconds, without the OCaml runtime. */
CAMLprim value fw_debug_hold_mu(value v, value vms) {
  CAMLparam2(v, vms);
  struct fw_dev *d = Dev_val(v);
  int64_t ms = Long_val(vms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  atomic_store(&d->debug_held, 1);
  sleep_ms(ms);
  atomic_store(&d->debug_held, 0);
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* Waits (without the runtime) until fw_debug_hold_mu holds the mutex. */
CAMLprim value fw_debug_await_mu(value v) {
  CAMLparam1(v);
  struct fw_dev *d = Dev_val(v);
  caml_enter_blocking_section();
  while (!atomic_load(&d->debug_held)) sched_yield();
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* The same for the registry's lock, as an open of a device holds it. */
CAMLprim value fw_debug_hold_registry(value vms) {
  CAMLparam1(vms);
  int64_t ms = Long_val(vms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&reg_mu);
  atomic_store(&reg_debug_held, 1);
  sleep_ms(ms);
  atomic_store(&reg_debug_held, 0);
  pthread_mutex_unlock(&reg_mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

CAMLprim value fw_debug_await_registry(value unit) {
  CAMLparam1(unit);
  caml_enter_blocking_section();
  while (!atomic_load(&reg_debug_held)) sched_yield();
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* fw_wait dev seen ms: blocks, without the OCaml runtime (SIG-3), until the
 * word differs from seen, the device faults, stops, or ms pass. */
CAMLprim value fw_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  struct fw_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t ms = Long_val(vms);
  struct timespec ts;
  deadline_after(&ts, ms < 0 ? 0 : ms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  while (word_load(d) == seen && !d->faulted && !d->stopping)
    if (pthread_cond_timedwait(&d->event_cv, &d->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* fw_fault dev: Some why once the device faulted.  The fault stays
 * recorded: every later sleep raises it (TIME-5). */
CAMLprim value fw_fault(value v) {
  CAMLparam1(v);
  CAMLlocal1(msg);
  struct fw_dev *d = Dev_val(v);
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

/* fw_stop dev publish: stops the device without waiting for its work.
 * Drops what was encoded and not committed (STOP-4); with no work running,
 * writes the last value given to submit now (STOP-3), else the worker does
 * once its part ends.  With publish false (abort), the word keeps what it
 * reads. */
CAMLprim value fw_stop(value v, value vpublish) {
  struct fw_dev *d = Dev_val(v);
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

/* fw_busy dev: committed work not yet done (false once stopped or faulted). */
CAMLprim value fw_busy(value v) {
  struct fw_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int busy = !d->stopping && !d->faulted && (d->busy || d->run_head != NULL);
  pthread_mutex_unlock(&d->mu);
  return Val_bool(busy);
}

CAMLprim value fw_stopped(value v) {
  struct fw_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int s = d->stopping;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(s);
}
