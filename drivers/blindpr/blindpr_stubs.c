/* blindpr: hostmem's device (drivers/hostmem/hostmem_stubs.c, copied and
 * renamed bp_*) with the way a Fill or a Copy runs, and what stop does about
 * a part that runs at stop, changed per driver mode (see blindpr.ml for the
 * table of modes, the clause each breaks, and the document's sentences).
 *
 * What changes from hostmem, for every mode:
 *   - the memory of an alloc is a refcounted block (struct mem): a part
 *     that runs pins the blocks it writes, so that memory rig frees while a
 *     part still runs (a broken mode's bug) is given back only after the
 *     part, as a GPU keeps a buffer object alive while a job uses it;
 *   - Fill and Copy run through xfer_*: in one go (hostmem), in 1 MiB chunks
 *     on the worker, split across helper threads, on one helper thread, or
 *     on a per-device "copy engine" thread, per mode;
 *   - stop's decision of when the last value goes into the word, per mode.
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

#define CHUNK ((uint64_t)1 << 20)     /* 1 MiB */
#define SPLIT_MIN ((uint64_t)2 << 20) /* split Fills/Copies from 2 MiB */
#define NSPLIT 4
#define LEAD ((uint64_t)64 << 10)  /* M_STOP_WAITS_LEAD: the lead slice, the head */

enum mode {
  M_PLAIN = 0,             /* hostmem */
  M_FENCE_THEN_CANCEL = 1, /* broken */
  M_FIRST_CHUNK = 2,       /* broken */
  M_SPLIT_LEAD = 3,        /* broken */
  M_STOP_WAITS_LEAD = 4,   /* broken */
  M_ENGINE_DRAINS = 5,     /* broken */
  M_IDLE_BY_QUEUE = 6,     /* broken */
  M_CANCEL_THEN_IDLE = 7,  /* broken */
  M_OK_CHUNK_CUT = 10,
  M_OK_SPLIT_JOINED = 11,
  M_OK_STOP_REAPER = 12,
  M_OK_HELPER_CHUNKS = 13,
  M_OK_ENGINE = 14,
};

/* memory of an alloc, refcounted: the object holds one reference, each
 * peer mapping of it one, each running part that writes or reads it one. */
struct mem {
  atomic_int refs;
  char *p;
};

static struct mem *mem_new(char *p) {
  struct mem *m = malloc(sizeof *m);
  if (!m) return NULL;
  atomic_init(&m->refs, 1);
  m->p = p;
  return m;
}
static void mem_get(struct mem *m) { if (m) atomic_fetch_add(&m->refs, 1); }
static void mem_put(struct mem *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
    free(m->p);
    free(m);
  }
}

/* ------------------------------------------------------------ objects */

enum obj_kind { OBJ_NONE = 0, OBJ_MEM, OBJ_MAP, OBJ_ENTRY };
enum fn_kind { FN_NOP = 0, FN_SPIN = 1, FN_FAULT = 2, FN_HANG = 3 };

struct obj {
  uint32_t gen;      /* bumped at each free: stale handles miss */
  uint8_t kind;      /* enum obj_kind */
  uint8_t fn;        /* enum fn_kind, for entries */
  uint8_t charged;   /* its bytes count against the Device budget */
  char *addr;        /* memory (or scratch) */
  struct mem *mem;   /* the alloc's memory (OBJ_MEM, OBJ_MAP of a peer), or NULL */
  uint64_t size;
  uint32_t next_free;
};

/* A Fill or a Copy: what a part asks, with the memory it pins. */
struct xfer {
  int copy;
  char *dst;
  const char *src;
  int byte;
  uint64_t len;
  struct mem *mdst, *msrc;
};

enum { ENG_IDLE = 0, ENG_POSTED, ENG_RUNNING, ENG_DONE };

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

struct bp_dev {
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

  /* blindpr */
  int mode;                 /* enum mode */
  atomic_int stop_flag;     /* stopping, for threads that read it without mu */
  uint64_t progress;        /* chunks and parts ended (M_FIRST_CHUNK) */
  pthread_cond_t job_cv;    /* helpers and the engine report here */
  int split_active;         /* M_STOP_WAITS_LEAD: a split part runs */
  int lead_done;            /*   and its lead slice has ended */
  struct slot *batch;       /* M_IDLE_BY_QUEUE: the submission dequeued */
  int eng_state;            /* the copy engine: ENG_* */
  int eng_exit;
  struct xfer eng_x;
  pthread_cond_t eng_cv;
  int reaper;               /* M_OK_STOP_REAPER: a reaper writes the last value */
  uint64_t settle_from;     /* M_FIRST_CHUNK: progress at stop */
};

