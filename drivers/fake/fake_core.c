/* fake_core.c: the fake rig device (see fake_core.h).
 *
 * Memory is calloc'd host memory shared between regions by refcount, so
 * that map_peer aliases and freeing one region never frees memory another
 * still maps.  Work runs on one worker pthread per device; the queue is a
 * pool of pre-allocated part slots, so submit only copies parts.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_core.h"

/* The mutants that would otherwise wait for good wait at most this. */
#define FAKE_CAP_MS 3000
#define FAKE_BUCKETS 64

/* ------------------------------------------------------------ types */

struct fake_mem {
  atomic_int refs;
  atomic_int revoked; /* stop-revokes-imports mutant: an importer's stop took it */
  int owned; /* 0: host memory map_host aliases, not ours to free */
  size_t size;
  unsigned char *bytes;
};

struct fake_region {
  uint64_t handle;
  struct fake_mem *mem;
  size_t size;
  int kind;    /* the budget it is charged to, or -1 for a mapping */
  int is_word; /* the device's word: reads it, is in no table */
  int high;    /* dma-moves-high mutant: allocated with over half its budget in use */
  struct fake_dev *dev;
  /* stop-revokes-maps mutant: the device whose memory this peer mapping
   * maps; it outlives the mapping, as rig frees a region only after the
   * mappings over it. */
  struct fake_dev *exporter;
  struct fake_region *next; /* bucket chain */
};

struct fake_fn {
  char *name;
  uint64_t scratch;
  int op;
  uint64_t entry;   /* 0 until entry made it */
  uint64_t charged; /* Device bytes its entries hold */
  int by_prepare;   /* made by a prepare, not yet asked by entry (prepare-restarts-prepared) */
  int deferred;     /* scratch-at-launch mutant: its scratch not made yet */
};

struct fake_image {
  struct fake_dev *dev;
  size_t n;
  struct fake_fn *fns;
  struct fake_image *next;
};

/* A queue slot: one part, plus the submission's value on its last part. */
struct fake_node {
  struct fake_node *next;
  struct rig_part part;
  uint64_t value;
  int ends;  /* last part of its submission: the worker writes value */
  int empty; /* stands for a submission of no parts */
};

/* Slots are allocated in chunks, freed only with the device, since the
 * worker may hold one while stop runs. */
struct fake_chunk {
  struct fake_chunk *next;
  struct fake_node nodes[];
};

/* What a thread has on a device: its reservation, the parts still
 * missing after its last RIG_GROW, its growth, and its encoded work. */
struct fake_thread {
  pthread_t tid;
  struct fake_thread *next;
  uint32_t reserved; /* slots room reserved for its next submit */
  uint32_t held;     /* slots held back at RIG_GROW for the same submission */
  uint32_t missing;  /* slots its last RIG_GROW lacked */
  uint32_t growth_n; /* slots grown, not yet in the queue */
  struct fake_node *growth;
  struct fake_node *enc_head, *enc_tail;
  uint64_t ticket;   /* room-growers-in-order mutant: when it first answered RIG_GROW, 0 once it made room */
};

struct fake_dev {
  uint64_t tickets; /* room-growers-in-order mutant: RIG_GROW answers so far */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* any change: work, word, fault, stop */
  _Atomic uint64_t word;
  atomic_int refs;
  atomic_int dead;
  struct fake_config cfg;
  uint64_t used[FAKE_KINDS];
  uint64_t queue_bytes;
  struct fake_region *buckets[FAKE_BUCKETS];
  struct fake_region *word_region;
  struct fake_image *images;
  struct fake_chunk *chunks;
  struct fake_node *free_nodes;
  uint32_t free_count;
  uint32_t reserved_total; /* reservations and holds of all threads */
  struct fake_thread *threads;
  struct fake_node *run_head, *run_tail;
  int running; /* the worker runs a part */
  int faulted;
  int fault_reported; /* sleep-consumes-fault mutant */
  char reason[256];
  int stopping;
  int64_t commit_hold_ms; /* fake_set_commit_hold */
  int committing;         /* commits in flight (sleep-awaits-commit mutant) */
  int sleeping;           /* sleeps in flight (submit-awaits-sleep mutant) */
  int worker_writes_last;
  int running_fill; /* a large Fill runs, the lock given back between its chunks */
  uint64_t last_value;
  unsigned long allocs;      /* alloc-overlap mutant */
  struct fake_mem *last_mem; /* alloc-overlap and freed-reused-twice mutants */
  struct fake_mem *aside;    /* free-sets-aside mutant: a dma'd region's memory, freed, still charged */
  size_t aside_size;
  struct fake_region *peer_window; /* map-peer-one-window mutant: the last map_peer mapping */
  struct fake_region *host_window; /* map-host-one-window mutant: the last map_host mapping */
  int unloaded;                    /* prepare-restarts-after-unload mutant: an image was unloaded */
  int reuses_left;                 /* freed-reused-twice mutant: allocs that still take last_mem */
  void *last_host_pages;           /* map-host-remap-copies mutant: where the last map_host began */
  int manual;                    /* no worker thread (fake_debug_manual_worker) */
  struct fake_node *manual_cur;  /* the part fake_debug_work_begin runs */
  uint64_t serial;               /* which open made it: the bus's owner of a function */
};

static atomic_int manual_next; /* fake_debug_manual_worker */

static atomic_uint_fast64_t next_serial = 1;

/* stop-pools-word mutant: the last stopped device, whose word the next
 * open takes over (and resets); cleared when that device is destroyed. */
static struct fake_dev *_Atomic word_pool;

static atomic_uint_fast64_t next_handle = 1;

static uint64_t new_handle(void) { return atomic_fetch_add(&next_handle, 1); }

/* ------------------------------------------------------------ helpers */

static void dev_lock(struct fake_dev *d) {
  rig_hold();
  pthread_mutex_lock(&d->mu);
}

static void dev_unlock(struct fake_dev *d) {
  pthread_mutex_unlock(&d->mu);
  rig_give();
}

static int mutant(const struct fake_dev *d, int m) { return d->cfg.mutant == m; }

static struct timespec deadline_in(int64_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  if (ms < 0) ms = 0;
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

static int passed(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* Waits on the device's condvar until t; the caller loops on its own
 * condition. */
static void wait_until(struct fake_dev *d, const struct timespec *t) {
  pthread_cond_timedwait(&d->cv, &d->mu, t);
}

static uint64_t room_of(const struct fake_dev *d, int kind) {
  uint64_t b = d->cfg.budget[kind], u = d->used[kind];
  return u >= b ? 0 : b - u;
}

static void store_word(struct fake_dev *d, uint64_t v) {
  if (mutant(d, FAKE_M_WORD_RACE))
    *(volatile uint64_t *)&d->word = v; /* a plain store: a data race */
  else if (mutant(d, FAKE_M_WORD_HALVES)) {
    /* two 32-bit stores (x86-64 is little-endian: the low half first) */
    _Atomic uint32_t *half = (_Atomic uint32_t *)&d->word;
    atomic_store_explicit(&half[0], (uint32_t)v, memory_order_release);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 500000);
    atomic_store_explicit(&half[1], (uint32_t)(v >> 32), memory_order_release);
  } else
    atomic_store_explicit(&d->word, v, memory_order_release);
  pthread_cond_broadcast(&d->cv);
}

static void set_fault(struct fake_dev *d, const char *fmt, ...) {
  if (d->faulted) return; /* the first fault's reason is the one kept */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->reason, sizeof d->reason, fmt, ap);
  va_end(ap);
  d->faulted = 1;
  atomic_store(&d->dead, 1);
  pthread_cond_broadcast(&d->cv);
}

