/* blindset: the C the blindset drivers need beyond hostmem's stubs: a
 * wrapper of hostmem's queue functions (struct rig_queue_fns) with a few
 * behaviours, blocking steps, helper threads.
 *
 * Some drivers reach into hostmem's device (the word, the stopping flag):
 * its layout is copied here from drivers/hostmem/hostmem_stubs.c, which is
 * linked into the same plugin. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* ---- hostmem's device layout (copied from hostmem_stubs.c) ---- */
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

struct hm_dev {
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
};

#define Dev_val(v) (*(struct hm_dev **)Data_custom_val(v))

/* hostmem's stubs, linked beside these. */
extern value hm_wait(value v, value vseen, value vms);
extern value hm_fault(value v);
extern value hm_grow(value v);

/* BS_DEBUG=1: the broken paths say when they are taken (on stderr). */
#include <stdio.h>
static int debug(void) { static int d = -1; if (d < 0) d = getenv("BS_DEBUG") != NULL; return d; }
#define TRACE(...) do { if (debug()) { fprintf(stderr, "BS_TRACE " __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* ---------------------------------------------------------- naps */

static void nap_ms(long ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* bs_nap ms: sleeps, without the runtime (a wait's step). */
value bs_nap(value vms) {
  long ms = Long_val(vms);
  caml_enter_blocking_section();
  nap_ms(ms);
  caml_leave_blocking_section();
  return Val_unit;
}

/* bs_nap_held ms: sleeps, keeping the runtime. */
value bs_nap_held(value vms) {
  nap_ms(Long_val(vms));
  return Val_unit;
}

value bs_now_ms(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* ------------------------------------------------ the queue wrapper */

enum { Q_PLAIN = 0, Q_GROW_ONCE = 1, Q_REGROW = 2, Q_SUBMIT_LOCK = 3, Q_EARLY_REJECT = 4, Q_GROW_ONCE_FIRST = 5 };

struct bsq {
  void *inner;
  const struct rig_queue_fns *fns;
  int mode;
  pthread_mutex_t sub_mu;
};

static __thread struct bsq *tls_q;          /* the wrapper the fields below are of */
static __thread const struct rig_submission *tls_s;  /* the last room's submission */
static __thread int tls_asked;              /* RIG_GROWs answered for it */
static __thread int tls_roomed;             /* room answered RIG_ROOM, no submit yet */

static void tls_for(struct bsq *q) {
  if (tls_q != q) {
    tls_q = q;
    tls_s = NULL;
    tls_asked = 0;
    tls_roomed = 0;
  }
}

static int bsq_room(void *dev, const struct rig_submission *s) {
  struct bsq *q = dev;
  tls_for(q);
  int r = q->fns->room(q->inner, s);
  tls_s = s;
  switch (q->mode) {
  case Q_GROW_ONCE:
    /* one RIG_GROW for each submission, before its first RIG_ROOM, unless
     * it needed a real one (after a real one's Grown, another RIG_GROW
     * would break QUEUE-2) */
    if (r == RIG_GROW) tls_asked = 1;
    if (r == RIG_ROOM && tls_asked == 0) { tls_asked = 1; return RIG_GROW; }
    break;
  case Q_GROW_ONCE_FIRST:
    /* bs-ok-grow-once as its author first wrote it: the extra RIG_GROW also
     * after a real growth's Grown, for a submission that needed one
     * (QUEUE-2; only a submission bigger than the free slots shows it) */
    if (r == RIG_ROOM && tls_asked == 0) { tls_asked = 1; return RIG_GROW; }
    break;
  case Q_REGROW:
    /* meant "once per submission", counts to two */
    if (r == RIG_ROOM && tls_asked <= 1) { tls_asked++; if (tls_asked == 2) TRACE("room: RIG_GROW again after Grown"); return RIG_GROW; }
    break;
  default: break;
  }
  tls_roomed = (r == RIG_ROOM);
  return r;
}

static int bsq_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct bsq *q = dev;
  tls_for(q);
  tls_asked = 0;
  int rc;
  switch (q->mode) {
  case Q_EARLY_REJECT:
    /* fast rejection before the device sees the submission */
    if (!tls_roomed) { TRACE("submit: rejected before the device saw value %llu (no room)", (unsigned long long)value); return 1; }
    for (uint32_t i = 0; i < s->n_parts; i++)
      if (s->parts[i].op < RIG_OP_FILL || s->parts[i].op > RIG_OP_LAUNCH) { TRACE("submit: rejected before the device saw value %llu (bad part)", (unsigned long long)value); tls_roomed = 0; return 1; }
    tls_roomed = 0;
    return q->fns->submit(q->inner, s, value);
  case Q_SUBMIT_LOCK:
    if (pthread_mutex_trylock(&q->sub_mu) != 0) {
      TRACE("submit: waits for the lock a sleep holds");
      pthread_mutex_lock(&q->sub_mu);
    }
    rc = q->fns->submit(q->inner, s, value);
    pthread_mutex_unlock(&q->sub_mu);
    return rc;
  default:
    tls_roomed = 0;
    return q->fns->submit(q->inner, s, value);
  }
}

static int bsq_commit(void *dev) {
  struct bsq *q = dev;
  int rc;
  if (q->mode == Q_SUBMIT_LOCK) {
    pthread_mutex_lock(&q->sub_mu);
    rc = q->fns->commit(q->inner);
    pthread_mutex_unlock(&q->sub_mu);
    return rc;
  }
  return q->fns->commit(q->inner);
}

static const struct rig_queue_fns bsq_table = { bsq_room, bsq_submit, bsq_commit };

value bs_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&bsq_table); }

