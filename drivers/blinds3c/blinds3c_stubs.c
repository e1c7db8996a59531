/* blinds3c: the C side of the s3c-* drivers.
 *
 * The device is hostmem's (hostmem_stubs.c, hm_*), linked into the plugin.
 * The waits here block on that device's event_cv as hm_wait does, so they
 * need its struct: MIRROR below is a verbatim copy of hostmem_stubs.c's
 * struct hm_dev (and the types it holds), checked against the device at
 * each open (s3c_mirror_ok).  Only mu, event_cv, word, faulted and stopping
 * are read, always under mu, as hm_wait reads them.
 *
 * What is ours besides: waits that keep the OCaml runtime (the broken
 * drivers' bugs, each marked BUG), waits that release it, a kick of the
 * device's sleepers, an event object for the helper threads, and a CPU
 * burner thread.
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
#include <caml/signals.h>

#include "rig_edge.h"

/* ------------------------------------------- MIRROR of hostmem's device */

struct obj {
  uint32_t gen;
  uint8_t kind;
  uint8_t fn;
  uint8_t charged;
  char *addr;
  uint64_t size;
  uint32_t next_free;
};

struct slot {
  struct rig_part part;
  uint64_t value;
  int signal;
  struct slot *next;
};

#define SLOTS_PER_BLOCK 8
struct block {
  struct block *next;
  struct slot slots[SLOTS_PER_BLOCK];
};

struct thr {
  pthread_t tid;
  int used;
  uint32_t reserved;
  uint32_t need;
  uint32_t earmark_slots;
  struct block *earmark;
  struct slot *open_head, *open_tail;
};
#define MAX_THREADS 1024

struct hm_dev {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  pthread_cond_t event_cv;
  _Atomic uint64_t word;
  atomic_int refs;
  int64_t capacity, used;
  struct obj *objs;
  uint32_t n_objs, cap_objs, free_obj;
  struct block *blocks;
  struct slot *free_slots;
  uint32_t free_count, reserved_total;
  struct thr thr[MAX_THREADS];
  struct slot *run_head, *run_tail;
  int busy;
  int stopping;
  int final_written;
  int faulted;
  char fault_msg[160];
  uint64_t last_value;
};

#define Dev_val(v) (*(struct hm_dev **)Data_custom_val(v))

/* hostmem's own accessors, linked beside us. */
extern value hm_capacity(value);
extern value hm_signaled(value);

/* s3c_mirror_ok dev capacity: the mirror reads the fields where hostmem
 * wrote them (a fresh device: the capacity it was opened with, the word
 * hostmem reads, its two references, neither faulted nor stopping). */
CAMLprim value s3c_mirror_ok(value v, value vcap) {
  struct hm_dev *d = Dev_val(v);
  int ok;
  pthread_mutex_lock(&d->mu);
  ok = d->capacity == Long_val(vcap) && Long_val(hm_capacity(v)) == d->capacity &&
       (intnat)atomic_load(&d->word) == Long_val(hm_signaled(v)) && !d->faulted && !d->stopping &&
       d->final_written == 0;
  pthread_mutex_unlock(&d->mu);
  return Val_bool(ok);
}

/* ---------------------------------------------------------------- time */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct timespec ts_of(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / 1000000000LL;
  ts.tv_nsec = ns % 1000000000LL;
  return ts;
}

CAMLprim value s3c_now_ns(value unit) {
  (void)unit;
  return Val_long(now_ns());
}

/* ------------------------------------------------------------- waits */

/* Whether a sleeper on [seen] must keep waiting.  Under mu. */
static int unmoved(struct hm_dev *d, uint64_t seen) {
  return atomic_load_explicit(&d->word, memory_order_acquire) == seen && !d->faulted && !d->stopping;
}

/* Blocks until the word differs from seen, the device faults or stops, or
 * the deadline (CLOCK_MONOTONIC ns).  Under mu. */
static void block_until(struct hm_dev *d, uint64_t seen, int64_t deadline) {
  struct timespec ts = ts_of(deadline);
  while (unmoved(d, seen))
    if (pthread_cond_timedwait(&d->event_cv, &d->mu, &ts) == ETIMEDOUT) break;
}

