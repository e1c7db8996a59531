/* blindtq's C side: clocks, the blocking steps its sleeps run inside
 * Rig_edge_primitives.wait (each releases the OCaml runtime: SIG-3), a
 * time-boxed computation (runtime released, signals left as they are: not a
 * wait), and tq-ok-burner's per-device CPU burner thread (started with
 * rig_mask's signals blocked, for its life: SIG-8). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* ------------------------------------------------------------- clocks */

static int64_t clock_us(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t mono_us(void) { return clock_us(CLOCK_MONOTONIC); }

CAMLprim value tq_now_us(value unit) {
  (void)unit;
  return Val_long(mono_us());
}

/* The calling thread's CPU time (tq-cpu-deadline's bug, tq-post-compute's
 * budget). */
CAMLprim value tq_cpu_us(value unit) {
  (void)unit;
  return Val_long(clock_us(CLOCK_THREAD_CPUTIME_ID));
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static void spin_for(int64_t us) {
  int64_t end = mono_us() + us;
  while (mono_us() < end) relax();
}

static void nap_for(int64_t us) {
  if (us <= 0) return;
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
  nanosleep(&ts, NULL); /* EINTR: back early, the caller loops */
}

/* ------------------------------------------------- blocking steps */

/* Each is a wait's blocking step: the runtime is released throughout. */

CAMLprim value tq_spin_us(value vus) {
  int64_t us = Long_val(vus);
  caml_enter_blocking_section();
  spin_for(us);
  caml_leave_blocking_section();
  return Val_unit;
}

CAMLprim value tq_nap_us(value vus) {
  int64_t us = Long_val(vus);
  caml_enter_blocking_section();
  nap_for(us);
  caml_leave_blocking_section();
  return Val_unit;
}

/* Until the absolute CLOCK_MONOTONIC time [abs] (us), or EINTR. */
CAMLprim value tq_nap_until_us(value vabs) {
  int64_t abs = Long_val(vabs);
  struct timespec ts = { abs / 1000000, (abs % 1000000) * 1000 };
  caml_enter_blocking_section();
  clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  caml_leave_blocking_section();
  return Val_unit;
}

CAMLprim value tq_yield_for_us(value vus) {
  int64_t us = Long_val(vus);
  caml_enter_blocking_section();
  int64_t end = mono_us() + us;
  do sched_yield();
  while (mono_us() < end);
  caml_leave_blocking_section();
  return Val_unit;
}

/* Poll [spin] us, then sleep [nap] us. */
CAMLprim value tq_spin_nap(value vspin, value vnap) {
  int64_t spin = Long_val(vspin), nap = Long_val(vnap);
  caml_enter_blocking_section();
  spin_for(spin);
  nap_for(nap);
  caml_leave_blocking_section();
  return Val_unit;
}

/* ------------------------------------------------------ computation */

static uint64_t mix(uint64_t x, int n) {
  for (int i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x += (uint64_t)i;
  }
  return x;
}

/* CPU work for [us] of wall time, runtime released (not a wait: the
 * thread's signals stay as they are).  Returns a digest of it. */
CAMLprim value tq_compute_for_us(value vus) {
  int64_t us = Long_val(vus);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  caml_enter_blocking_section();
  int64_t end = mono_us() + us;
  do x = mix(x, 1024);
  while (mono_us() < end);
  caml_leave_blocking_section();
  return Val_long((intnat)(x >> 2));
}

/* ------------------------------------------------------------ burner */

struct burner {
  atomic_int stop;
  atomic_int refs; /* the OCaml block's and the thread's */
};

static void burner_release(struct burner *b) {
  if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

static void *burn(void *arg) {
  struct burner *b = arg;
  uint64_t x = 88172645463325252ULL;
  while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
    x = mix(x, 4096);
    __asm__ volatile("" : : "r"(x));
  }
  burner_release(b);
  return NULL;
}

#define Burner_val(v) (*(struct burner **)Data_custom_val(v))

static void burner_finalize(value v) {
  struct burner *b = Burner_val(v);
  if (!b) return;
  atomic_store(&b->stop, 1);
  burner_release(b);
}

static struct custom_operations burner_ops = {
  "rig.blindtq.burner", burner_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* A detached thread that burns a CPU until tq_burner_stop or the block's
 * finaliser.  Started with every signal blocked but the fault signals
 * (rig_mask), which it keeps for its life (SIG-8). */
CAMLprim value tq_burner_start(value unit) {
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
    caml_failwith("blindtq: cannot start the burner thread");
  }
  v = caml_alloc_custom(&burner_ops, sizeof(struct burner *), 0, 1);
  Burner_val(v) = b;
  CAMLreturn(v);
}

CAMLprim value tq_burner_stop(value v) {
  struct burner *b = Burner_val(v);
  if (b) atomic_store(&b->stop, 1);
  return Val_unit;
}
