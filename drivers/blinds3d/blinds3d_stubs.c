/* blinds3d_stubs.c: the blocking steps of the s3d-* drivers' sleeps (and the
 * CPU burner of s3d-ok-c-burner), over hostmem's device.
 *
 * The device is hostmem's (hostmem_stubs.c, linked into the same plugin):
 * these stubs reach it only through its OCaml-facing functions hm_signaled,
 * hm_stopped, hm_fault (which need the OCaml runtime) and hm_wait (hostmem's
 * released wait on the device's events, which releases the runtime itself).
 * They know nothing of its layout.
 *
 * Every stub here is called inside Rig_edge_primitives.wait's step (signals
 * unblocked), returns at the latest after the ms it is given (TIME-4), and
 * ends early when the word differs from seen, the device faulted or stopped.
 * The stubs marked BROKEN block, for part of the wait, while HOLDING the
 * OCaml runtime (no caml_enter_blocking_section): they break SIG-3 on
 * purpose.  The others release it whenever they block.
 *
 * No lock here is held while OCaml code runs (the slice mutex is held only
 * inside pthread_cond_timedwait's C code; the burner mutex only in C), so
 * none is one of the locks rig_hold counts (LOCK-3).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* hostmem's device (hostmem_stubs.c). */
extern value hm_signaled(value v);
extern value hm_stopped(value v);
extern value hm_fault(value v);
extern value hm_wait(value v, value vseen, value vms);

/* ------------------------------------------------------------- helpers */

#define MS 1000000LL

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

/* s3d_now_ms (): the monotonic clock in ms.  No allocation. */
CAMLprim value s3d_now_ms(value unit) {
  (void)unit;
  return Val_long(now_ns() / MS);
}

/* Whether the wait is over: the word differs from seen, the device stopped
 * or faulted.  With the runtime (hm_fault allocates once the device has
 * faulted); the caller keeps v registered as a root. */
static int over(value v, value vseen) {
  if (hm_signaled(v) != vseen) return 1;
  if (Bool_val(hm_stopped(v))) return 1;
  return Is_block(hm_fault(v));
}

/* Sleeps ns with whatever the caller holds: where the caller holds the OCaml
 * runtime, this is the bug of the broken drivers. */
static void nap(int64_t ns) {
  if (ns <= 0) return;
  struct timespec t = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
  while (nanosleep(&t, &t) == -1 && errno == EINTR) {
  }
}

/* A timed wait on a condition nobody signals: a slice of a sliced wait. */
static pthread_mutex_t slice_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slice_cv;
static pthread_once_t slice_once = PTHREAD_ONCE_INIT;

static void slice_init(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&slice_cv, &ca);
  pthread_condattr_destroy(&ca);
}

static void slice_wait(int64_t ns) {
  if (ns <= 0) return;
  pthread_once(&slice_once, slice_init);
  int64_t until = now_ns() + ns;
  struct timespec ts = { (time_t)(until / 1000000000LL), (long)(until % 1000000000LL) };
  pthread_mutex_lock(&slice_mu);
  while (now_ns() < until)
    if (pthread_cond_timedwait(&slice_cv, &slice_mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&slice_mu);
}

/* ---------------------------------------------------- broken (SIG-3) */

/* s3d_kept_wait dev seen ms: BROKEN.  Polls the word every 1 ms for ms ms,
 * nanosleeping with the OCaml runtime HELD.  true if the wait is over. */
CAMLprim value s3d_kept_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t until = now_ns() + (int64_t)Long_val(vms) * MS;
  for (;;) {
    if (over(v, vseen)) CAMLreturn(Val_true);
    int64_t left = until - now_ns();
    if (left <= 0) CAMLreturn(Val_false);
    nap(min64(left, MS)); /* the runtime held */
  }
}

/* s3d_spin_first dev seen ms: BROKEN.  Reads the word once; unmoved, it
 * spins on it, HOLDING the runtime, for half of ms ("the work must be nearly
 * done"), then waits released (hm_wait) for the rest. */
CAMLprim value s3d_spin_first(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t start = now_ns(), ms = Long_val(vms);
  int64_t until = start + ms * MS, spin_until = start + ms * MS / 2;
  if (over(v, vseen)) CAMLreturn(Val_unit);
  unsigned n = 0;
  while (now_ns() < spin_until) {
    if (hm_signaled(v) != vseen) CAMLreturn(Val_unit);
    if ((++n & 1023) == 0 && over(v, vseen)) CAMLreturn(Val_unit);
    for (int i = 0; i < 16; i++) cpu_relax();
  }
  int64_t left_ms = (until - now_ns()) / MS;
  if (left_ms > 0) hm_wait(v, vseen, Val_long(left_ms));
  CAMLreturn(Val_unit);
}

/* s3d_slice_reentry dev seen ms: BROKEN.  A timed condition wait in 10 ms
 * slices.  The first slice runs released; the runtime is then taken back to
 * read the word and the fault, and the retry jumps back to the slice past
 * caml_enter_blocking_section: every later slice blocks HOLDING it. */
CAMLprim value s3d_slice_reentry(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t until = now_ns() + (int64_t)Long_val(vms) * MS;
  int released = 1;
  caml_enter_blocking_section();
retry:
  slice_wait(min64(until - now_ns(), 10 * MS));
  if (released) {
    caml_leave_blocking_section(); /* to read the word and the fault */
    released = 0;
  }
  if (!over(v, vseen) && now_ns() < until) goto retry; /* forgets to release again */
  CAMLreturn(Val_unit);
}

/* s3d_retake_poll dev seen ms: BROKEN.  Waits released for 10 ms (hm_wait),
 * takes the runtime back to poll the word and the fault, then nanosleeps
 * 10 ms STILL HOLDING it; repeats until the wait is over or ms ran out. */