/* s3c_wait_rel dev seen deadline: hm_wait with an absolute deadline, the
 * OCaml runtime released while it blocks.  Conforming. */
CAMLprim value s3c_wait_rel(value v, value vseen, value vdl) {
  CAMLparam3(v, vseen, vdl);
  struct hm_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t deadline = Long_val(vdl);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  block_until(d, seen, deadline);
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* s3c_wait_keep dev seen deadline: the same wait, written without the
 * blocking section.  BUG (SIG-3): the runtime stays with this thread for
 * the whole wait. */
CAMLprim value s3c_wait_keep(value v, value vseen, value vdl) {
  struct hm_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  block_until(d, (uint64_t)Long_val(vseen), Long_val(vdl));
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* s3c_wait_branch dev seen deadline: a wait with a short and a long branch.
 * BUG (SIG-3): the short branch (less than 100 ms to the deadline) was
 * written as "too short to be worth releasing the runtime" and forgets
 * caml_enter_blocking_section; the long branch releases it. */
#define SHORT_NS (100LL * 1000000LL)
CAMLprim value s3c_wait_branch(value v, value vseen, value vdl) {
  CAMLparam3(v, vseen, vdl);
  struct hm_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t deadline = Long_val(vdl);
  if (deadline - now_ns() < SHORT_NS) {
    pthread_mutex_lock(&d->mu);
    block_until(d, seen, deadline);
    pthread_mutex_unlock(&d->mu);
  } else {
    caml_enter_blocking_section();
    pthread_mutex_lock(&d->mu);
    block_until(d, seen, deadline);
    pthread_mutex_unlock(&d->mu);
    caml_leave_blocking_section();
  }
  CAMLreturn(Val_unit);
}

/* s3c_spin_keep dev seen deadline: polls the word (and, every 64 turns, the
 * fault and stop flags under mu) until it moves or the deadline.  BUG
 * (SIG-3): a low-latency spin that never releases the runtime. */
CAMLprim value s3c_spin_keep(value v, value vseen, value vdl) {
  struct hm_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t deadline = Long_val(vdl);
  for (unsigned n = 0;; n++) {
    if (atomic_load_explicit(&d->word, memory_order_acquire) != seen) break;
    if ((n & 63) == 0) {
      pthread_mutex_lock(&d->mu);
      int go_on = unmoved(d, seen);
      pthread_mutex_unlock(&d->mu);
      if (!go_on) break;
    }
    if (now_ns() >= deadline) break;
  }
  return Val_unit;
}

/* s3c_wait_once dev seen deadline: one blocking step on the device's
 * events, the runtime released: returns on the word, a fault, a stop, the
 * deadline, or any wake-up of event_cv (a kick of the driver's own, or a
 * spurious one).  Conforming. */
CAMLprim value s3c_wait_once(value v, value vseen, value vdl) {
  CAMLparam3(v, vseen, vdl);
  struct hm_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  struct timespec ts = ts_of(Long_val(vdl));
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  if (unmoved(d, seen)) pthread_cond_timedwait(&d->event_cv, &d->mu, &ts);
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* s3c_wait_sliced dev seen deadline slice: one blocking step made of
 * slices of at most [slice] ns, each in a blocking section of its own: the
 * runtime is taken back between slices only to be released again
 * (caml_enter_blocking_section may run pending signal handlers there, inside
 * the wait, and raise; nothing is held then).  Conforming. */
CAMLprim value s3c_wait_sliced(value v, value vseen, value vdl, value vslice) {
  CAMLparam4(v, vseen, vdl, vslice);
  struct hm_dev *d = Dev_val(v);
  uint64_t seen = (uint64_t)Long_val(vseen);
  int64_t deadline = Long_val(vdl), slice = Long_val(vslice);
  for (;;) {
    int done;
    caml_enter_blocking_section();
    pthread_mutex_lock(&d->mu);
    int64_t t = now_ns() + slice;
    block_until(d, seen, t < deadline ? t : deadline);
    done = !unmoved(d, seen) || now_ns() >= deadline;
    pthread_mutex_unlock(&d->mu);
    caml_leave_blocking_section();
    if (done) break;
  }
  CAMLreturn(Val_unit);
}

/* s3c_kick dev: wakes the device's sleepers (they look again and may
 * return early: a timer of the driver's own). */
CAMLprim value s3c_kick(value v) {
  struct hm_dev *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  pthread_cond_broadcast(&d->event_cv);
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* ------------------------------------------------------------- events */

/* An auto-reset event for the drivers' helper threads: set wakes a waiter;
 * wait blocks (runtime released) until set or [ms] pass.  Its mutex is held
 * only inside C code that runs no OCaml code, never across a blocking
 * section's enter or leave: not a counted lock (LOCK-3), as hostmem's mu. */
struct ev {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int set;
};
#define Ev_val(v) (*(struct ev **)Data_custom_val(v))

static void ev_finalize(value v) {
  struct ev *e = Ev_val(v);
  if (!e) return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

static struct custom_operations ev_ops = {
  "rig.blinds3c.ev", ev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

CAMLprim value s3c_ev_new(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct ev *e = calloc(1, sizeof *e);
  if (!e) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, &ca);
  pthread_condattr_destroy(&ca);
  v = caml_alloc_custom(&ev_ops, sizeof(struct ev *), 0, 1);
  Ev_val(v) = e;
  CAMLreturn(v);
}

CAMLprim value s3c_ev_set(value v) {
  struct ev *e = Ev_val(v);
  pthread_mutex_lock(&e->mu);
  e->set = 1;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return Val_unit;
}

CAMLprim value s3c_ev_wait(value v, value vms) {
  CAMLparam2(v, vms);
  struct ev *e = Ev_val(v);
  struct timespec ts = ts_of(now_ns() + (int64_t)Long_val(vms) * 1000000LL);
  int got;
  caml_enter_blocking_section();
  pthread_mutex_lock(&e->mu);
  while (!e->set)
    if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) == ETIMEDOUT) break;
  got = e->set;
  e->set = 0;
  pthread_mutex_unlock(&e->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_bool(got));
}

/* ------------------------------------------------------------- burner */

/* A C thread of the driver that burns CPU until its device stops (or the
 * OCaml side drops it, or 120 s pass): started with every signal blocked
 * but the fault signals, for its life (SIG-8).  It never touches the OCaml
 * runtime. */
struct burner {
  atomic_int stop;
  atomic_int refs;
  volatile double sink;
};
#define Burner_val(v) (*(struct burner **)Data_custom_val(v))

static void burner_release(struct burner *b) {
  if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

static void *burn(void *arg) {
  struct burner *b = arg;
  int64_t end = now_ns() + 120LL * 1000000000LL;
  double x = 1.0;
  while (!atomic_load(&b->stop) && now_ns() < end) {
    for (int i = 0; i < 100000; i++) x = x * 1.0000001 + 1e-9;
    b->sink = x;
  }
  burner_release(b);
  return NULL;
}

static void burner_finalize(value v) {
  struct burner *b = Burner_val(v);
  if (!b) return;
  atomic_store(&b->stop, 1);
  burner_release(b);
}

static struct custom_operations burner_ops = {
  "rig.blinds3c.burner", burner_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

CAMLprim value s3c_burner_start(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct burner *b = calloc(1, sizeof *b);
  if (!b) caml_raise_out_of_memory();
  atomic_init(&b->stop, 0);
  atomic_init(&b->refs, 2);
  sigset_t old;
  rig_mask(&old);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, burn, b);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
  if (rc != 0) {
    free(b);
    caml_failwith("blinds3c: cannot start the burner thread");
  }
  v = caml_alloc_custom(&burner_ops, sizeof(struct burner *), 0, 1);
  Burner_val(v) = b;
  CAMLreturn(v);
}

CAMLprim value s3c_burner_stop(value v) {
  atomic_store(&Burner_val(v)->stop, 1);
  return Val_unit;
}