static void dev_release(struct bp_dev *d);

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

static uint64_t handle_of(struct bp_dev *d, uint32_t i) { return ((uint64_t)d->objs[i].gen << 32) | i; }

/* The object a handle names, or NULL.  Under mu. */
static struct obj *lookup(struct bp_dev *d, uint64_t h) {
  uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
  if (i == 0 || i >= d->n_objs) return NULL;
  struct obj *o = &d->objs[i];
  if (o->kind == OBJ_NONE || o->gen != gen) return NULL;
  return o;
}

/* A new object; 0 when the host has no memory for the table.  Under mu. */
static uint32_t obj_new(struct bp_dev *d) {
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

static void obj_drop(struct bp_dev *d, struct obj *o) {
  uint32_t i = (uint32_t)(o - d->objs);
  if (o->charged) d->used -= (int64_t)o->size;
  o->kind = OBJ_NONE;
  o->addr = NULL;
  o->mem = NULL;
  o->size = 0;
  o->charged = 0;
  o->gen++;
  if (o->gen == 0) o->gen = 1;
  o->next_free = d->free_obj;
  d->free_obj = i;
}

static struct thr *thr_find(struct bp_dev *d, int create) {
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

static void slots_give(struct bp_dev *d, struct slot *s) {
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
static struct block *block_new(struct bp_dev *d) {
  if (d->used + BLOCK_BYTES > d->capacity) return NULL;
  struct block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  d->used += BLOCK_BYTES;
  return b;
}

/* Put blocks into the queues' pool.  Under mu. */
static void blocks_adopt(struct bp_dev *d, struct block *b) {
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

static void blocks_free(struct bp_dev *d, struct block *b) {
  while (b) {
    struct block *n = b->next;
    free(b);
    d->used -= BLOCK_BYTES;
    b = n;
  }
}

/* Drop every thread's encoded work and reservations.  Under mu. */
static void drop_encoded(struct bp_dev *d) {
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
static void publish_last(struct bp_dev *d) {
  if (d->final_written) return;
  d->final_written = 1;
  atomic_store_explicit(&d->word, d->last_value, memory_order_release);
  pthread_cond_broadcast(&d->event_cv);
}

static void fault(struct bp_dev *d, const char *why, uint64_t a) {
  if (d->faulted) return;
  d->faulted = 1;
  snprintf(d->fault_msg, sizeof d->fault_msg, "blindpr: %s (0x%llx)", why, (unsigned long long)a);
  pthread_cond_broadcast(&d->event_cv);
}

/* ------------------------------------------------------------- worker */

/* Wait on work_cv until [ms] pass (ms < 0: for ever) or stop.  Under mu. */
static void pause_ms(struct bp_dev *d, int64_t ms) {
  struct timespec ts;
  if (ms >= 0) deadline_after(&ts, ms);
  while (!d->stopping) {
    int rc = ms >= 0 ? pthread_cond_timedwait(&d->work_cv, &d->mu, &ts) : pthread_cond_wait(&d->work_cv, &d->mu);
    if (rc == ETIMEDOUT) break;
  }
}

/* The memory [h] names, [off, off+len) of it, or NULL; *m its pinnable
 * memory (NULL for a map_host mapping).  Under mu. */
static char *span(struct bp_dev *d, uint64_t h, uint64_t off, uint64_t len, struct mem **m) {
  struct obj *o = lookup(d, h);
  if (!o || (o->kind != OBJ_MEM && o->kind != OBJ_MAP)) return NULL;
  if (off > o->size || len > o->size - off) return NULL;
  if (m) *m = o->mem;
  return o->addr + off;
}

/* [off, off+n) of x, in one go. */
static void xfer_range(const struct xfer *x, uint64_t off, uint64_t n) {
  if (n == 0) return;
  if (x->copy) memmove(x->dst + off, x->src + off, n);
  else memset(x->dst + off, x->byte, n);
}

/* A copy whose source and destination overlap is never cut up: its chunks
 * would read bytes an earlier chunk wrote. */
static int splittable(const struct xfer *x) {
  if (!x->copy) return 1;
  return x->dst + x->len <= x->src || x->src + x->len <= x->dst;
}

static void xfer_unpin(struct xfer *x) {
  mem_put(x->mdst);
  mem_put(x->msrc);
  x->mdst = x->msrc = NULL;
}

/* Start a thread of the device's own with every signal blocked but the
 * fault signals, for its life (SIG-8).  0 on success. */
static int start_thread(pthread_t *tid, void *(*fn)(void *), void *arg, int detached) {
  sigset_t old;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (detached) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  rig_mask(&old);
  int rc = pthread_create(tid, &attr, fn, arg);
  rig_restore(&old);
  pthread_attr_destroy(&attr);
  return rc;
}

/* ----- chunks on the worker (M_FENCE_THEN_CANCEL, M_FIRST_CHUNK,
 * M_OK_CHUNK_CUT, M_OK_STOP_REAPER).  Under mu; gives it up around each
 * chunk.  Each chunk's end counts as progress.  M_OK_CHUNK_CUT ends the
 * part at the first chunk boundary after stop; the others run it to its
 * end (a cancel takes effect between parts). */
static void xfer_chunks_on_worker(struct bp_dev *d, struct xfer *x) {
  uint64_t step = splittable(x) ? CHUNK : x->len;
  for (uint64_t off = 0; off < x->len; off += step) {
    uint64_t n = x->len - off < step ? x->len - off : step;
    pthread_mutex_unlock(&d->mu);
    xfer_range(x, off, n);
    pthread_mutex_lock(&d->mu);
    d->progress++;
    pthread_cond_broadcast(&d->job_cv);
    if (d->mode == M_OK_CHUNK_CUT && d->stopping) break;
  }
}

/* ----- slices on helper threads */

struct job {
  atomic_int refs;          /* the worker's, and one per helper */
  struct bp_dev *d;         /* holds a reference of the device */
  struct xfer x;            /* the pins are the job's */
  int remaining;            /* helpers not yet ended; under d->mu */
};

struct slice {
  struct job *j;
  uint64_t off, n;
  int lead;                 /* M_STOP_WAITS_LEAD: the lead slice */
  int cut;                  /* end at the chunk boundary after stop */
};

static void job_put(struct job *j) {
  if (atomic_fetch_sub(&j->refs, 1) != 1) return;
  xfer_unpin(&j->x);
  struct bp_dev *d = j->d;
  free(j);
  dev_release(d);
}

static void *slice_main(void *arg) {
  struct slice *s = arg;
  struct job *j = s->j;
  struct bp_dev *d = j->d;
  sigset_t old;
  rig_mask(&old); /* already so (inherited); to be sure (SIG-8) */
  for (uint64_t off = 0; off < s->n; off += CHUNK) {
    if (s->cut && atomic_load(&d->stop_flag)) break;
    uint64_t n = s->n - off < CHUNK ? s->n - off : CHUNK;
    xfer_range(&j->x, s->off + off, n);
  }
  pthread_mutex_lock(&d->mu);
  j->remaining--;
  if (s->lead) d->lead_done = 1;
  pthread_cond_broadcast(&d->job_cv);
  pthread_cond_broadcast(&d->work_cv);
  pthread_mutex_unlock(&d->mu);
  free(s);
  job_put(j);
  return NULL;
}

/* A job over x (its pins move into the job), or NULL. */
static struct job *job_new(struct bp_dev *d, struct xfer *x) {
  struct job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  atomic_init(&j->refs, 1);
  atomic_fetch_add(&d->refs, 1);
  j->d = d;
  j->x = *x;
  x->mdst = x->msrc = NULL;
  return j;
}

/* A detached helper on [off, off+n) of the job; 0 on success.  Under mu. */
static int job_spawn(struct job *j, uint64_t off, uint64_t n, int lead, int cut) {
  struct slice *s = malloc(sizeof *s);
  if (!s) return -1;
  *s = (struct slice){ j, off, n, lead, cut };
  atomic_fetch_add(&j->refs, 1);
  j->remaining++;
  pthread_t tid;
  if (start_thread(&tid, slice_main, s, 1) != 0) {
    j->remaining--;
    atomic_fetch_sub(&j->refs, 1);
    free(s);
    return -1;
  }
  return 0;
}

/* M_SPLIT_LEAD: helpers take [CHUNK, len) in three slices; the worker does
 * the first chunk itself (any page fault of the mapping on its own thread),
 * then waits on work_cv for the helpers. */
static void xfer_split_lead(struct bp_dev *d, struct xfer *x) {
  struct job *j = job_new(d, x);
  if (!j) { pthread_mutex_unlock(&d->mu); xfer_range(x, 0, x->len); pthread_mutex_lock(&d->mu); return; }
  uint64_t head = CHUNK, body = j->x.len - head, third = (body / 3 + 63) & ~(uint64_t)63;
  uint64_t done_inline = head;
  for (int k = 0; k < 3; k++) {
    uint64_t off = head + k * third;
    if (off >= j->x.len) break;
    uint64_t n = j->x.len - off < third ? j->x.len - off : third;
    if (job_spawn(j, off, n, 0, 0) != 0) { done_inline = j->x.len; break; }
  }
  pthread_mutex_unlock(&d->mu);
  xfer_range(&j->x, 0, head);
  if (done_inline > head) xfer_range(&j->x, head, j->x.len - head); /* no helper: all here (overlaps are idempotent for a Fill, and Copies that overlap are not split) */
  pthread_mutex_lock(&d->mu);
  /* The part ends when the helpers have, or when the device stops. */
  while (j->remaining > 0 && !d->stopping) pthread_cond_wait(&d->work_cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
  job_put(j);
  pthread_mutex_lock(&d->mu);
}

/* M_STOP_WAITS_LEAD, M_OK_SPLIT_JOINED: NSPLIT helpers; the worker waits
 * for them all.  M_STOP_WAITS_LEAD's lead takes the head (LEAD bytes), the others
 * the rest; M_OK_SPLIT_JOINED's take equal slices and end at the chunk
 * boundary after stop. */
static void xfer_split_all(struct bp_dev *d, struct xfer *x) {
  struct job *j = job_new(d, x);
  if (!j) { pthread_mutex_unlock(&d->mu); xfer_range(x, 0, x->len); pthread_mutex_lock(&d->mu); return; }
  int lead_mode = d->mode == M_STOP_WAITS_LEAD, cut = d->mode == M_OK_SPLIT_JOINED;
  uint64_t len = j->x.len, start = 0;
  int nbody = NSPLIT, failed = 0;
  if (lead_mode) {
    d->split_active = 1;
    d->lead_done = 0;
    if (job_spawn(j, 0, LEAD, 1, 0) != 0) failed = 1;
    start = LEAD;
    nbody = NSPLIT - 1;
  }
  uint64_t each = ((len - start) / nbody + 63) & ~(uint64_t)63;
  for (int k = 0; k < nbody && !failed; k++) {
    uint64_t off = start + k * each;
    if (off >= len) break;
    uint64_t n = len - off < each ? len - off : each;
    if (job_spawn(j, off, n, 0, cut) != 0) failed = 1;
  }
  if (failed) {
    /* no thread for a slice: the worker does the whole part itself, once
     * the helpers it started have ended (a Fill twice is the same Fill). */
    while (j->remaining > 0) pthread_cond_wait(&d->job_cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
    xfer_range(&j->x, 0, len);
    pthread_mutex_lock(&d->mu);
  }
  while (j->remaining > 0) pthread_cond_wait(&d->job_cv, &d->mu);
  d->split_active = 0;
  pthread_mutex_unlock(&d->mu);
  job_put(j);
  pthread_mutex_lock(&d->mu);
}

/* ----- one helper thread in chunks (M_OK_HELPER_CHUNKS): the worker
 * joins it. */
struct solo { struct bp_dev *d; struct xfer *x; };

static void *solo_main(void *arg) {
  struct solo *s = arg;
  uint64_t step = splittable(s->x) ? CHUNK : s->x->len;
  for (uint64_t off = 0; off < s->x->len; off += step) {
    if (atomic_load(&s->d->stop_flag)) break;
    uint64_t n = s->x->len - off < step ? s->x->len - off : step;
    xfer_range(s->x, off, n);
  }
  return NULL;
}

static void xfer_solo(struct bp_dev *d, struct xfer *x) {
  struct solo s = { d, x };
  pthread_t tid;
  pthread_mutex_unlock(&d->mu);
  if (start_thread(&tid, solo_main, &s, 0) == 0) pthread_join(tid, NULL);
  else xfer_range(x, 0, x->len);
  pthread_mutex_lock(&d->mu);
}

/* ----- the copy engine (M_ENGINE_DRAINS, M_OK_ENGINE): a thread of the
 * device that runs one descriptor at a time, in chunks, to its end. */
static void *engine_main(void *arg) {
  struct bp_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (d->eng_state != ENG_POSTED && !d->eng_exit) pthread_cond_wait(&d->eng_cv, &d->mu);
    if (d->eng_state != ENG_POSTED) break;
    d->eng_state = ENG_RUNNING;
    struct xfer x = d->eng_x;
    d->eng_x.mdst = d->eng_x.msrc = NULL;
    pthread_mutex_unlock(&d->mu);
    uint64_t step = splittable(&x) ? CHUNK : x.len;
    for (uint64_t off = 0; off < x.len; off += step) {
      uint64_t n = x.len - off < step ? x.len - off : step;
      xfer_range(&x, off, n);
    }
    xfer_unpin(&x);
    pthread_mutex_lock(&d->mu);
    d->eng_state = ENG_DONE;
    pthread_cond_broadcast(&d->work_cv);
  }
  pthread_mutex_unlock(&d->mu);
  dev_release(d);
  return NULL;
}

/* The command processor's side: post the descriptor, wait for the engine.
 * M_ENGINE_DRAINS's wait ends at stop too. */
static void xfer_engine(struct bp_dev *d, struct xfer *x) {
  d->eng_x = *x;
  x->mdst = x->msrc = NULL;
  d->eng_state = ENG_POSTED;
  pthread_cond_signal(&d->eng_cv);
  while (d->eng_state != ENG_DONE && !(d->mode == M_ENGINE_DRAINS && d->stopping))
    pthread_cond_wait(&d->work_cv, &d->mu);
  if (d->eng_state == ENG_DONE) d->eng_state = ENG_IDLE;
}

/* Run a Fill or a Copy, the mode's way.  Under mu; x's pins are taken. */
static void run_xfer(struct bp_dev *d, struct xfer *x) {
  switch (d->mode) {
  case M_FENCE_THEN_CANCEL:
  case M_FIRST_CHUNK:
  case M_OK_CHUNK_CUT:
  case M_OK_STOP_REAPER:
    xfer_chunks_on_worker(d, x);
    break;
  case M_SPLIT_LEAD:
    if (x->len >= SPLIT_MIN && splittable(x)) { xfer_split_lead(d, x); break; }
    goto plain;
  case M_STOP_WAITS_LEAD:
  case M_OK_SPLIT_JOINED:
    if (x->len >= SPLIT_MIN && splittable(x)) { xfer_split_all(d, x); break; }
    goto plain;
  case M_OK_HELPER_CHUNKS:
    xfer_solo(d, x);
    break;
  case M_ENGINE_DRAINS:
  case M_OK_ENGINE:
    xfer_engine(d, x);
    break;
  default:
  plain:
    pthread_mutex_unlock(&d->mu);
    xfer_range(x, 0, x->len);
    pthread_mutex_lock(&d->mu);
    break;
  }
  xfer_unpin(x);
}

/* Run one part.  Under mu; gives it up around memory traffic (rig frees
 * nothing that work may still use: MEM-3). */
static void run_part(struct bp_dev *d, const struct rig_part *p) {
  switch (p->op) {
  case RIG_OP_FILL: {
    struct mem *m = NULL;
    char *dst = span(d, p->a[0], p->a[1], p->a[2], &m);
    if (!dst) return fault(d, "Fill out of a region's bounds or of no region", p->a[0]);
    struct xfer x = { 0, dst, NULL, (int)(p->a[3] & 0xff), p->a[2], m, NULL };
    mem_get(m);
    return run_xfer(d, &x);
  }
  case RIG_OP_COPY: {
    struct mem *ms = NULL, *md = NULL;
    char *src = span(d, p->a[0], p->a[1], p->a[4], &ms);
    char *dst = span(d, p->a[2], p->a[3], p->a[4], &md);
    if (!src || !dst) return fault(d, "Copy out of a region's bounds or of no region", src ? p->a[2] : p->a[0]);
    struct xfer x = { 1, dst, src, 0, p->a[4], md, ms };
    mem_get(md);
    mem_get(ms);
    return run_xfer(d, &x);
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

/* The next slot to run, or NULL.  M_IDLE_BY_QUEUE takes a whole
 * submission off the run queue at once (its parts and its signal) into
 * d->batch, and runs from there.  Under mu. */
static struct slot *next_slot(struct bp_dev *d) {
  if (d->mode == M_IDLE_BY_QUEUE || d->mode == M_CANCEL_THEN_IDLE) {
    if (!d->batch && d->run_head) {
      struct slot *h = d->run_head, *s = h;
      while (s->next && !s->signal) s = s->next;
      d->run_head = s->next;
      if (!d->run_head) d->run_tail = NULL;
      s->next = NULL;
      d->batch = h;
    }
    struct slot *s = d->batch;
    if (s) d->batch = s->next;
    return s;
  }
  struct slot *s = d->run_head;
  if (!s) return NULL;
  d->run_head = s->next;
  if (!d->run_head) d->run_tail = NULL;
  return s;
}

static void *worker(void *arg) {
  struct bp_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stopping && (d->faulted || (!d->run_head && !d->batch))) pthread_cond_wait(&d->work_cv, &d->mu);
    if (d->stopping) break;
    struct slot *s = next_slot(d);
    if (!s) continue;
    s->next = NULL;
    if (s->signal) {
      atomic_store_explicit(&d->word, s->value, memory_order_release);
      slots_give(d, s);
      pthread_cond_broadcast(&d->event_cv);
      continue;
    }
    struct rig_part p = s->part;
    slots_give(d, s);
    d->busy = 1;
    run_part(d, &p);
    d->busy = 0;
    d->progress++;
    pthread_cond_broadcast(&d->job_cv);
  }
  /* Stopped: what was committed and not run is dropped; no work runs any
   * more (as this mode sees it), so the last value goes in now if stop
   * could not write it (M_OK_STOP_REAPER: its reaper does). */
  slots_give(d, d->run_head);
  d->run_head = d->run_tail = NULL;
  slots_give(d, d->batch);
  d->batch = NULL;
  if (!d->reaper) publish_last(d);
  d->eng_exit = 1;
  pthread_cond_broadcast(&d->eng_cv);
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

static int bp_room(void *dev, const struct rig_submission *s) {
  struct bp_dev *d = dev;
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

static int bp_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct bp_dev *d = dev;
  uint32_t need = s->n_parts + 1;
  int rc = 1;
  pthread_mutex_lock(&d->mu);
  d->last_value = value; /* also for a failed submit (STOP-3) */
  struct thr *t = thr_find(d, 0);
  if (d->stopping || !t || t->reserved < need) goto out;
  for (uint32_t i = 0; i < s->n_parts; i++)
    if (s->parts[i].op < RIG_OP_FILL || s->parts[i].op > RIG_OP_LAUNCH) goto out;
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

static int bp_commit(void *dev) {
  struct bp_dev *d = dev;
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

static const struct rig_queue_fns bp_table = { bp_room, bp_submit, bp_commit };

/* ------------------------------------------------------- OCaml device */

static void dev_release(struct bp_dev *d) {
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  for (uint32_t i = 1; i < d->n_objs; i++) {
    struct obj *o = &d->objs[i];
    if (o->kind == OBJ_MEM || o->kind == OBJ_MAP) mem_put(o->mem);
    else if (o->kind == OBJ_ENTRY && o->addr) free(o->addr);
  }
  free(d->objs);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->work_cv);
  pthread_cond_destroy(&d->event_cv);
  pthread_cond_destroy(&d->job_cv);
  pthread_cond_destroy(&d->eng_cv);
  free(d);
}

#define Dev_val(v) (*(struct bp_dev **)Data_custom_val(v))

static void dev_finalize(value v) {
  struct bp_dev *d = Dev_val(v);
  if (d) dev_release(d);
}

static struct custom_operations dev_ops = {
  "rig.blindpr.dev", dev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* bp_open capacity: a new device with [capacity] bytes of Device memory and
 * its worker thread.  Called with signals blocked (rig_mask): the worker
 * inherits that mask, and sets it again itself to be sure (SIG-8). */
CAMLprim value bp_open(value vcap, value vmode) {
  CAMLparam2(vcap, vmode);
  CAMLlocal1(v);
  struct bp_dev *d = calloc(1, sizeof *d);
  if (!d) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work_cv, &ca);
  pthread_cond_init(&d->event_cv, &ca);
  pthread_cond_init(&d->job_cv, &ca);
  pthread_cond_init(&d->eng_cv, &ca);
  d->mode = Int_val(vmode);
  atomic_init(&d->stop_flag, 0);
  pthread_condattr_destroy(&ca);
  d->capacity = Long_val(vcap);
  atomic_init(&d->word, 0);
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
    caml_failwith("blindpr: cannot start the device's thread");
  }
  if (d->mode == M_ENGINE_DRAINS || d->mode == M_OK_ENGINE) {
    /* the copy engine: a reference of the device of its own */
    atomic_fetch_add(&d->refs, 1);
    if (start_thread(&tid, engine_main, d, 1) != 0) {
      atomic_fetch_sub(&d->refs, 1);
      pthread_mutex_lock(&d->mu);
      d->mode = M_PLAIN; /* no engine: the worker moves the bytes itself */
      pthread_mutex_unlock(&d->mu);
    }
  }
  v = caml_alloc_custom(&dev_ops, sizeof(struct bp_dev *), 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

CAMLprim value bp_dev_ptr(value v) { return caml_copy_nativeint((intnat)Dev_val(v)); }
CAMLprim value bp_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&bp_table); }

/* bp_alloc dev charged n: a region of n bytes (0: none). */
CAMLprim value bp_alloc(value v, value vcharged, value vn) {
  struct bp_dev *d = Dev_val(v);
  int64_t n = Long_val(vn);
  int charged = Bool_val(vcharged);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  if (n > 0 && (!charged || d->used + n <= d->capacity)) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)n) == 0) {
      struct mem *m = mem_new(p);
      uint32_t i = m ? obj_new(d) : 0;
      if (i) {
        struct obj *o = &d->objs[i];
        o->kind = OBJ_MEM;
        o->charged = (uint8_t)charged;
        o->addr = p;
        o->mem = m;
        o->size = (uint64_t)n;
        if (charged) d->used += n;
        h = handle_of(d, i);
      } else {
        free(m);
        free(p);
      }
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* bp_map dev addr n: a mapping of host memory (0: none). */
CAMLprim value bp_map(value v, value vaddr, value vn) {
  struct bp_dev *d = Dev_val(v);
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

/* bp_map_peer dev src h: dev's mapping of src's object h (0: none). */
CAMLprim value bp_map_peer(value v, value vsrc, value vh) {
  struct bp_dev *s = Dev_val(vsrc);
  pthread_mutex_lock(&s->mu);
  struct obj *o = lookup(s, (uint64_t)Long_val(vh));
  char *addr = o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP) ? o->addr : NULL;
  uint64_t size = addr ? o->size : 0;
  struct mem *m = addr ? o->mem : NULL;
  mem_get(m);
  pthread_mutex_unlock(&s->mu);
  if (!addr) return Val_long(0);
  struct bp_dev *d = Dev_val(v);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  uint32_t i = obj_new(d);
  if (i) {
    d->objs[i].kind = OBJ_MAP;
    d->objs[i].addr = addr;
    d->objs[i].mem = m;
    d->objs[i].size = size;
    h = handle_of(d, i);
    m = NULL;
  }
  pthread_mutex_unlock(&d->mu);
  mem_put(m);
  return Val_long((intnat)h);
}

/* bp_free dev h: false if h names nothing. */
CAMLprim value bp_free(value v, value vh) {
  struct bp_dev *d = Dev_val(v);
  char *scratch = NULL;
  struct mem *mem = NULL;
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  struct obj *o = lookup(d, (uint64_t)Long_val(vh));
  if (o && o->kind != OBJ_NONE) {
    if (o->kind == OBJ_ENTRY) scratch = o->addr;
    else mem = o->mem; /* given back once no running part pins it */
    obj_drop(d, o);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  free(scratch);
  mem_put(mem);
  return Val_bool(ok);
}

/* bp_access dev h off buf boff len write: copies between the object's bytes
 * and buf; false if out of bounds or of no object. */
CAMLprim value bp_access(value v, value vh, value voff, value vbuf, value vboff, value vlen, value vwrite) {
  struct bp_dev *d = Dev_val(v);
  uint64_t off = (uint64_t)Long_val(voff), len = (uint64_t)Long_val(vlen);
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  char *p = span(d, (uint64_t)Long_val(vh), off, len, NULL);
  if (p) {
    char *b = (char *)Bytes_val(vbuf) + Long_val(vboff);
    if (Bool_val(vwrite)) memcpy(p, b, len);
    else memcpy(b, p, len);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  return Val_bool(ok);
}
CAMLprim value bp_access_byte(value *argv, int argn) {
  (void)argn;
  return bp_access(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6]);
}

/* bp_entry dev fn scratch: an entry of function kind fn with [scratch]
 * bytes of Device memory: its handle, or 0 when the budget lacks them. */
CAMLprim value bp_entry(value v, value vfn, value vscratch) {
  struct bp_dev *d = Dev_val(v);
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

CAMLprim value bp_capacity(value v) { return Val_long(Dev_val(v)->capacity); }

/* bp_grow dev: 0 (Grown) or the bytes still missing (Short n). */
CAMLprim value bp_grow(value v) {
  struct bp_dev *d = Dev_val(v);
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
CAMLprim value bp_signaled(value v) {
  return Val_long((intnat)atomic_load_explicit(&Dev_val(v)->word, memory_order_acquire));
}

/* bp_wait dev seen ms: blocks, without the OCaml runtime (SIG-3), until the
 * word differs from seen, the device faults, stops, or ms pass. */
CAMLprim value bp_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  struct bp_dev *d = Dev_val(v);
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

/* bp_fault dev: Some why once the device faulted.  The fault stays
 * recorded: every later sleep raises it (TIME-5). */
CAMLprim value bp_fault(value v) {
  CAMLparam1(v);
  CAMLlocal1(msg);
  struct bp_dev *d = Dev_val(v);
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

/* The reaper of M_OK_STOP_REAPER: waits, on a thread of its own, for the
 * part that ran at stop to end, then writes the last value. */
static void *reaper_main(void *arg) {
  struct bp_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  while (d->busy) pthread_cond_wait(&d->job_cv, &d->mu);
  publish_last(d);
  pthread_mutex_unlock(&d->mu);
  dev_release(d);
  return NULL;
}

/* bp_stop dev publish: stops the device without waiting for its work.
 * Drops what was encoded and not committed (STOP-4); when the last value
 * goes into the word is the mode's (see blindpr.ml).  With publish false
 * (abort), the word keeps what it reads.  true when stop must then settle
 * (bp_settle, inside a wait). */
CAMLprim value bp_stop(value v, value vpublish) {
  struct bp_dev *d = Dev_val(v);
  int settle = 0;
  pthread_mutex_lock(&d->mu);
  if (!d->stopping) {
    d->stopping = 1;
    atomic_store(&d->stop_flag, 1);
    if (!Bool_val(vpublish)) d->final_written = 1;
    drop_encoded(d);
    switch (d->mode) {
    case M_FENCE_THEN_CANCEL:
      /* the fence first, then the cancel (below) ends the work */
      publish_last(d);
      break;
    case M_FIRST_CHUNK:
      if (!d->busy) publish_last(d);
      else {
        d->settle_from = d->progress;
        settle = 1;
      }
      break;
    case M_STOP_WAITS_LEAD:
      if (!d->busy) publish_last(d);
      else if (d->split_active) settle = 1;
      break;
    case M_IDLE_BY_QUEUE:
      /* nothing left in the run queue: nothing runs */
      if (!d->run_head) publish_last(d);
      break;
    case M_CANCEL_THEN_IDLE:
      /* cancel what is queued first, then "nothing left in the run queue:
       * nothing runs" */
      slots_give(d, d->run_head);
      d->run_head = d->run_tail = NULL;
      if (!d->run_head) publish_last(d);
      break;
    case M_OK_STOP_REAPER:
      if (!d->busy) publish_last(d);
      else {
        pthread_t tid;
        atomic_fetch_add(&d->refs, 1);
        if (start_thread(&tid, reaper_main, d, 1) == 0) d->reaper = 1;
        else atomic_fetch_sub(&d->refs, 1); /* the worker writes it, as hostmem's */
      }
      break;
    default:
      if (!d->busy) publish_last(d);
      break;
    }
    pthread_cond_broadcast(&d->work_cv);
    pthread_cond_broadcast(&d->event_cv);
    pthread_cond_broadcast(&d->job_cv);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_bool(settle);
}

/* bp_settle dev: stop's short wait (5 ms at most), without the OCaml
 * runtime (SIG-3).  M_FIRST_CHUNK: until the running part reports
 * progress, then writes the last value.  M_STOP_WAITS_LEAD: until the lead
 * slice of the split part ends, then writes it; else leaves it to the
 * worker. */
CAMLprim value bp_settle(value v) {
  CAMLparam1(v);
  struct bp_dev *d = Dev_val(v);
  struct timespec ts;
  deadline_after(&ts, 5);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  if (d->mode == M_FIRST_CHUNK) {
    while (d->busy && d->progress == d->settle_from)
      if (pthread_cond_timedwait(&d->job_cv, &d->mu, &ts) == ETIMEDOUT) break;
    publish_last(d);
  } else if (d->mode == M_STOP_WAITS_LEAD) {
    while (d->split_active && !d->lead_done)
      if (pthread_cond_timedwait(&d->job_cv, &d->mu, &ts) == ETIMEDOUT) break;
    if (d->split_active ? d->lead_done : !d->busy) publish_last(d);
  }
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* bp_busy dev: committed work not yet done (false once stopped or faulted). */
CAMLprim value bp_busy(value v) {
  struct bp_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int busy = !d->stopping && !d->faulted && (d->busy || d->run_head != NULL);
  pthread_mutex_unlock(&d->mu);
  return Val_bool(busy);
}

CAMLprim value bp_stopped(value v) {
  struct bp_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int s = d->stopping;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(s);
}