static struct fake_mem *mem_new(size_t n) {
  struct fake_mem *m = malloc(sizeof *m);
  if (!m) return NULL;
  m->bytes = calloc(1, n ? n : 1);
  if (!m->bytes) {
    free(m);
    return NULL;
  }
  atomic_init(&m->refs, 1);
  atomic_init(&m->revoked, 0);
  m->owned = 1;
  m->size = n;
  return m;
}

static struct fake_mem *mem_ref(struct fake_mem *m) {
  atomic_fetch_add(&m->refs, 1);
  return m;
}

static void mem_unref(struct fake_mem *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  if (m->owned) free(m->bytes);
  free(m);
}

static struct fake_region *region_new(struct fake_dev *d, struct fake_mem *m,
                                      size_t size, int kind) {
  struct fake_region *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->handle = new_handle();
  r->mem = m;
  r->size = size;
  r->kind = kind;
  r->dev = d;
  return r;
}

static void table_add(struct fake_dev *d, struct fake_region *r) {
  struct fake_region **b = &d->buckets[r->handle % FAKE_BUCKETS];
  r->next = *b;
  *b = r;
}

static void table_remove(struct fake_dev *d, struct fake_region *r) {
  for (struct fake_region **p = &d->buckets[r->handle % FAKE_BUCKETS]; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      return;
    }
}

static struct fake_region *table_find(struct fake_dev *d, uint64_t h) {
  for (struct fake_region *r = d->buckets[h % FAKE_BUCKETS]; r; r = r->next)
    if (r->handle == h) return r;
  return NULL;
}

static struct fake_fn *entry_find(struct fake_dev *d, uint64_t h) {
  for (struct fake_image *im = d->images; im; im = im->next)
    for (size_t i = 0; i < im->n; i++)
      if (im->fns[i].entry == h) return &im->fns[i];
  return NULL;
}

static struct fake_thread *thread_find(struct fake_dev *d) {
  pthread_t self = pthread_self();
  for (struct fake_thread *t = d->threads; t; t = t->next)
    if (pthread_equal(t->tid, self)) return t;
  return NULL;
}

static struct fake_thread *thread_get(struct fake_dev *d) {
  struct fake_thread *t = thread_find(d);
  if (t) return t;
  t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->tid = pthread_self();
  t->next = d->threads;
  d->threads = t;
  return t;
}

/* A chunk of n slots chained into a list, or NULL. */
static struct fake_node *chunk_new(struct fake_dev *d, uint32_t n) {
  if (n == 0) return NULL;
  struct fake_chunk *c = calloc(1, sizeof *c + (size_t)n * sizeof(struct fake_node));
  if (!c) return NULL;
  c->next = d->chunks;
  d->chunks = c;
  for (uint32_t i = 0; i + 1 < n; i++) c->nodes[i].next = &c->nodes[i + 1];
  return &c->nodes[0];
}

static void free_push(struct fake_dev *d, struct fake_node *n) {
  n->next = d->free_nodes;
  d->free_nodes = n;
  d->free_count++;
}

static void free_push_list(struct fake_dev *d, struct fake_node *n) {
  while (n) {
    struct fake_node *next = n->next;
    free_push(d, n);
    n = next;
  }
}

/* ------------------------------------------------------------ devices */

static void *worker_main(void *arg);

/* Every signal but those a fault raises (as rig_mask blocks them). */
static void blocked_set(sigset_t *set) {
  static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
  sigfillset(set);
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(set, faults[i]);
}

struct fake_dev *fake_dev_open(const struct fake_config *cfg) {
  struct fake_dev *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->cfg = *cfg;
  pthread_mutex_init(&d->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&d->word, 0);
  atomic_init(&d->refs, 2); /* the caller's and the worker's */
  atomic_init(&d->dead, 0);
  d->serial = atomic_fetch_add(&next_serial, 1);
  if (mutant(d, FAKE_M_STOP_POOLS_WORD)) {
    struct fake_dev *pooled = atomic_exchange(&word_pool, NULL);
    if (pooled) atomic_store_explicit(&pooled->word, 0, memory_order_release);
  }

  /* The initial queue is what the Device budget pays for, up to the slots
   * asked: a small budget leaves room to answer RIG_GROW. */
  uint64_t slots = cfg->queue_slots;
  if (slots > cfg->budget[FAKE_DEVICE] / FAKE_PART_BYTES)
    slots = cfg->budget[FAKE_DEVICE] / FAKE_PART_BYTES;
  struct fake_node *nodes = chunk_new(d, (uint32_t)slots);
  if (slots && !nodes) goto fail;
  free_push_list(d, nodes);
  d->queue_bytes = slots * FAKE_PART_BYTES;
  d->used[FAKE_DEVICE] = d->queue_bytes;

  d->word_region = region_new(d, NULL, sizeof(uint64_t), -1);
  if (!d->word_region) goto fail;
  d->word_region->is_word = 1;

  d->manual = atomic_load(&manual_next);
  if (d->manual) {
    atomic_store(&d->refs, 1); /* no worker, no worker's reference */
    return d;
  }

  /* The worker starts with signals blocked, leaving no window before it
   * blocks them itself. */
  sigset_t set, old;
  blocked_set(&set);
  if (mutant(d, FAKE_M_WORKER_UNMASKED)) sigemptyset(&set);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  pthread_t th;
  int rc = pthread_create(&th, NULL, worker_main, d);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) goto fail;
  pthread_detach(th);
  return d;

fail:
  atomic_store(&d->refs, 1);
  fake_dev_release(d);
  return NULL;
}

