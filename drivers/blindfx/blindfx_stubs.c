/* blindfx: hostmem's device (a copy of drivers/hostmem/hostmem_stubs.c,
 * prefix fx_) with the knobs the fx-* drivers need:
 *
 *   - the allocator of Device memory (amode): hostmem's (posix_memalign per
 *     region), a buddy allocator over an arena of the budget's size, a slab
 *     allocator (64 KiB slabs of one size class, empty slabs cached, trimmed
 *     before no memory: or never, for alloc, in AM_SLAB_HOARD), Device and
 *     Mapped on one budget, frees queued and drained before no memory, and
 *     AM_SWAPPED (Mapped has a window budget of its own; free credits a
 *     region's bytes to the other kind's budget: a bug);
 *   - where the word is (wmode): in the device (hostmem), at an offset
 *     inside a page of Mapped memory of the driver's own, or in the device
 *     but written as the last part of a submission starts (a bug);
 *   - signaled's reads: hostmem's, a volatile read and an acquire fence,
 *     max of the word and a cache of earlier reads of it, and one that
 *     guesses from the queue state (a bug);
 *   - logging for locate/peer/signaled/sleep: an in-memory ring, a
 *     non-blocking write that drops on EAGAIN, a background thread.
 *
 * What follows is hostmem's text, edited where a knob reads.
 *
 * hostmem: a rig driver whose device is the host.
 *
 * The device (struct fx_dev):
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
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

enum obj_kind { OBJ_NONE = 0, OBJ_MEM, OBJ_MAP, OBJ_ENTRY, OBJ_PENDING /* freed, queued (AM_QUEUED) */ };
enum amode { AM_PLAIN = 0, AM_BUDDY = 1, AM_SLAB = 2, AM_SLAB_HOARD = 3, AM_SHARED = 4, AM_QUEUED = 5, AM_SWAPPED = 6 };
enum wmode { WM_DEVICE = 0, WM_PAGE = 1, WM_EARLY = 2 };
enum how { HOW_DIRECT = 0, HOW_BUDDY = 1, HOW_SLAB = 2 };
struct slab;
enum fn_kind { FN_NOP = 0, FN_SPIN = 1, FN_FAULT = 2, FN_HANG = 3, FN_REFUSE = 4 };

struct obj {
  uint32_t gen;      /* bumped at each free: stale handles miss */
  uint8_t kind;      /* enum obj_kind */
  uint8_t fn;        /* enum fn_kind, for entries */
  uint8_t mkind;     /* 0 Device, 1 Mapped, 2 Pinned: the budget csize is charged to */
  uint8_t how;       /* enum how: where addr comes from */
  char *addr;        /* memory (or scratch) */
  uint64_t size;
  uint64_t csize;    /* bytes charged to a budget (0: none) */
  uint32_t bidx;     /* HOW_BUDDY: the block's index (64-byte units) */
  uint32_t sidx;     /* HOW_SLAB: the object's index in its slab */
  struct slab *slab; /* HOW_SLAB */
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

struct fx_dev {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* the worker waits here for work or stop */
  pthread_cond_t event_cv;  /* sleepers wait here for the word or a fault */
  _Atomic uint64_t word;
  _Atomic uint64_t *wordp;  /* where the word is: &word, or inside the page */
  uint32_t word_obj;        /* WM_PAGE: the page's object */
  _Atomic uint64_t seen_max;  /* fx_signaled_max: the largest value read from the word */
  atomic_int refs;
  int amode, wmode;

  int64_t capacity, used;   /* the Device budget, in bytes */
  int64_t mcap, mused;      /* AM_SWAPPED: the Mapped window's budget */

  /* AM_BUDDY */
  char *arena;
  int bmax;                 /* the arena's order */
  uint32_t nb;              /* 64-byte units */
  uint8_t *bst;             /* per unit: 0, or (order + 1) | 0x80 when a free block starts there, (order + 1) when a used one does */
  int32_t *bnx, *bpv;
  int32_t bhead[40];

  /* AM_SLAB, AM_SLAB_HOARD */
  struct slab *slabs[16];