/* bs_wrap fns dev mode: a wrapper of the table fns for dev (never freed). */
value bs_wrap(value vfns, value vdev, value vmode) {
  struct bsq *q = calloc(1, sizeof *q);
  if (!q) caml_raise_out_of_memory();
  q->inner = (void *)Nativeint_val(vdev);
  q->fns = (const struct rig_queue_fns *)Nativeint_val(vfns);
  q->mode = Int_val(vmode);
  pthread_mutex_init(&q->sub_mu, NULL);
  return caml_copy_nativeint((intnat)q);
}

/* bs_sub_lock q / bs_sub_unlock q: the wrapper's submission lock. */
value bs_sub_lock(value vq) {
  struct bsq *q = (struct bsq *)Nativeint_val(vq);
  caml_enter_blocking_section();
  pthread_mutex_lock(&q->sub_mu);
  caml_leave_blocking_section();
  return Val_unit;
}
value bs_sub_unlock(value vq) {
  struct bsq *q = (struct bsq *)Nativeint_val(vq);
  pthread_mutex_unlock(&q->sub_mu);
  return Val_unit;
}

/* bs_grow_publish dev q: hostmem's grow, then the thread's room again, so
 * that what grow made is in the queues at once. */
value bs_grow_publish(value vdev, value vq) {
  struct bsq *q = (struct bsq *)Nativeint_val(vq);
  value r = hm_grow(vdev);
  if (Long_val(r) == 0 && tls_q == q && tls_s) q->fns->room(q->inner, tls_s);
  return r;
}

/* ----------------------------------------------------------- waits */

/* bs_wait_sig dev seen ms: a wait written in C: rig_unblock, hostmem's
 * blocking wait, a fault check, rig_block. */
value bs_wait_sig(value vdev, value vseen, value vms) {
  CAMLparam3(vdev, vseen, vms);
  CAMLlocal1(f);
  rig_unblock();
  hm_wait(vdev, vseen, vms);
  f = hm_fault(vdev);
  if (Is_some(f)) {
    const value *exn = caml_named_value("bs.fault");
    TRACE("sleep: raises Fault with signals unblocked (no rig_block)");
    caml_raise_with_arg(*exn, Some_val(f));
  }
  rig_block();
  CAMLreturn(Val_unit);
}

/* -------------------------------------------------------- threads */

static void *alarm_thread(void *arg) {
  (void)arg;
  /* its timer is alarm(2) */
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &s, NULL);
  for (;;) nap_ms(100);
  return NULL;
}

static void start_detached(void *(*fn)(void *), void *arg) {
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&tid, &attr, fn, arg);
  pthread_attr_destroy(&attr);
}

value bs_alarm_thread(value unit) {
  (void)unit;
  start_detached(alarm_thread, NULL);
  return Val_unit;
}

/* The completion mirror: keeps the last completed value it saw and writes
 * it back into the word once the device stops. */
static void *mirror_thread(void *arg) {
  struct hm_dev *d = arg;
  uint64_t shadow = 0;
  for (;;) {
    pthread_mutex_lock(&d->mu);
    int stopping = d->stopping;
    pthread_mutex_unlock(&d->mu);
    if (stopping) break;
    shadow = atomic_load_explicit(&d->word, memory_order_acquire);
    nap_ms(2);
  }
  nap_ms(50);
  TRACE("mirror: writes %llu over %llu after stop", (unsigned long long)shadow, (unsigned long long)atomic_load(&d->word));
  atomic_store_explicit(&d->word, shadow, memory_order_release);
  return NULL; /* keeps its reference: the device is never released */
}

value bs_mirror_thread(value vdev) {
  struct hm_dev *d = Dev_val(vdev);
  atomic_fetch_add(&d->refs, 1);
  start_detached(mirror_thread, d);
  return Val_unit;
}

/* bs_flush_all dev: commits the work every thread encoded and did not
 * commit (every open command buffer of the device). */
value bs_flush_all(value vdev) {
  struct hm_dev *d = Dev_val(vdev);
  int n = 0;
  pthread_mutex_lock(&d->mu);
  if (!d->stopping) {
    for (int i = 0; i < MAX_THREADS; i++) {
      struct thr *t = &d->thr[i];
      if (!t->used || !t->open_head) continue;
      if (d->run_tail) d->run_tail->next = t->open_head;
      else d->run_head = t->open_head;
      d->run_tail = t->open_tail;
      t->open_head = t->open_tail = NULL;
      n++;
    }
    if (n) pthread_cond_signal(&d->work_cv);
  }
  pthread_mutex_unlock(&d->mu);
  TRACE("stop: flushed the open work of %d thread(s)", n);
  return Val_unit;
}