static void dev_destroy(struct fake_dev *d) {
  struct fake_dev *self = d;
  atomic_compare_exchange_strong(&word_pool, &self, NULL);
  for (int b = 0; b < FAKE_BUCKETS; b++)
    for (struct fake_region *r = d->buckets[b], *next; r; r = next) {
      next = r->next;
      mem_unref(r->mem);
      free(r);
    }
  free(d->word_region);
  for (struct fake_image *im = d->images, *next; im; im = next) {
    next = im->next;
    for (size_t i = 0; i < im->n; i++) free(im->fns[i].name);
    free(im->fns);
    free(im);
  }
  for (struct fake_chunk *c = d->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  for (struct fake_thread *t = d->threads, *next; t; t = next) {
    next = t->next;
    free(t);
  }
  mem_unref(d->last_mem);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

void fake_dev_release(struct fake_dev *d) {
  if (atomic_fetch_sub(&d->refs, 1) == 1) dev_destroy(d);
}

uint64_t fake_dev_word(struct fake_dev *d) {
  if (mutant(d, FAKE_M_WORD_RACE)) return *(volatile uint64_t *)&d->word; /* plain load */
  return atomic_load_explicit(&d->word, memory_order_acquire);
}

int fake_dev_dead(struct fake_dev *d) { return atomic_load(&d->dead); }

uint64_t fake_dev_last_value(struct fake_dev *d) { return __atomic_load_n(&d->last_value, __ATOMIC_RELAXED); }

uint64_t fake_dev_used(struct fake_dev *d, int kind) {
  dev_lock(d);
  uint64_t u = d->used[kind];
  dev_unlock(d);
  return u;
}

void fake_dev_charge(struct fake_dev *d, int kind, int64_t delta) {
  dev_lock(d);
  d->used[kind] += (uint64_t)delta;
  dev_unlock(d);
}

struct fake_region *fake_dev_word_region(struct fake_dev *d) { return d->word_region; }

/* ------------------------------------------------------------ regions */

static struct fake_mem *bus_recycled(size_t n);
static void bus_unpin(struct fake_mem *m);
static int bus_holds(struct fake_mem *m);

struct fake_region *fake_alloc(struct fake_dev *d, int kind, size_t n) {
  struct fake_region *r = NULL;
  dev_lock(d);
  struct fake_mem *m;
  if (n > 0 && n > room_of(d, kind) && kind == FAKE_DEVICE && d->aside && d->aside->size >= n) {
    /* The budget is spent: the memory set aside, still on the bus, is
     * taken back (MEM-11); it was never uncharged. */
    m = d->aside;
    d->aside = NULL;
    r = region_new(d, m, n, kind);
    if (!r) {
      mem_unref(m);
      goto out;
    }
    d->used[kind] += n;
    d->used[kind] -= d->aside_size;
    table_add(d, r);
    goto out;
  }
  if (n == 0 || n > room_of(d, kind)) goto out;
  d->allocs++;
  if (mutant(d, FAKE_M_ALLOC_OVERLAP) && d->allocs % 2 == 0 && d->last_mem &&
      d->last_mem->size >= n)
    m = mem_ref(d->last_mem);
  else if (mutant(d, FAKE_M_FREED_REUSED_TWICE) && d->reuses_left > 0 && d->last_mem &&
           d->last_mem->size >= n) {
    m = mem_ref(d->last_mem); /* the freed memory, handed out twice */
    d->reuses_left--;
  }
  else if (mutant(d, FAKE_M_FREE_UNPINS) && (m = bus_recycled(n)))
    ; /* memory a dma'd region gave back at its free, still on the bus */
  else
    m = mem_new(n);
  if (!m) goto out;
  r = region_new(d, m, n, kind);
  if (!r) {
    mem_unref(m);
    goto out;
  }
  if (kind >= 0 && d->used[kind] > d->cfg.budget[kind] / 2) r->high = 1;
  d->used[kind] += n;
  table_add(d, r);
  if (mutant(d, FAKE_M_ALLOC_OVERLAP)) {
    mem_unref(d->last_mem);
    d->last_mem = mem_ref(m);
  }
out:
  dev_unlock(d);
  return r;
}

/* [r] maps fresh zeroed memory from now on, as if unmapped (the
 * peer-map-shared mutant). */
static void region_detach(struct fake_region *r) {
  struct fake_mem *m = mem_new(r->size);
  if (!m) return;
  mem_unref(r->mem);
  r->mem = m;
}

struct fake_region *fake_map_peer(struct fake_dev *d, struct fake_region *r) {
  struct fake_mem *m;
  if (mutant(d, FAKE_M_MAP_PEER_COPY)) {
    m = mem_new(r->size);
    if (m) memcpy(m->bytes, r->mem->bytes, r->size);
  } else {
    m = mem_ref(r->mem);
  }
  if (!m) return NULL;
  struct fake_region *p = region_new(d, m, r->size, -1);
  if (!p) {
    mem_unref(m);
    return NULL;
  }
  if (mutant(d, FAKE_M_STOP_REVOKES_MAPS)) p->exporter = r->dev;
  dev_lock(d);
  table_add(d, p);
  if (mutant(d, FAKE_M_MAP_PEER_ONE_WINDOW)) {
    /* One peer window per device: the new mapping takes it, and the
     * previous mapping, not yet freed, keeps only a copy of what it saw. */
    struct fake_region *old = d->peer_window;
    if (old) {
      struct fake_mem *copy = mem_new(old->size);
      if (copy) {
        memcpy(copy->bytes, old->mem->bytes, old->size);
        mem_unref(old->mem);
        old->mem = copy;
      }
    }
    d->peer_window = p;
  }
  dev_unlock(d);
  return p;
}

struct fake_region *fake_map_host(struct fake_dev *d, void *p, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (n == 0 || (uintptr_t)p % page != 0) return NULL;
  size_t size = mutant(d, FAKE_M_MAP_HOST_EXACT) ? n : (n + page - 1) / page * page;
  struct fake_mem *m;
  dev_lock(d);
  int remap = mutant(d, FAKE_M_MAP_HOST_REMAP_COPIES) && d->last_host_pages == p;
  d->last_host_pages = p;
  dev_unlock(d);
  if (remap) {
    /* pages the last map_host mapped: taken as already pinned, and
     * mapped as a copy of them, which the host never sees */
    m = mem_new(size);
    if (!m) return NULL;
    memcpy(m->bytes, p, size);
  } else {
    m = malloc(sizeof *m);
    if (!m) return NULL;
    atomic_init(&m->refs, 1);
    atomic_init(&m->revoked, 0);
    m->owned = 0;
    m->size = size;
    m->bytes = p;
  }
  struct fake_region *r = region_new(d, m, size, -1);
  if (!r) {
    mem_unref(m);
    return NULL;
  }
  dev_lock(d);
  table_add(d, r);
  if (mutant(d, FAKE_M_MAP_HOST_ONE_WINDOW)) {
    /* One host window per device: the new mapping takes it, and the
     * previous one, not yet freed, is left with a copy of its pages. */
    struct fake_region *old = d->host_window;
    if (old) {
      struct fake_mem *copy = mem_new(old->size);
      if (copy) {
        memcpy(copy->bytes, old->mem->bytes, old->size);
        mem_unref(old->mem);
        old->mem = copy;
      }
    }
    d->host_window = r;
  }
  dev_unlock(d);
  return r;
}

void fake_free(struct fake_dev *d, struct fake_region *r) {
  dev_lock(d);
  if (r->is_word) {
    /* The word itself lives in the device, which lives while OCaml holds
     * it; only the region goes. */
    d->word_region = NULL;
    dev_unlock(d);
    free(r);
    return;
  }
  table_remove(d, r);
  if (mutant(d, FAKE_M_PEER_MAP_SHARED) && r->kind < 0) {
    /* One mapping per memory, shared with no count: its free unmaps the
     * device's other regions over the same memory (MEM-5). */
    for (int b = 0; b < FAKE_BUCKETS; b++)
      for (struct fake_region *q = d->buckets[b]; q; q = q->next)
        if (q->kind < 0 && q->mem == r->mem) region_detach(q);
  }
  if (d->peer_window == r) d->peer_window = NULL;
  if (d->host_window == r) d->host_window = NULL;
  if (r->kind >= 0 && !(mutant(d, FAKE_M_FREE_KEEPS_CHARGE) && r->kind == FAKE_DEVICE)) d->used[r->kind] -= r->size;
  if (mutant(d, FAKE_M_FREE_UNPINS)) bus_unpin(r->mem);
  if (mutant(d, FAKE_M_FREE_SETS_ASIDE) && r->kind == FAKE_DEVICE && bus_holds(r->mem)) {
    /* Kept aside, still charged, for an alloc the budget refuses. */
    if (d->aside) d->used[FAKE_DEVICE] -= d->aside_size;
    mem_unref(d->aside);
    d->aside = mem_ref(r->mem);
    d->aside_size = r->size;
    d->used[FAKE_DEVICE] += r->size;
  }
  if (mutant(d, FAKE_M_FREED_REUSED_TWICE) && r->kind == FAKE_DEVICE) {
    mem_unref(d->last_mem);
    d->last_mem = mem_ref(r->mem);
    d->reuses_left = 2;
  }
  dev_unlock(d);
  mem_unref(r->mem);
  free(r);
}

uint64_t fake_region_handle(const struct fake_region *r) { return r->handle; }
size_t fake_region_size(const struct fake_region *r) { return r->size; }

static int in_bounds(size_t size, size_t off, size_t len) {
  return off <= size && len <= size - off;
}

int fake_region_read(struct fake_region *r, size_t off, void *into, size_t len) {
  if (!in_bounds(r->size, off, len)) return -1;
  if (r->is_word) {
    uint64_t w = fake_dev_word(r->dev);
    memcpy(into, (unsigned char *)&w + off, len);
  } else {
    memcpy(into, r->mem->bytes + off, len);
  }
  return 0;
}

int fake_region_revoked(struct fake_region *r) {
  if (r->mem && atomic_load(&r->mem->revoked)) return 1; /* the word has no mem */
  struct fake_dev *e = r->exporter;
  if (!e) return 0;
  dev_lock(e);
  int stopped = e->stopping;
  dev_unlock(e);
  return stopped;
}

int fake_region_write(struct fake_region *r, size_t off, const void *from, size_t len) {
  if (!in_bounds(r->size, off, len) || r->is_word) return -1;
  memcpy(r->mem->bytes + off, from, len);
  return 0;
}

/* ---------------------------------------------------------------- bus */

/* An open window: fn's bus addresses [base, base + size) reach mem. */
struct fake_window {
  struct fake_window *next;
  char fn[16];
  uint64_t base, size;
  uint64_t handle; /* the region dma answered it for */
  struct fake_mem *mem;
};

/* Which open keeps a function; serial 0: none (stop-releases-fn mutant). */
struct fake_owner {
  struct fake_owner *next;
  char fn[16];
  uint64_t serial;
};

/* The bus lock is taken after a device's lock, never before one. */
static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_window *windows;
static struct fake_owner *owners;
static uint64_t bus_next = 0x80000000ull;
static struct fake_mem *recycled; /* free-unpins mutant */

static void bus_lock(void) {
  rig_hold();
  pthread_mutex_lock(&bus_mu);
}

static void bus_unlock(void) {
  pthread_mutex_unlock(&bus_mu);
  rig_give();
}

static struct fake_owner *owner_of(const char *fn) {
  for (struct fake_owner *o = owners; o; o = o->next)
    if (strcmp(o->fn, fn) == 0) return o;
  return NULL;
}

int fake_bus_dma(struct fake_dev *d, struct fake_region *r, const char *fn, uint64_t *addr) {
  if (strlen(fn) >= sizeof ((struct fake_window *)0)->fn) return FAKE_BUS_NOMEM;
  struct fake_mem *m;
  dev_lock(d);
  if ((mutant(d, FAKE_M_DMA_MOVES) || (mutant(d, FAKE_M_DMA_MOVES_HIGH) && r->high)) && (m = mem_new(r->mem->size))) {
    /* Moved where fn reaches it: r now lies elsewhere, and what mapped its
     * old memory (map_peer) no longer maps r. */
    memcpy(m->bytes, r->mem->bytes, r->mem->size);
    mem_unref(r->mem);
    r->mem = m;
  }
  if (mutant(d, FAKE_M_DMA_STALE)) {
    m = mem_new(r->size);
    if (m) memcpy(m->bytes, r->mem->bytes, r->size);
  } else {
    m = mem_ref(r->mem);
  }
  uint64_t handle = r->handle, size = r->size;
  dev_unlock(d);
  if (!m) return FAKE_BUS_NOMEM;

  int rc = 0;
  bus_lock();
  struct fake_owner *o = owner_of(fn);
  if (o && o->serial && o->serial != d->serial) {
    rc = FAKE_BUS_KEPT;
    goto out;
  }
  if (!o) {
    o = calloc(1, sizeof *o);
    if (!o) {
      rc = FAKE_BUS_NOMEM;
      goto out;
    }
    strcpy(o->fn, fn);
    o->next = owners;
    owners = o;
  }
  o->serial = d->serial;
  for (struct fake_window *w = windows; w; w = w->next)
    if (w->handle == handle && strcmp(w->fn, fn) == 0) {
      *addr = w->base;
      goto out;
    }
  struct fake_window *w = calloc(1, sizeof *w);
  if (!w) {
    rc = FAKE_BUS_NOMEM;
    goto out;
  }
  strcpy(w->fn, fn);
  w->base = bus_next;
  w->size = size;
  w->handle = handle;
  w->mem = m;
  m = NULL; /* the window's reference, for good */
  /* Rounded to pages, with a page between windows. */
  bus_next += (size + 4095) / 4096 * 4096 + 4096;
  w->next = windows;
  windows = w;
  *addr = w->base;
out:
  bus_unlock();
  mem_unref(m);
  return rc;
}

/* The window of fn that holds [addr, addr + len), with the bus lock held. */
static struct fake_window *window_at(const char *fn, uint64_t addr, size_t len) {
  for (struct fake_window *w = windows; w; w = w->next)
    if (strcmp(w->fn, fn) == 0 && addr >= w->base && addr - w->base <= w->size &&
        len <= w->size - (addr - w->base))
      return w;
  return NULL;
}

int fake_bus_read(const char *fn, uint64_t addr, void *into, size_t len) {
  bus_lock();
  struct fake_window *w = window_at(fn, addr, len);
  if (w) memcpy(into, w->mem->bytes + (addr - w->base), len);
  bus_unlock();
  return w ? 0 : -1;
}

int fake_bus_write(const char *fn, uint64_t addr, const void *from, size_t len) {
  bus_lock();
  struct fake_window *w = window_at(fn, addr, len);
  if (w) memcpy(w->mem->bytes + (addr - w->base), from, len);
  bus_unlock();
  return w ? 0 : -1;
}

/* free-unpins mutant: m, freed, goes back to the allocator if a window
 * holds it (called with the device's lock held). */
static void bus_unpin(struct fake_mem *m) {
  bus_lock();
  for (struct fake_window *w = windows; w; w = w->next)
    if (w->mem == m) {
      mem_unref(recycled);
      recycled = mem_ref(m);
      break;
    }
  bus_unlock();
}

/* Whether a window of the bus holds m (called with the device's lock held). */
static int bus_holds(struct fake_mem *m) {
  int held = 0;
  bus_lock();
  for (struct fake_window *w = windows; w; w = w->next)
    if (w->mem == m) held = 1;
  bus_unlock();
  return held;
}

/* free-unpins mutant: the memory bus_unpin gave back, if it holds n bytes. */
static struct fake_mem *bus_recycled(size_t n) {
  struct fake_mem *m = NULL;
  bus_lock();
  if (recycled && recycled->size >= n) {
    m = recycled;
    recycled = NULL;
  }
  bus_unlock();
  return m;
}

/* stop-releases-fn mutant: the functions d keeps go back at its stop. */
static void bus_release(struct fake_dev *d) {
  bus_lock();
  for (struct fake_owner *o = owners; o; o = o->next)
    if (o->serial == d->serial) o->serial = 0;
  bus_unlock();
}

/* ------------------------------------------------------------- images */

struct fake_image *fake_image_load(struct fake_dev *d, size_t n,
                                   const char *const *names,
                                   const uint64_t *scratch, const int *ops) {
  struct fake_image *im = calloc(1, sizeof *im);
  if (!im) return NULL;
  im->dev = d;
  im->n = n;
  im->fns = calloc(n ? n : 1, sizeof *im->fns);
  if (!im->fns) goto fail;
  for (size_t i = 0; i < n; i++) {
    im->fns[i].name = strdup(names[i]);
    if (!im->fns[i].name) goto fail;
    im->fns[i].scratch = scratch[i];
    im->fns[i].op = ops[i];
  }
  dev_lock(d);
  im->next = d->images;
  d->images = im;
  dev_unlock(d);
  return im;
fail:
  if (im->fns)
    for (size_t i = 0; i < n; i++) free(im->fns[i].name);
  free(im->fns);
  free(im);
  return NULL;
}

/* The entry-keeps-scratch mutant's table, which its functions need
 * besides their scratch. */
#define FAKE_ENTRY_TABLE_BYTES 256

/* Called with the lock held. */
static int64_t make_entry(struct fake_dev *d, struct fake_fn *f) {
  if (f->entry && !mutant(d, FAKE_M_ENTRY_REMAKES)) return (int64_t)f->entry;
  uint64_t offered = d->cfg.budget[FAKE_DEVICE];
  if (mutant(d, FAKE_M_ENTRY_TOO_BIG_TWICE)) offered *= 2;
  if (f->scratch > offered && !mutant(d, FAKE_M_ENTRY_TOO_BIG_NO_MEMORY))
    return FAKE_ENTRY_TOO_BIG;
  uint64_t room = room_of(d, FAKE_DEVICE);
  if (mutant(d, FAKE_M_ENTRY_KEEPS_SCRATCH) && f->scratch <= room && room - f->scratch < FAKE_ENTRY_TABLE_BYTES) {
    /* the scratch taken first, then the function's table refused: No_memory,
     * rightly, but with the scratch kept (only at the edge, where the
     * scratch fits and the table does not) */
    d->used[FAKE_DEVICE] += f->scratch;
    return FAKE_ENTRY_NO_MEMORY;
  }
  if (f->scratch > room || (f->scratch == room && mutant(d, FAKE_M_ENTRY_FULL_NO_MEMORY))) {
    if (mutant(d, FAKE_M_ENTRY_LEAKS)) d->used[FAKE_DEVICE] += room;
    return FAKE_ENTRY_NO_MEMORY;
  }
  if (mutant(d, FAKE_M_SCRATCH_AT_LAUNCH)) {
    /* the room checked (CODE-3), the scratch made at the first launch */
    f->deferred = 1;
    f->entry = new_handle();
    return (int64_t)f->entry;
  }
  d->used[FAKE_DEVICE] += f->scratch;
  f->charged += f->scratch;
  f->entry = new_handle();
  return (int64_t)f->entry;
}

int64_t fake_entry(struct fake_image *im, size_t i) {
  struct fake_dev *d = im->dev;
  dev_lock(d);
  int64_t e = make_entry(d, &im->fns[i]);
  im->fns[i].by_prepare = 0;
  dev_unlock(d);
  return e;
}

void fake_prepare(struct fake_image *im, size_t i) {
  struct fake_dev *d = im->dev;
  struct fake_fn *f = &im->fns[i];
  dev_lock(d);
  if (!f->entry && mutant(d, FAKE_M_PREPARE_FLUSHES_ENTRIES))
    /* a one-slot compile cache: making f's entry drops the others' (their
     * scratch given back), so that their next entry makes a new handle */
    for (size_t j = 0; j < im->n; j++)
      if (j != i && im->fns[j].entry) {
        im->fns[j].entry = 0;
        d->used[FAKE_DEVICE] -= im->fns[j].charged;
        im->fns[j].charged = 0;
      }
  if (!f->entry) {
    (void)make_entry(d, f); /* synchronous: the next entry finds it made */
    f->by_prepare = f->entry != 0;
  } else if (mutant(d, FAKE_M_PREPARE_RESTARTS_PREPARED) && f->by_prepare && f->scratch <= room_of(d, FAKE_DEVICE))
    /* its "started" check looks at the entries entry asked for only */
    d->used[FAKE_DEVICE] += f->scratch; /* made again, and leaked */
  else if (mutant(d, FAKE_M_PREPARE_RESTARTS) && f->scratch <= room_of(d, FAKE_DEVICE))
    d->used[FAKE_DEVICE] += f->scratch; /* made again, and leaked */
  else if (mutant(d, FAKE_M_PREPARE_RESTARTS_AFTER_UNLOAD) && d->unloaded && f->scratch <= room_of(d, FAKE_DEVICE)) {
    d->used[FAKE_DEVICE] += f->scratch; /* its cache flushed by the unload: made again, and leaked */
    d->unloaded = 0;
  }
  dev_unlock(d);
}

void fake_evict_prepared(struct fake_image *im, size_t i, int keep_memory, int only_if_short) {
  struct fake_dev *d = im->dev;
  dev_lock(d);
  if (only_if_short && (im->fns[i].entry || im->fns[i].scratch <= room_of(d, FAKE_DEVICE))) {
    dev_unlock(d);
    return;
  }
  for (size_t j = 0; j < im->n; j++)
    if (j != i && im->fns[j].entry && im->fns[j].by_prepare) {
      im->fns[j].entry = 0;
      im->fns[j].by_prepare = 0;
      if (!keep_memory) {
        d->used[FAKE_DEVICE] -= im->fns[j].charged;
        im->fns[j].charged = 0;
      }
    }
  dev_unlock(d);
}

int fake_has_entry(struct fake_image *im, size_t i) {
  dev_lock(im->dev);
  int made = im->fns[i].entry != 0;
  dev_unlock(im->dev);
  return made;
}

uint64_t fake_image_scratch(const struct fake_image *im, size_t i) { return im->fns[i].scratch; }

void fake_unload(struct fake_image *im) {
  struct fake_dev *d = im->dev;
  dev_lock(d);
  for (struct fake_image **p = &d->images; *p; p = &(*p)->next)
    if (*p == im) {
      *p = im->next;
      break;
    }
  for (size_t i = 0; i < im->n; i++) d->used[FAKE_DEVICE] -= im->fns[i].charged;
  d->unloaded = 1;
  dev_unlock(d);
  for (size_t i = 0; i < im->n; i++) free(im->fns[i].name);
  free(im->fns);
  free(im);
}

/* ------------------------------------------------------------- the work */

/* Whether the running part should give up: stop aborts it, except under
 * stop-early-value and stop-value-mid-part, whose parts run to their end,
 * and late-word-write, whose spins do (its large Fills are cut short, and
 * their last value waits for that: a late word, not an early one). */
static int abort_part(const struct fake_dev *d) {
  if (!d->stopping || mutant(d, FAKE_M_STOP_EARLY_VALUE) || mutant(d, FAKE_M_STOP_VALUE_MID_PART)) return 0;
  return d->running_fill || !mutant(d, FAKE_M_LATE_WORD_WRITE);
}

/* A Fill larger than this runs in chunks of it, the lock given back around
 * each, so that stop can come while it runs and cut it short (STOP-2, and
 * STOP-3: the last value only once it runs no more).  Small enough that
 * probe.STOP-3.fill-running's first Fill (8 MiB) has several. */
#define FAKE_FILL_CHUNK ((uint64_t)1 << 20)

static void do_fill(struct fake_dev *d, uint64_t h, uint64_t off, uint64_t len, uint64_t byte) {
  struct fake_region *r = table_find(d, h);
  if (!r)
    set_fault(d, "fill of unknown region 0x%llx", (unsigned long long)h);
  else if (!in_bounds(r->size, off, len))
    set_fault(d, "fill out of bounds: %llu bytes at %llu of a %zu-byte region",
              (unsigned long long)len, (unsigned long long)off, r->size);
  else if (len <= FAKE_FILL_CHUNK)
    memset(r->mem->bytes + off, (int)(byte & 0xff), len);
  else {
    /* the memory, not the region, is held: a free meanwhile (rig's error,
     * MEM-3) then leaks nothing and touches no freed byte */
    struct fake_mem *m = mem_ref(r->mem);
    d->running_fill = 1;
    for (uint64_t done = 0; done < len && !abort_part(d);) {
      uint64_t n = len - done < FAKE_FILL_CHUNK ? len - done : FAKE_FILL_CHUNK;
      dev_unlock(d);
      memset(m->bytes + off + done, (int)(byte & 0xff), n);
      dev_lock(d);
      done += n;
    }
    d->running_fill = abort_part(d); /* cut short: the worker's abort_part must say so too */
    mem_unref(m);
  }
}

static void do_copy(struct fake_dev *d, const uint64_t *a) {
  struct fake_region *s = table_find(d, a[0]), *t = table_find(d, a[2]);
  if (!s || !t)
    set_fault(d, "copy with unknown region 0x%llx", (unsigned long long)(s ? a[2] : a[0]));
  else if (!in_bounds(s->size, a[1], a[4]) || !in_bounds(t->size, a[3], a[4]))
    set_fault(d, "copy out of bounds");
  else
    memmove(t->mem->bytes + a[3], s->mem->bytes + a[1], a[4]);
}

static void do_launch(struct fake_dev *d, const uint64_t *a) {
  struct fake_fn *f = entry_find(d, a[0]);
  if (!f) {
    set_fault(d, "launch of unknown entry 0x%llx", (unsigned long long)a[0]);
    return;
  }
  struct timespec t;
  switch (f->op) {
  case FAKE_NOP:
    break;
  case FAKE_SPIN:
    t = deadline_in((int64_t)(a[1] > INT32_MAX ? INT32_MAX : a[1]));
    while (!passed(&t) && !abort_part(d)) wait_until(d, &t);
    break;
  case FAKE_FAULT:
    set_fault(d, "fault function %s", f->name);
    break;
  case FAKE_HANG:
    /* Hangs end only at stop, whatever the mutant, so threads end. */
    while (!d->stopping) pthread_cond_wait(&d->cv, &d->mu);
    break;
  case FAKE_FILL:
    do_fill(d, a[1], a[2], a[3], a[4]);
    break;
  case FAKE_REFUSE: /* never queued: submit refuses it */
    set_fault(d, "launch of refused function %s", f->name);
    break;
  }
}

/* Runs one part with the lock held; spins and hangs wait on the condvar,
 * so the lock is free while they run. */
static void exec_part(struct fake_dev *d, const struct fake_node *n) {
  if (n->empty) return;
  const struct rig_part *p = &n->part;
  switch (p->op) {
  case RIG_OP_FILL:
    do_fill(d, p->a[0], p->a[1], p->a[2], p->a[3]);
    break;
  case RIG_OP_COPY:
    do_copy(d, p->a);
    break;
  case RIG_OP_LAUNCH:
    do_launch(d, p->a);
    break;
  default:
    set_fault(d, "unknown op %u", p->op);
  }
}

static void block_signals(void) {
  sigset_t set;
  blocked_set(&set);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *worker_main(void *arg) {
  struct fake_dev *d = arg;
  if (mutant(d, FAKE_M_WORKER_UNMASKED)) {
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
  } else {
    block_signals(); /* SIG-8: signals run their handlers on the program's threads */
  }
  dev_lock(d);
  for (;;) {
    /* A faulted device runs nothing more: the word stops moving. */
    while (!d->stopping && (d->faulted || !d->run_head)) pthread_cond_wait(&d->cv, &d->mu);
    /* stop-early-value: the queue drains after stop wrote the last value. */
    if (d->stopping && !(mutant(d, FAKE_M_STOP_EARLY_VALUE) && d->run_head && !d->faulted)) break;
    struct fake_node *n = d->run_head;
    d->run_head = n->next;
    if (!d->run_head) d->run_tail = NULL;
    d->running = 1;
    exec_part(d, n);
    int done = !d->faulted && !abort_part(d);
    if (done && n->ends &&
        !(d->stopping && (mutant(d, FAKE_M_STOP_EARLY_VALUE) || mutant(d, FAKE_M_STOP_VALUE_MID_PART))))
      store_word(d, n->value);
    free_push(d, n);
    d->running = 0;
    d->running_fill = 0;
    pthread_cond_broadcast(&d->cv);
  }
  /* stop found this worker running: the last value is ours to write, now
   * that no work runs (STOP-3). */
  free_push_list(d, d->run_head);
  d->run_head = d->run_tail = NULL;
  if (d->worker_writes_last) store_word(d, d->last_value);
  dev_unlock(d);
  fake_dev_release(d);
  return NULL;
}

/* --------------------------------------------------------------- queues */

struct fake_injection {
  atomic_long left; /* fires when a call takes it from 1 to 0 */
  atomic_int mode;
  char why[200];
};

static struct fake_injection injections[3];

void fake_inject(int fn, long nth, int mode, const char *why) {
  struct fake_injection *inj = &injections[fn];
  atomic_store(&inj->left, 0); /* disarm while why changes */
  snprintf(inj->why, sizeof inj->why, "%s", why ? why : "");
  atomic_store(&inj->mode, mode);
  atomic_store(&inj->left, mode == FAKE_INJ_NONE ? 0 : nth);
}

/* Whether this call fails by injection; a FAULT also faults d. Lock held. */
static int injected(struct fake_dev *d, int fn) {
  struct fake_injection *inj = &injections[fn];
  if (atomic_fetch_sub(&inj->left, 1) != 1) return 0;
  if (atomic_load(&inj->mode) == FAKE_INJ_FAULT) set_fault(d, "%s", inj->why);
  return 1;
}

static uint32_t slots_of(const struct rig_submission *s) {
  return s->n_parts ? s->n_parts : 1; /* an empty submission still writes its value */
}

/* The room-growers-in-order mutant: a thread that asked for growth before
 * [t] and whose growth is not all made (its grow answered Short). */
static int older_grower_waits(struct fake_dev *d, struct fake_thread *t) {
  for (struct fake_thread *q = d->threads; q; q = q->next)
    if (q != t && q->ticket && q->ticket < t->ticket && q->missing > q->growth_n) return 1;
  return 0;
}

static int q_room(void *dev, const struct rig_submission *s) {
  struct fake_dev *d = dev;
  uint32_t n = slots_of(s);
  int answer = RIG_GROW;
  dev_lock(d);
  if (d->stopping) {
    answer = RIG_ROOM; /* submit then fails: the device is gone */
    goto out;
  }
  struct fake_thread *t = thread_get(d);
  if (!t) goto out;
  /* Growers served in the order they asked: one grown waits behind an
   * older one still short (QUEUE-2). */
  if (mutant(d, FAKE_M_ROOM_GROWERS_IN_ORDER) && t->ticket && older_grower_waits(d, t)) goto out;
  /* A reservation or hold is for this thread's next submit only. */
  d->reserved_total -= t->held + t->reserved;
  t->held = t->reserved = 0;
  if (t->growth_n) {
    struct fake_node *g = t->growth;
    while (g) {
      struct fake_node *next = g->next;
      free_push(d, g);
      g = next;
    }
    t->growth = NULL;
    t->growth_n = 0;
  }
  uint32_t avail = d->free_count - d->reserved_total;
  if (injected(d, FAKE_INJ_ROOM)) {
    /* RIG_GROW with nothing held or missing: the grow that follows has
     * nothing to make and answers Grown. */
    t->missing = 0;
    goto out;
  }
  if (avail >= n) {
    t->reserved = n;
    d->reserved_total += n;
    t->missing = 0;
    t->ticket = 0;
    answer = RIG_ROOM;
  } else {
    if (!t->ticket) t->ticket = ++d->tickets;
    /* Hold what there is, so that a growth of just the missing slots is
     * enough at the next room whatever other threads take (QUEUE-2). */
    if (!mutant(d, FAKE_M_ROOM_NO_HOLD)) {
      t->held = avail;
      d->reserved_total += avail;
    }
    t->missing = n - avail;
  }
out:
  dev_unlock(d);
  return answer;
}

/* The submit-awaits-sleep mutant: as if sleep kept a lock of the queue
   across its wait, which submit and commit take. */
static void await_sleeps(struct fake_dev *d) {
  if (!mutant(d, FAKE_M_SUBMIT_AWAITS_SLEEP)) return;
  struct timespec cap = deadline_in(FAKE_CAP_MS);
  while (d->sleeping && !d->stopping && !passed(&cap)) wait_until(d, &cap);
}

/* Whether s launches a function the device refuses to run. */
static int launches_refused(struct fake_dev *d, const struct rig_submission *s) {
  for (uint32_t i = 0; i < s->n_parts; i++) {
    if (s->parts[i].op != RIG_OP_LAUNCH) continue;
    struct fake_fn *f = entry_find(d, s->parts[i].a[0]);
    if (f && f->op == FAKE_REFUSE) return 1;
  }
  return 0;
}

/* scratch-at-launch mutant: the first launch of an entry makes its
 * scratch; with no room for it the submit fails (CODE-2). */
static int scratch_refused(struct fake_dev *d, const struct rig_submission *s) {
  for (uint32_t i = 0; i < s->n_parts; i++) {
    if (s->parts[i].op != RIG_OP_LAUNCH) continue;
    struct fake_fn *f = entry_find(d, s->parts[i].a[0]);
    if (!f || !f->deferred) continue;
    if (f->scratch > room_of(d, FAKE_DEVICE)) return 1;
    d->used[FAKE_DEVICE] += f->scratch;
    f->charged += f->scratch;
    f->deferred = 0;
  }
  return 0;
}

static int q_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct fake_dev *d = dev;
  uint32_t n = slots_of(s);
  int rc = -1;
  dev_lock(d);
  await_sleeps(d);
  if (d->stopping) goto out;
  if (!mutant(d, FAKE_M_FAILED_SUBMIT_FORGOTTEN)) d->last_value = value; /* also when this submit fails (STOP-3) */
  if (injected(d, FAKE_INJ_SUBMIT) || launches_refused(d, s) || scratch_refused(d, s)) goto out;
  struct fake_thread *t = thread_find(d);
  if (!t || t->reserved < n || d->free_count < n) goto out;
  t->reserved -= n;
  d->reserved_total -= n;
  for (uint32_t i = 0; i < n; i++) {
    struct fake_node *node = d->free_nodes;
    d->free_nodes = node->next;
    d->free_count--;
    node->next = NULL;
    node->empty = s->n_parts == 0;
    if (!node->empty) node->part = s->parts[i];
    node->ends = i + 1 == n;
    node->value = value;
    if (t->enc_tail)
      t->enc_tail->next = node;
    else
      t->enc_head = node;
    t->enc_tail = node;
  }
  if (mutant(d, FAKE_M_FAILED_SUBMIT_FORGOTTEN)) d->last_value = value;
  rc = 0;
out:
  dev_unlock(d);
  return rc;
}

static int q_commit(void *dev) {
  struct fake_dev *d = dev;
  int rc = -1;
  dev_lock(d);
  await_sleeps(d);
  if (d->stopping || injected(d, FAKE_INJ_COMMIT)) goto out;
  d->committing++;
  struct fake_thread *t = thread_find(d);
  if (t && t->enc_head) {
    if (d->run_tail)
      d->run_tail->next = t->enc_head;
    else
      d->run_head = t->enc_head;
    d->run_tail = t->enc_tail;
    t->enc_head = t->enc_tail = NULL;
    pthread_cond_broadcast(&d->cv);
  }
  rc = 0;
  if (d->commit_hold_ms > 0) {
    struct timespec until = deadline_in(d->commit_hold_ms);
    while (!d->stopping && !passed(&until)) wait_until(d, &until);
  }
  d->committing--;
  pthread_cond_broadcast(&d->cv);
out:
  dev_unlock(d);
  return rc;
}

void fake_set_commit_hold(struct fake_dev *d, int64_t ms) {
  dev_lock(d);
  d->commit_hold_ms = ms;
  dev_unlock(d);
}

const struct rig_queue_fns fake_queue_fns = {q_room, q_submit, q_commit};

uint64_t fake_grow(struct fake_dev *d) {
  uint64_t short_bytes = 0;
  dev_lock(d);
  struct fake_thread *t = thread_get(d);
  if (!t) {
    short_bytes = FAKE_PART_BYTES;
    goto out;
  }
  if (t->missing <= t->growth_n) goto out;
  if (mutant(d, FAKE_M_GROW_UNUSED)) goto out; /* Grown, having made nothing */
  uint32_t need = t->missing - t->growth_n;
  uint64_t fit = room_of(d, FAKE_DEVICE) / FAKE_PART_BYTES;
  uint32_t k = fit < need ? (uint32_t)fit : need;
  if (mutant(d, FAKE_M_GROW_PUBLISHES_REST) && k == need) {
    /* Whole chunks of 16 slots; the rest goes where every room looks
     * (QUEUE-1), the thread keeps what it needs. */
    uint32_t whole = (need + 15) / 16 * 16;
    struct fake_node *rest = whole > need && whole <= fit ? chunk_new(d, whole - need) : NULL;
    if (rest) {
      free_push_list(d, rest);
      d->used[FAKE_DEVICE] += (uint64_t)(whole - need) * FAKE_PART_BYTES;
      d->queue_bytes += (uint64_t)(whole - need) * FAKE_PART_BYTES;
    }
  }
  struct fake_node *g = chunk_new(d, k);
  if (k && !g) k = 0;
  if (k < need && mutant(d, FAKE_M_GROW_SHORT_DROPS)) {
    /* Short, and what it made is charged but lost (it stays on d->chunks,
     * unused), so the next grow needs the whole growth again. */
    d->used[FAKE_DEVICE] += (uint64_t)k * FAKE_PART_BYTES;
    short_bytes = (uint64_t)(need - k) * FAKE_PART_BYTES;
    goto out;
  }
  if (k && mutant(d, FAKE_M_GROW_WRITES_QUEUE)) {
    /* The slots go straight into the pool every room reads (QUEUE-1). */
    free_push_list(d, g);
    t->growth_n += k;
    d->used[FAKE_DEVICE] += (uint64_t)k * FAKE_PART_BYTES;
    d->queue_bytes += (uint64_t)k * FAKE_PART_BYTES;
  } else if (k) {
    /* Partial growths stay for the next room (QUEUE-3). */
    struct fake_node *last = g;
    while (last->next) last = last->next;
    last->next = t->growth;
    t->growth = g;
    t->growth_n += k;
    d->used[FAKE_DEVICE] += (uint64_t)k * FAKE_PART_BYTES;
    d->queue_bytes += (uint64_t)k * FAKE_PART_BYTES;
  }
  if (k < need) short_bytes = (uint64_t)(need - k) * FAKE_PART_BYTES;
out:
  dev_unlock(d);
  return short_bytes;
}

/* ------------------------------------------------------------ timeline */

int fake_sleep(struct fake_dev *d, uint64_t seen, int64_t still_ms) {
  int faulted = 0;
  if (mutant(d, FAKE_M_SLEEP_OVERSTAYS)) still_ms = FAKE_CAP_MS;
  struct timespec t = deadline_in(still_ms);
  dev_lock(d);
  d->sleeping++;
  if (mutant(d, FAKE_M_SLEEP_AWAITS_COMMIT)) {
    /* As if sleep and commit shared a lock commit keeps while it runs. */
    struct timespec cap = deadline_in(FAKE_CAP_MS);
    while (d->committing && !d->stopping && !passed(&cap)) wait_until(d, &cap);
  }
  if (mutant(d, FAKE_M_SLEEP_SETTLES)) {
    /* Lets completions settle before it looks at the word. */
    struct timespec settle = deadline_in(still_ms < 50 ? still_ms : 50);
    while (!d->stopping && !passed(&settle)) wait_until(d, &settle);
  }
  int again = mutant(d, FAKE_M_SLEEP_WAITS_TWICE);
  for (;;) {
    if (mutant(d, FAKE_M_SLEEP_WORD_FIRST) && fake_dev_word(d) != seen) break;
    if (d->faulted && !(mutant(d, FAKE_M_SLEEP_CONSUMES_FAULT) && d->fault_reported)) {
      d->fault_reported = 1;
      faulted = 1;
      break;
    }
    int moved = fake_dev_word(d) != seen;
    if (moved && !mutant(d, FAKE_M_SLEEP_NO_EARLY_RETURN)) break;
    if (passed(&t) && again) {
      /* Nothing came in still_ms: tries once more. */
      again = 0;
      t = deadline_in(still_ms);
    }
    if (passed(&t) || d->stopping) break;
    wait_until(d, &t);
  }
  d->sleeping--;
  pthread_cond_broadcast(&d->cv);
  dev_unlock(d);
  return faulted;
}

void fake_fault_reason(struct fake_dev *d, char *buf, size_t len) {
  dev_lock(d);
  snprintf(buf, len, "%s", d->reason);
  dev_unlock(d);
}

/* Drops a thread's encoded work, reservation, hold and growth (STOP-4). */
static void drop_thread(struct fake_dev *d, struct fake_thread *t) {
  if (mutant(d, FAKE_M_STOP_RUNS_ENCODED))
    for (struct fake_node *n = t->enc_head; n; n = n->next) exec_part(d, n);
  free_push_list(d, t->enc_head);
  t->enc_head = t->enc_tail = NULL;
  d->reserved_total -= t->reserved + t->held;
  t->reserved = t->held = t->missing = 0;
  /* The growth's slots stay in their chunk until the device goes. */
  d->used[FAKE_DEVICE] -= (uint64_t)t->growth_n * FAKE_PART_BYTES;
  d->queue_bytes -= (uint64_t)t->growth_n * FAKE_PART_BYTES;
  t->growth = NULL;
  t->growth_n = 0;
}

void fake_stop(struct fake_dev *d) {
  dev_lock(d);
  if (d->stopping) goto out;
  if (mutant(d, FAKE_M_STOP_WAITS) || mutant(d, FAKE_M_STOP_DRAINS_BRIEFLY)) {
    /* A drain bounded under the 2 s a hanging work's stop is allowed:
     * seen only as a stop that tracks the work's length. */
    struct timespec t = deadline_in(mutant(d, FAKE_M_STOP_WAITS) ? FAKE_CAP_MS : 1000);
    while ((d->running || d->run_head) && !d->faulted && !passed(&t)) wait_until(d, &t);
  }
  d->stopping = 1;
  atomic_store(&d->dead, 1);
  if (mutant(d, FAKE_M_STOP_POOLS_WORD)) atomic_store(&word_pool, d);
  if (mutant(d, FAKE_M_STOP_RELEASES_FN)) bus_release(d);
  for (struct fake_thread *t = d->threads; t; t = t->next) drop_thread(d, t);
  if (!mutant(d, FAKE_M_STOP_EARLY_VALUE)) {
    free_push_list(d, d->run_head);
    d->run_head = d->run_tail = NULL;
  }
  /* The queues go (STOP-5); their slots are freed with the device, as
   * the worker may still hold one. */
  d->used[FAKE_DEVICE] -= d->queue_bytes;
  d->queue_bytes = 0;
  if (mutant(d, FAKE_M_STOP_REVOKES_IMPORTS))
    /* The memory under each peer mapping it made, revoked for the region
     * it maps too (STOP-5): its own device's reach of it faults. */
    for (int b = 0; b < FAKE_BUCKETS; b++)
      for (struct fake_region *r = d->buckets[b]; r; r = r->next)
        if (r->kind == -1 && r->mem && r->mem->owned) atomic_store(&r->mem->revoked, 1);
  if (mutant(d, FAKE_M_STOP_FREES_REGIONS))
    /* Releases what rig made (STOP-5): rig's later free of each region
     * then uses it after this free. */
    for (int b = 0; b < FAKE_BUCKETS; b++)
      for (struct fake_region *r = d->buckets[b], *next; r; r = next) {
        next = r->next;
        mem_unref(r->mem);
        free(r);
        d->buckets[b] = NULL;
      }
  if (mutant(d, FAKE_M_STOP_EARLY_VALUE) || mutant(d, FAKE_M_STOP_VALUE_MID_PART))
    store_word(d, d->last_value); /* while the work still runs */
  else if (d->running && (d->running_fill || !mutant(d, FAKE_M_LATE_WORD_WRITE)))
    d->worker_writes_last = 1;
  else if (d->running || !mutant(d, FAKE_M_STOP_NO_LAST_VALUE))
    store_word(d, d->last_value);
  pthread_cond_broadcast(&d->cv);
out:
  dev_unlock(d);
}

/* ------------------------------------- testing hooks (fuzz/, C only) */

void fake_debug_manual_worker(int on) { atomic_store(&manual_next, on != 0); }

/* worker_main's loop body, cut in two at the point where the part has run;
 * keep the two in step. */
int fake_debug_work_begin(struct fake_dev *d) {
  int ran = 0;
  dev_lock(d);
  if (!d->manual || d->manual_cur || d->stopping || d->faulted || !d->run_head) goto out;
  struct fake_node *n = d->run_head;
  d->run_head = n->next;
  if (!d->run_head) d->run_tail = NULL;
  d->running = 1;
  d->manual_cur = n;
  exec_part(d, n);
  ran = 1;
out:
  dev_unlock(d);
  return ran;
}

void fake_debug_work_end(struct fake_dev *d) {
  dev_lock(d);
  struct fake_node *n = d->manual_cur;
  if (!n) goto out;
  int done = !d->faulted && !abort_part(d);
  if (done && n->ends) store_word(d, n->value);
  free_push(d, n);
  d->running = 0;
  d->running_fill = 0;
  d->manual_cur = NULL;
  if (d->stopping) {
    /* As the worker does on its way out (STOP-3). */
    free_push_list(d, d->run_head);
    d->run_head = d->run_tail = NULL;
    if (d->worker_writes_last) store_word(d, d->last_value);
    d->worker_writes_last = 0;
  }
  pthread_cond_broadcast(&d->cv);
out:
  dev_unlock(d);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

uint64_t fake_debug_queue_digest(struct fake_dev *d) {
  uint64_t h = 1;
  dev_lock(d);
  h = mix(h, (uint64_t)d->stopping);
  h = mix(h, d->free_count);
  h = mix(h, d->reserved_total);
  h = mix(h, d->last_value);
  for (struct fake_node *n = d->free_nodes; n; n = n->next) h = mix(h, (uint64_t)(uintptr_t)n);
  for (struct fake_node *n = d->run_head; n; n = n->next) h = mix(h, (uint64_t)(uintptr_t)n);
  h = mix(h, (uint64_t)(uintptr_t)d->run_tail);
  for (struct fake_thread *t = d->threads; t; t = t->next) {
    h = mix(h, (uint64_t)t->tid);
    h = mix(h, t->reserved);
    h = mix(h, t->held);
    for (struct fake_node *n = t->enc_head; n; n = n->next) h = mix(h, (uint64_t)(uintptr_t)n);
    h = mix(h, (uint64_t)(uintptr_t)t->enc_tail);
  }
  dev_unlock(d);
  return h;
}