  /* AM_QUEUED */
  uint32_t pending;         /* list of OBJ_PENDING objects through next_free */

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
  uint64_t last_committed;  /* the value of the last signal committed (fx_signaled_idle) */
};

static void dev_release(struct fx_dev *d);

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

static uint64_t handle_of(struct fx_dev *d, uint32_t i) { return ((uint64_t)d->objs[i].gen << 32) | i; }

/* The object a handle names, or NULL.  Under mu. */
static struct obj *lookup(struct fx_dev *d, uint64_t h) {
  uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
  if (i == 0 || i >= d->n_objs) return NULL;
  struct obj *o = &d->objs[i];
  if (o->kind == OBJ_NONE || o->gen != gen) return NULL;
  return o;
}

/* A new object; 0 when the host has no memory for the table.  Under mu. */
static uint32_t obj_new(struct fx_dev *d) {
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

static void obj_drop(struct fx_dev *d, struct obj *o) {
  uint32_t i = (uint32_t)(o - d->objs);
  if (o->csize) {
    int to_mapped = o->mkind == 1 && d->amode == AM_SWAPPED;
    /* AM_SWAPPED's bug: free credits a region's bytes to the other kind */
    if (d->amode == AM_SWAPPED && o->kind == OBJ_MEM) to_mapped = !to_mapped;
    if (to_mapped) d->mused -= (int64_t)o->csize;
    else d->used -= (int64_t)o->csize;
  }
  o->kind = OBJ_NONE;
  o->addr = NULL;
  o->size = 0;
  o->csize = 0;
  o->how = HOW_DIRECT;
  o->slab = NULL;
  o->gen++;
  if (o->gen == 0) o->gen = 1;
  o->next_free = d->free_obj;
  d->free_obj = i;
}


/* ------------------------------------------------------- allocators */

/* The buddy allocator (AM_BUDDY): an arena of 2^bmax bytes, blocks of 2^k
 * bytes (k >= BMIN), free lists per order, coalescing on free.  Under mu. */
#define BMIN 6
static int order_of(uint64_t n) {
  int k = BMIN;
  while (((uint64_t)1 << k) < n) k++;
  return k;
}
static void bl_push(struct fx_dev *d, int32_t i, int o) {
  d->bst[i] = (uint8_t)((o + 1) | 0x80);
  d->bnx[i] = d->bhead[o];
  d->bpv[i] = -1;
  if (d->bhead[o] >= 0) d->bpv[d->bhead[o]] = i;
  d->bhead[o] = i;
}
static void bl_del(struct fx_dev *d, int32_t i, int o) {
  if (d->bpv[i] >= 0) d->bnx[d->bpv[i]] = d->bnx[i];
  else d->bhead[o] = d->bnx[i];
  if (d->bnx[i] >= 0) d->bpv[d->bnx[i]] = d->bpv[i];
  d->bst[i] = 0;
}
static int buddy_init(struct fx_dev *d, int64_t cap) {
  int o = BMIN;
  while (((int64_t)1 << (o + 1)) <= cap) o++;
  d->bmax = o;
  d->nb = (uint32_t)1 << (o - BMIN);
  if (posix_memalign((void **)&d->arena, 4096, (size_t)1 << o)) return 0;
  d->bst = calloc(d->nb, 1);
  d->bnx = calloc(d->nb, sizeof(int32_t));
  d->bpv = calloc(d->nb, sizeof(int32_t));
  if (!d->bst || !d->bnx || !d->bpv) return 0;
  for (int k = 0; k < 40; k++) d->bhead[k] = -1;
  bl_push(d, 0, o);
  return 1;
}
static int32_t buddy_alloc(struct fx_dev *d, int k) {
  int o = k;
  while (o <= d->bmax && d->bhead[o] < 0) o++;
  if (o > d->bmax) return -1;
  int32_t i = d->bhead[o];
  bl_del(d, i, o);
  while (o > k) {
    o--;
    bl_push(d, i + (1 << (o - BMIN)), o);
  }
  d->bst[i] = (uint8_t)(k + 1);
  return i;
}
static void buddy_free(struct fx_dev *d, int32_t i) {
  int o = (d->bst[i] & 0x7f) - 1;
  d->bst[i] = 0;
  while (o < d->bmax) {
    int32_t j = i ^ (1 << (o - BMIN));
    if (d->bst[j] != (uint8_t)((o + 1) | 0x80)) break;
    bl_del(d, j, o);
    if (j < i) i = j;
    o++;
  }
  bl_push(d, i, o);
}

/* The slab allocator (AM_SLAB, AM_SLAB_HOARD): Device regions of at most
 * SLAB_MAX bytes are objects of 64 KiB slabs of one power-of-two class;
 * a slab is charged whole; an empty slab stays cached until trimmed. */
#define SLAB_BYTES 65536
#define SLAB_MAX 16384
struct slab {
  struct slab *next;
  char *mem;
  uint32_t cap, nfree;
  uint64_t used_bits[16];  /* cap <= 1024 */
};
static int slab_class(uint64_t n) { return order_of(n) - BMIN; }

/* Empty slabs back to the budget.  Under mu. */
static void slab_trim(struct fx_dev *d) {
  for (int c = 0; c < 16; c++) {
    struct slab **pp = &d->slabs[c];
    while (*pp) {
      struct slab *s = *pp;
      if (s->nfree == s->cap) {
        *pp = s->next;
        free(s->mem);
        free(s);
        d->used -= SLAB_BYTES;
      } else pp = &s->next;
    }
  }
}

static void drain_pending(struct fx_dev *d);

/* What the mode gives back before a budget answers no.  alloc's own asks
 * (from_alloc) do not trim the slabs in AM_SLAB_HOARD: its bug. */
static void reclaim(struct fx_dev *d, int from_alloc) {
  if (d->amode == AM_QUEUED) drain_pending(d);
  if (d->amode == AM_SLAB || (d->amode == AM_SLAB_HOARD && !from_alloc)) slab_trim(d);
}

/* Charge n bytes to the Device budget, reclaiming first where the budget
 * has no room: 1 if charged.  Under mu. */
static int charge(struct fx_dev *d, int64_t n, int from_alloc) {
  if (d->used + n <= d->capacity) {
    d->used += n;
    return 1;
  }
  reclaim(d, from_alloc);
  if (d->used + n <= d->capacity) {
    d->used += n;
    return 1;
  }
  return 0;
}

/* An object of a slab of n's class, charging a new slab if none has room:
 * its slab, or NULL.  Under mu. */
static struct slab *slab_take(struct fx_dev *d, uint64_t n, uint32_t *idx, char **addr) {
  int c = slab_class(n);
  uint64_t osz = (uint64_t)1 << (c + BMIN);
  struct slab *s = d->slabs[c];
  while (s && s->nfree == 0) s = s->next;
  if (!s) {
    if (!charge(d, SLAB_BYTES, 1)) return NULL;
    s = calloc(1, sizeof *s);
    if (s && posix_memalign((void **)&s->mem, 64, SLAB_BYTES) != 0) {
      free(s);
      s = NULL;
    }
    if (!s) {
      d->used -= SLAB_BYTES;
      return NULL;
    }
    s->cap = s->nfree = (uint32_t)(SLAB_BYTES / osz);
    s->next = d->slabs[c];
    d->slabs[c] = s;
  }
  for (uint32_t w = 0; w < 16; w++) {
    if (~s->used_bits[w] == 0) continue;
    uint32_t b = (uint32_t)__builtin_ctzll(~s->used_bits[w]);
    uint32_t i = w * 64 + b;
    if (i >= s->cap) break;
    s->used_bits[w] |= (uint64_t)1 << b;
    s->nfree--;
    *idx = i;
    *addr = s->mem + (uint64_t)i * osz;
    return s;
  }
  return NULL; /* not reached: nfree > 0 */
}
static void slab_put(struct slab *s, uint32_t i) {
  s->used_bits[i / 64] &= ~((uint64_t)1 << (i % 64));
  s->nfree++;
}

/* Give an object's memory back to where it came from and drop it.  Under mu. */
static void obj_release(struct fx_dev *d, struct obj *o) {
  if (o->kind == OBJ_MEM || o->kind == OBJ_PENDING || o->kind == OBJ_ENTRY) {
    switch (o->how) {
    case HOW_BUDDY: buddy_free(d, (int32_t)o->bidx); break;
    case HOW_SLAB: slab_put(o->slab, o->sidx); break;
    default: free(o->addr); break;
    }
  }
  obj_drop(d, o);
}

/* AM_QUEUED: give back every freed region the queue holds.  Under mu. */
static void drain_pending(struct fx_dev *d) {
  uint32_t i = d->pending;
  d->pending = 0;
  while (i) {
    struct obj *o = &d->objs[i];
    uint32_t next = o->next_free;
    obj_release(d, o);
    i = next;
  }
}

static struct thr *thr_find(struct fx_dev *d, int create) {
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

static void slots_give(struct fx_dev *d, struct slot *s) {
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
static struct block *block_new(struct fx_dev *d) {
  if (!charge(d, BLOCK_BYTES, 0)) return NULL;
  struct block *b = calloc(1, sizeof *b);
  if (!b) d->used -= BLOCK_BYTES;
  return b;
}

/* Put blocks into the queues' pool.  Under mu. */
static void blocks_adopt(struct fx_dev *d, struct block *b) {
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

static void blocks_free(struct fx_dev *d, struct block *b) {
  while (b) {
    struct block *n = b->next;
    free(b);
    d->used -= BLOCK_BYTES;
    b = n;
  }
}

/* Drop every thread's encoded work and reservations.  Under mu. */
static void drop_encoded(struct fx_dev *d) {
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
static void publish_last(struct fx_dev *d) {
  if (d->final_written) return;
  d->final_written = 1;
  atomic_store_explicit(d->wordp, d->last_value, memory_order_release);
  pthread_cond_broadcast(&d->event_cv);
}

static void fault(struct fx_dev *d, const char *why, uint64_t a) {
  if (d->faulted) return;
  d->faulted = 1;
  snprintf(d->fault_msg, sizeof d->fault_msg, "blindfx: %s (0x%llx)", why, (unsigned long long)a);
  pthread_cond_broadcast(&d->event_cv);
}

/* ------------------------------------------------------------- worker */

/* Wait on work_cv until [ms] pass (ms < 0: for ever) or stop.  Under mu. */
static void pause_ms(struct fx_dev *d, int64_t ms) {
  struct timespec ts;
  if (ms >= 0) deadline_after(&ts, ms);
  while (!d->stopping) {
    int rc = ms >= 0 ? pthread_cond_timedwait(&d->work_cv, &d->mu, &ts) : pthread_cond_wait(&d->work_cv, &d->mu);
    if (rc == ETIMEDOUT) break;
  }
}

/* The memory [h] names, [off, off+len) of it, or NULL.  Under mu. */
static char *span(struct fx_dev *d, uint64_t h, uint64_t off, uint64_t len) {
  struct obj *o = lookup(d, h);
  if (!o || (o->kind != OBJ_MEM && o->kind != OBJ_MAP)) return NULL;
  if (off > o->size || len > o->size - off) return NULL;
  return o->addr + off;
}

/* Run one part.  Under mu; gives it up around memory traffic (rig frees
 * nothing that work may still use: MEM-3). */
static void run_part(struct fx_dev *d, const struct rig_part *p) {
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
  struct fx_dev *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stopping && (d->faulted || !d->run_head)) pthread_cond_wait(&d->work_cv, &d->mu);
    if (d->stopping) break;
    struct slot *s = d->run_head;
    d->run_head = s->next;
    if (!d->run_head) d->run_tail = NULL;
    s->next = NULL;
    if (s->signal) {
      atomic_store_explicit(d->wordp, s->value, memory_order_release);
      slots_give(d, s);
      pthread_cond_broadcast(&d->event_cv);
      continue;
    }
    struct rig_part p = s->part;
    slots_give(d, s);
    /* WM_EARLY's bug: the value goes into the word as the submission's
     * last part starts, not once it is done. */
    if (d->wmode == WM_EARLY && d->run_head && d->run_head->signal) {
      atomic_store_explicit(d->wordp, d->run_head->value, memory_order_release);
      pthread_cond_broadcast(&d->event_cv);
    }
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

static int fx_room(void *dev, const struct rig_submission *s) {
  struct fx_dev *d = dev;
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

static int fx_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct fx_dev *d = dev;
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

static int fx_commit(void *dev) {
  struct fx_dev *d = dev;
  int rc = 0;
  pthread_mutex_lock(&d->mu);
  struct thr *t = thr_find(d, 0);
  if (d->stopping) rc = 1;
  else if (t && t->open_head) {
    if (d->run_tail) d->run_tail->next = t->open_head;
    else d->run_head = t->open_head;
    d->run_tail = t->open_tail;
    if (t->open_tail->signal) __atomic_store_n(&d->last_committed, t->open_tail->value, __ATOMIC_RELEASE);
    t->open_head = t->open_tail = NULL;
    pthread_cond_signal(&d->work_cv);
  }
  if (t) thr_maybe_free(t);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

static const struct rig_queue_fns fx_table = { fx_room, fx_submit, fx_commit };

/* ------------------------------------------------------- OCaml device */

static void dev_release(struct fx_dev *d) {
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  for (uint32_t i = 1; i < d->n_objs; i++) {
    struct obj *o = &d->objs[i];
    if ((o->kind == OBJ_MEM || o->kind == OBJ_PENDING || o->kind == OBJ_ENTRY) && o->how == HOW_DIRECT) free(o->addr);
  }
  for (int c = 0; c < 16; c++)
    while (d->slabs[c]) {
      struct slab *s = d->slabs[c];
      d->slabs[c] = s->next;
      free(s->mem);
      free(s);
    }
  free(d->arena);
  free(d->bst);
  free(d->bnx);
  free(d->bpv);
  free(d->objs);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->work_cv);
  pthread_cond_destroy(&d->event_cv);
  free(d);
}

#define Dev_val(v) (*(struct fx_dev **)Data_custom_val(v))

static void dev_finalize(value v) {
  struct fx_dev *d = Dev_val(v);
  if (d) dev_release(d);
}

static struct custom_operations dev_ops = {
  "rig.blindfx.dev", dev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* fx_open capacity: a new device with [capacity] bytes of Device memory and
 * its worker thread.  Called with signals blocked (rig_mask): the worker
 * inherits that mask, and sets it again itself to be sure (SIG-8). */
CAMLprim value fx_open(value vcap, value vamode, value vwmode) {
  CAMLparam3(vcap, vamode, vwmode);
  CAMLlocal1(v);
  struct fx_dev *d = calloc(1, sizeof *d);
  if (!d) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->work_cv, &ca);
  pthread_cond_init(&d->event_cv, &ca);
  pthread_condattr_destroy(&ca);
  d->capacity = Long_val(vcap);
  d->mcap = Long_val(vcap);
  d->amode = Int_val(vamode);
  d->wmode = Int_val(vwmode);
  atomic_init(&d->word, 0);
  atomic_init(&d->seen_max, 0);
  d->wordp = &d->word;
  atomic_init(&d->refs, 2);
  if (d->amode == AM_BUDDY && !buddy_init(d, d->capacity)) {
    atomic_store(&d->refs, 1);
    dev_release(d);
    caml_failwith("blindfx: no host memory for the buddy arena");
  }
  if (d->wmode == WM_PAGE) {
    /* The word: 8 bytes at offset 2048 of a page of Mapped memory of the
     * driver's own, an object of the device (not charged). */
    void *page = NULL;
    uint32_t i = posix_memalign(&page, 4096, 4096) == 0 ? obj_new(d) : 0;
    if (!i) {
      free(page);
      atomic_store(&d->refs, 1);
      dev_release(d);
      caml_failwith("blindfx: no host memory for the word's page");
    }
    memset(page, 0, 4096);
    struct obj *o = &d->objs[i];
    o->kind = OBJ_MEM;
    o->mkind = 1;
    o->addr = page;
    o->size = 4096;
    d->word_obj = i;
    d->wordp = (_Atomic uint64_t *)((char *)page + 2048);
    atomic_init(d->wordp, 0);
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
  pthread_attr_destroy(&attr);
  rig_restore(&old);
  if (rc != 0) {
    atomic_store(&d->refs, 1);
    dev_release(d);
    caml_failwith("blindfx: cannot start the device's thread");
  }
  v = caml_alloc_custom(&dev_ops, sizeof(struct fx_dev *), 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

CAMLprim value fx_dev_ptr(value v) { return caml_copy_nativeint((intnat)Dev_val(v)); }
CAMLprim value fx_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&fx_table); }

/* fx_alloc dev kind n: a region of n bytes of memory kind (0 Device,
 * 1 Mapped, 2 Pinned), 0: none. */
CAMLprim value fx_alloc(value v, value vkind, value vn) {
  struct fx_dev *d = Dev_val(v);
  int64_t n = Long_val(vn);
  int kind = Int_val(vkind);
  uint64_t h = 0;
  if (n <= 0) return Val_long(0);
  pthread_mutex_lock(&d->mu);
  uint32_t i = obj_new(d);
  if (i) {
    struct obj *o = &d->objs[i];
    o->how = HOW_DIRECT;
    o->mkind = (uint8_t)kind;
    char *p = NULL;
    if (kind == 0 && d->amode == AM_BUDDY) {
      int k = order_of((uint64_t)n);
      if (k <= d->bmax && charge(d, (int64_t)1 << k, 1)) {
        int32_t b = buddy_alloc(d, k);
        if (b >= 0) {
          p = d->arena + ((uint64_t)b << BMIN);
          o->how = HOW_BUDDY;
          o->bidx = (uint32_t)b;
          o->csize = (uint64_t)1 << k;
        } else d->used -= (int64_t)1 << k;
      }
    } else if (kind == 0 && (d->amode == AM_SLAB || d->amode == AM_SLAB_HOARD) && n <= SLAB_MAX) {
      uint32_t si;
      struct slab *s = slab_take(d, (uint64_t)n, &si, &p);
      if (s) {
        o->how = HOW_SLAB;
        o->slab = s;
        o->sidx = si;
        o->csize = 0; /* the slab is charged whole */
      }
    } else {
      int charged = kind == 0 || (kind == 1 && (d->amode == AM_SHARED || d->amode == AM_SWAPPED));
      int ok = 1;
      if (charged) {
        if (kind == 1 && d->amode == AM_SWAPPED) {
          ok = d->mused + n <= d->mcap;
          if (ok) d->mused += n;
        } else ok = charge(d, n, 1);
      }
      if (ok && posix_memalign((void **)&p, 64, (size_t)n) != 0) p = NULL;
      if (ok && !p && charged) {
        if (kind == 1 && d->amode == AM_SWAPPED) d->mused -= n;
        else d->used -= n;
      }
      if (p && charged) o->csize = (uint64_t)n;
      if (p && charged && kind == 1 && d->amode != AM_SWAPPED) o->mkind = 0; /* AM_SHARED: the Device budget */
    }
    if (p) {
      o->kind = OBJ_MEM;
      o->addr = p;
      o->size = (uint64_t)n;
      h = handle_of(d, i);
    } else {
      o->kind = OBJ_MEM; /* so that obj_drop puts it back */
      o->csize = 0;
      o->how = HOW_DIRECT;
      o->addr = NULL;
      obj_drop(d, o);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

/* fx_map dev addr n: a mapping of host memory (0: none). */
CAMLprim value fx_map(value v, value vaddr, value vn) {
  struct fx_dev *d = Dev_val(v);
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

/* fx_map_peer dev src h: dev's mapping of src's object h (0: none). */
CAMLprim value fx_map_peer(value v, value vsrc, value vh) {
  struct fx_dev *s = Dev_val(vsrc);
  pthread_mutex_lock(&s->mu);
  struct obj *o = lookup(s, (uint64_t)Long_val(vh));
  char *addr = o && (o->kind == OBJ_MEM || o->kind == OBJ_MAP) ? o->addr : NULL;
  uint64_t size = addr ? o->size : 0;
  pthread_mutex_unlock(&s->mu);
  if (!addr) return Val_long(0);
  struct fx_dev *d = Dev_val(v);
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

/* fx_free dev h: false if h names nothing. */
CAMLprim value fx_free(value v, value vh) {
  struct fx_dev *d = Dev_val(v);
  int ok = 0;
  pthread_mutex_lock(&d->mu);
  struct obj *o = lookup(d, (uint64_t)Long_val(vh));
  if (o && o->kind != OBJ_NONE && (uint32_t)(o - d->objs) != d->word_obj) {
    if (d->amode == AM_QUEUED && o->kind == OBJ_MEM && o->csize) {
      /* AM_QUEUED: the region's handle dies now; its memory stays charged,
       * queued, until a budget needs it (reclaim) */
      o->kind = OBJ_PENDING;
      o->gen++;
      if (o->gen == 0) o->gen = 1;
      o->next_free = d->pending;
      d->pending = (uint32_t)(o - d->objs);
    } else obj_release(d, o);
    ok = 1;
  }
  pthread_mutex_unlock(&d->mu);
  return Val_bool(ok);
}

/* fx_access dev h off buf boff len write: copies between the object's bytes
 * and buf; false if out of bounds or of no object. */
CAMLprim value fx_access(value v, value vh, value voff, value vbuf, value vboff, value vlen, value vwrite) {
  struct fx_dev *d = Dev_val(v);
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
CAMLprim value fx_access_byte(value *argv, int argn) {
  (void)argn;
  return fx_access(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6]);
}

/* fx_entry dev fn scratch: an entry of function kind fn with [scratch]
 * bytes of Device memory: its handle, or 0 when the budget lacks them. */
CAMLprim value fx_entry(value v, value vfn, value vscratch) {
  struct fx_dev *d = Dev_val(v);
  int64_t n = Long_val(vscratch);
  uint64_t h = 0;
  pthread_mutex_lock(&d->mu);
  if (charge(d, n, 0)) {
    void *p = NULL;
    uint32_t i = 0;
    if (n == 0 || posix_memalign(&p, 64, (size_t)n) == 0) {
      i = obj_new(d);
      if (i) {
        struct obj *o = &d->objs[i];
        o->kind = OBJ_ENTRY;
        o->fn = (uint8_t)Int_val(vfn);
        o->mkind = 0;
        o->how = HOW_DIRECT;
        o->csize = (uint64_t)n;
        o->addr = p;
        o->size = (uint64_t)n;
        h = handle_of(d, i);
      } else free(p);
    }
    if (!i) d->used -= n;
  }
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)h);
}

CAMLprim value fx_capacity(value v) { return Val_long(Dev_val(v)->capacity); }

/* fx_grow dev: 0 (Grown) or the bytes still missing (Short n). */
CAMLprim value fx_grow(value v) {
  struct fx_dev *d = Dev_val(v);
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
CAMLprim value fx_signaled(value v) {
  return Val_long((intnat)atomic_load_explicit(Dev_val(v)->wordp, memory_order_acquire));
}

/* fx-ok-signaled-fence: a volatile 64-bit read of the (aligned) word, then
 * an acquire fence: the order an acquire load gives, spelled the old way. */
CAMLprim value fx_signaled_fence(value v) {
  struct fx_dev *d = Dev_val(v);
  uint64_t w = *(volatile uint64_t *)d->wordp;
  atomic_thread_fence(memory_order_acquire);
  return Val_long((intnat)w);
}

/* fx-ok-signaled-max: max of the word and of the largest value read from
 * it before (by any thread).  The cache is written with release and read
 * with acquire, so that a value it answers carries the order of the read
 * that put it there.  The word only grows, so max is the word. */
CAMLprim value fx_signaled_max(value v) {
  struct fx_dev *d = Dev_val(v);
  uint64_t w = atomic_load_explicit(d->wordp, memory_order_acquire);
  uint64_t c = atomic_load_explicit(&d->seen_max, memory_order_acquire);
  while (w > c && !atomic_compare_exchange_weak_explicit(&d->seen_max, &c, w, memory_order_acq_rel,
                                                         memory_order_acquire)) {
  }
  return Val_long((intnat)(w > c ? w : c));
}

/* fx-signaled-idle (broken): computed from the queue's state: while the
 * worker runs no part, the value of the last signal committed ("the
 * device is idle, so all committed work is done"); the word otherwise. */
CAMLprim value fx_signaled_idle(value v) {
  struct fx_dev *d = Dev_val(v);
  if (!__atomic_load_n(&d->busy, __ATOMIC_ACQUIRE) && !__atomic_load_n(&d->faulted, __ATOMIC_ACQUIRE))
    return Val_long((intnat)__atomic_load_n(&d->last_committed, __ATOMIC_ACQUIRE));
  return Val_long((intnat)atomic_load_explicit(d->wordp, memory_order_acquire));
}

/* The word's page back (WM_PAGE), at rig's free of the word: rig frees it
 * last, once it read the last value, and reads it no more. */
CAMLprim value fx_free_word(value v) {
  struct fx_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  if (d->word_obj) {
    struct obj *o = &d->objs[d->word_obj];
    d->word_obj = 0;
    if (o->kind == OBJ_MEM) obj_release(d, o);
  }
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

CAMLprim value fx_word_handle(value v) {
  struct fx_dev *d = Dev_val(v);
  return Val_long(d->word_obj ? (intnat)handle_of(d, d->word_obj) : 0);
}

/* The check's view: the Device budget's use and the Mapped window's. */
CAMLprim value fx_used(value v) { return Val_long(Dev_val(v)->used); }
CAMLprim value fx_mused(value v) { return Val_long(Dev_val(v)->mused); }

/* fx_wait dev seen ms: blocks, without the OCaml runtime (SIG-3), until the
 * word differs from seen, the device faults, stops, or ms pass. */
CAMLprim value fx_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  struct fx_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t ms = Long_val(vms);
  struct timespec ts;
  deadline_after(&ts, ms < 0 ? 0 : ms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  while (atomic_load_explicit(d->wordp, memory_order_acquire) == seen && !d->faulted && !d->stopping)
    if (pthread_cond_timedwait(&d->event_cv, &d->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* fx_fault dev: Some why once the device faulted.  The fault stays
 * recorded: every later sleep raises it (TIME-5). */
CAMLprim value fx_fault(value v) {
  CAMLparam1(v);
  CAMLlocal1(msg);
  struct fx_dev *d = Dev_val(v);
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

/* fx_stop dev publish: stops the device without waiting for its work.
 * Drops what was encoded and not committed (STOP-4); with no work running,
 * writes the last value given to submit now (STOP-3), else the worker does
 * once its part ends.  With publish false (abort), the word keeps what it
 * reads. */
CAMLprim value fx_stop(value v, value vpublish) {
  struct fx_dev *d = Dev_val(v);
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

/* fx_busy dev: committed work not yet done (false once stopped or faulted). */
CAMLprim value fx_busy(value v) {
  struct fx_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int busy = !d->stopping && !d->faulted && (d->busy || d->run_head != NULL);
  pthread_mutex_unlock(&d->mu);
  return Val_bool(busy);
}

CAMLprim value fx_stopped(value v) {
  struct fx_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int s = d->stopping;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(s);
}

/* ------------------------------------------------------------ logging */

/* fx-ok-log-ring: an in-memory ring of fixed records, process-wide.  A
 * writer claims a record with one atomic add and fills it with relaxed
 * stores, its sequence number last (release): no lock, no allocation, no
 * system call but the vDSO's clock.  A record overwritten while a reader
 * reads it is the reader's problem (it checks seq). */
#define RING_N 4096
struct ring_rec {
  _Atomic uint64_t seq;
  _Atomic uint64_t what, arg, ns;
};
static struct ring_rec ring[RING_N];
static _Atomic uint64_t ring_pos;

CAMLprim value fx_ring_log(value vwhat, value varg) {
  uint64_t i = atomic_fetch_add_explicit(&ring_pos, 1, memory_order_relaxed);
  struct ring_rec *r = &ring[i % RING_N];
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  atomic_store_explicit(&r->what, (uint64_t)Long_val(vwhat), memory_order_relaxed);
  atomic_store_explicit(&r->arg, (uint64_t)Long_val(varg), memory_order_relaxed);
  atomic_store_explicit(&r->ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, memory_order_relaxed);
  atomic_store_explicit(&r->seq, i + 1, memory_order_release);
  return Val_unit;
}
CAMLprim value fx_ring_count(value unit) {
  (void)unit;
  return Val_long((intnat)atomic_load(&ring_pos));
}

static const char *what_name(intnat w) {
  switch (w) {
  case 0: return "locate";
  case 1: return "peer";
  case 2: return "signaled";
  case 3: return "sleep";
  default: return "?";
  }
}

/* fx-ok-log-nonblock: a line per call written with one non-blocking write
 * (or send) to stderr, dropped on EAGAIN (or any error).  The file
 * description is the driver's own: a pipe or a terminal at fd 2 is opened
 * again through /proc with O_NONBLOCK (fcntl on fd 2 would change the
 * process's stderr); a socket is written with send(MSG_DONTWAIT |
 * MSG_NOSIGNAL); anything else (a regular file, whose write may wait for
 * the disk) is not logged to.  Set up by make, again when fd 2 changed;
 * old descriptions are kept open (a logger may still be writing to them:
 * closing could hand their number to another file). */
static _Atomic int nb_fd = -1;
static _Atomic int nb_sock;
static dev_t nb_dev;
static ino_t nb_ino;
static _Atomic uint64_t nb_written, nb_dropped;

CAMLprim value fx_nb_setup(value unit) {
  (void)unit;
  struct stat st;
  if (fstat(2, &st) != 0) {
    atomic_store(&nb_fd, -1);
    return Val_unit;
  }
  if (atomic_load(&nb_fd) >= 0 && st.st_dev == nb_dev && st.st_ino == nb_ino) return Val_unit;
  nb_dev = st.st_dev;
  nb_ino = st.st_ino;
  if (S_ISSOCK(st.st_mode)) {
    atomic_store(&nb_sock, 1);
    atomic_store(&nb_fd, 2);
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    int fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    atomic_store(&nb_sock, 0);
    atomic_store(&nb_fd, fd); /* -1: no reader, or no /proc: no log */
  } else atomic_store(&nb_fd, -1);
  return Val_unit;
}

CAMLprim value fx_nb_log(value vwhat, value varg) {
  int fd = atomic_load(&nb_fd);
  if (fd < 0) {
    atomic_fetch_add(&nb_dropped, 1);
    return Val_unit;
  }
  char buf[96];
  int len = snprintf(buf, sizeof buf, "blindfx: %s 0x%llx\n", what_name(Long_val(vwhat)),
                     (unsigned long long)Long_val(varg));
  ssize_t w;
  if (atomic_load(&nb_sock)) w = send(fd, buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
  else {
    /* a pipe whose reader is gone raises SIGPIPE: held back on this thread
     * for the write and taken if the write raised it */
    sigset_t pipe_set, old, pend;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pend);
    int was_pending = sigismember(&pend, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    w = write(fd, buf, (size_t)len);
    if (w < 0 && errno == EPIPE && !was_pending) {
      struct timespec zero = { 0, 0 };
      sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  if (w == len) atomic_fetch_add(&nb_written, 1);
  else atomic_fetch_add(&nb_dropped, 1);
  return Val_unit;
}
CAMLprim value fx_nb_stats(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(r);
  r = caml_alloc_tuple(2);
  Store_field(r, 0, Val_long((intnat)atomic_load(&nb_written)));
  Store_field(r, 1, Val_long((intnat)atomic_load(&nb_dropped)));
  CAMLreturn(r);
}

/* fx-ok-log-thread: the calls put a line into slots claimed with one
 * compare-and-swap (dropped when the slot is taken); a thread of the
 * driver's own, started once by make with every signal blocked but the
 * fault signals (SIG-8), writes them to stderr with blocking writes. */
#define BT_N 1024
struct bt_slot {
  _Atomic int state; /* 0 free, 1 being filled, 2 full */
  int len;
  char text[96];
};
static struct bt_slot bt[BT_N];
static _Atomic uint64_t bt_pos, bt_written, bt_dropped;
static pthread_once_t bt_once = PTHREAD_ONCE_INIT;

static void *bt_main(void *arg) {
  (void)arg;
  rig_mask(NULL);
  uint64_t cur = 0;
  for (;;) {
    uint64_t end = atomic_load(&bt_pos);
    while (cur < end) {
      struct bt_slot *s = &bt[cur % BT_N];
      int st = atomic_load_explicit(&s->state, memory_order_acquire);
      if (st == 1) break; /* being filled: next round */
      if (st == 2) {
        const char *p = s->text;
        int left = s->len;
        while (left > 0) {
          ssize_t w = write(2, p, (size_t)left);
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) break;
          p += w;
          left -= (int)w;
        }
        atomic_fetch_add(&bt_written, 1);
        atomic_store_explicit(&s->state, 0, memory_order_release);
      }
      cur++;
    }
    struct timespec ts = { 0, 5 * 1000000L };
    nanosleep(&ts, NULL);
  }
  return NULL;
}
static void bt_start_once(void) {
  sigset_t old;
  rig_mask(&old);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&tid, &attr, bt_main, NULL);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
}
CAMLprim value fx_bt_start(value unit) {
  (void)unit;
  pthread_once(&bt_once, bt_start_once);
  return Val_unit;
}
CAMLprim value fx_bt_log(value vwhat, value varg) {
  uint64_t i = atomic_fetch_add(&bt_pos, 1);
  struct bt_slot *s = &bt[i % BT_N];
  int expect = 0;
  if (!atomic_compare_exchange_strong(&s->state, &expect, 1)) {
    atomic_fetch_add(&bt_dropped, 1);
    return Val_unit;
  }
  s->len = snprintf(s->text, sizeof s->text, "blindfx: %s 0x%llx\n", what_name(Long_val(vwhat)),
                    (unsigned long long)Long_val(varg));
  atomic_store_explicit(&s->state, 2, memory_order_release);
  return Val_unit;
}
CAMLprim value fx_bt_stats(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(r);
  r = caml_alloc_tuple(2);
  Store_field(r, 0, Val_long((intnat)atomic_load(&bt_written)));
  Store_field(r, 1, Val_long((intnat)atomic_load(&bt_dropped)));
  CAMLreturn(r);
}