CAMLprim value s3d_retake_poll(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t until = now_ns() + (int64_t)Long_val(vms) * MS;
  for (;;) {
    int64_t left_ms = (until - now_ns()) / MS;
    if (left_ms <= 0) break;
    hm_wait(v, vseen, Val_long(min64(left_ms, 10)));
    if (over(v, vseen)) break;
    int64_t left = until - now_ns();
    if (left <= 0) break;
    nap(min64(left, 10 * MS)); /* the runtime held */
    if (over(v, vseen)) break;
  }
  CAMLreturn(Val_unit);
}

/* ------------------------------------------------------- conforming */

/* s3d_short_waits dev seen ms: many short released waits (hm_wait, at most
 * 2 ms each); the runtime is taken back between them only to read the word
 * and the fault. */
CAMLprim value s3d_short_waits(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t until = now_ns() + (int64_t)Long_val(vms) * MS;
  for (;;) {
    if (over(v, vseen)) break;
    int64_t left_ms = (until - now_ns()) / MS;
    if (left_ms <= 0) break;
    hm_wait(v, vseen, Val_long(min64(left_ms, 2)));
  }
  CAMLreturn(Val_unit);
}

/* s3d_slack_set ms: sets the calling thread's timer slack to ms ms, so that
 * the timeout of its next timed wait (hostmem's hm_wait, asked by
 * s3d-ok-timer-slack for still_ms - slack) may fire up to that late, still
 * within still_ms; answers the slack it had, in ns.  No allocation. */
CAMLprim value s3d_slack_set(value vms) {
  int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  prctl(PR_SET_TIMERSLACK, (unsigned long)(Long_val(vms) * MS), 0, 0, 0);
  return Val_long(old);
}

/* s3d_slack_restore ns: gives the thread back the slack s3d_slack_set
 * answered (0 or less: the default). */
CAMLprim value s3d_slack_restore(value vold) {
  long old = Long_val(vold);
  prctl(PR_SET_TIMERSLACK, old > 0 ? (unsigned long)old : 0UL, 0, 0, 0);
  return Val_unit;
}

/* s3d_released_spin dev seen ms: spins on the clock (burning the CPU) for at
 * most 1 ms at a time with the runtime released, taking it back between the
 * spins only to read the word and the fault. */
CAMLprim value s3d_released_spin(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t until = now_ns() + (int64_t)Long_val(vms) * MS;
  for (;;) {
    if (over(v, vseen)) break;
    int64_t left = until - now_ns();
    if (left <= 0) break;
    int64_t end = now_ns() + min64(left, MS);
    caml_enter_blocking_section();
    while (now_ns() < end)
      for (int i = 0; i < 16; i++) cpu_relax();
    caml_leave_blocking_section();
  }
  CAMLreturn(Val_unit);
}

/* ------------------------------------------------------- the burner */

/* s3d-ok-c-burner: one C thread of the driver's burns a CPU while any of its
 * devices is open (holds an active ticket).  It never touches the OCaml
 * runtime.  Started with every signal blocked but the fault signals
 * (rig_mask), for its life (SIG-8). */
static pthread_mutex_t burn_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int burn_users;  /* active tickets */
static int burn_running;       /* under burn_mu: a burner thread exists */

static void *burn(void *arg) {
  (void)arg;
  volatile uint64_t x = 0;
  for (;;) {
    while (atomic_load_explicit(&burn_users, memory_order_relaxed) > 0) {
      for (uint64_t i = 0; i < (1u << 18); i++) x += i * 2654435761u;
      sched_yield();
    }
    pthread_mutex_lock(&burn_mu);
    if (atomic_load(&burn_users) == 0) {
      burn_running = 0;
      pthread_mutex_unlock(&burn_mu);
      return NULL;
    }
    pthread_mutex_unlock(&burn_mu);
  }
}

struct ticket {
  atomic_int active;
};

#define Ticket_val(v) (*(struct ticket **)Data_custom_val(v))

static void ticket_drop(struct ticket *t) {
  if (atomic_exchange(&t->active, 0)) atomic_fetch_sub(&burn_users, 1);
}

static void ticket_finalize(value v) {
  struct ticket *t = Ticket_val(v);
  if (t) {
    ticket_drop(t);
    free(t);
  }
}

static struct custom_operations ticket_ops = {
  "rig.blinds3d.ticket", ticket_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* s3d_burner_take (): an active ticket; starts the burner if none runs. */
CAMLprim value s3d_burner_take(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct ticket *t = calloc(1, sizeof *t);
  if (!t) caml_raise_out_of_memory();
  v = caml_alloc_custom(&ticket_ops, sizeof(struct ticket *), 0, 1);
  Ticket_val(v) = NULL;
  int rc = 0;
  pthread_mutex_lock(&burn_mu);
  atomic_fetch_add(&burn_users, 1);
  atomic_init(&t->active, 1);
  if (!burn_running) {
    sigset_t old;
    rig_mask(&old);
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&tid, &attr, burn, NULL);
    pthread_attr_destroy(&attr);
    rig_restore(&old);
    if (rc == 0) burn_running = 1;
    else atomic_fetch_sub(&burn_users, 1);
  }
  pthread_mutex_unlock(&burn_mu);
  if (rc != 0) {
    free(t);
    caml_failwith("blinds3d: cannot start the burner thread");
  }
  Ticket_val(v) = t;
  CAMLreturn(v);
}

/* s3d_burner_drop ticket: the device stopped; the burner ends once no
 * ticket is active. */
CAMLprim value s3d_burner_drop(value v) {
  struct ticket *t = Ticket_val(v);
  if (t) ticket_drop(t);
  return Val_unit;
}
