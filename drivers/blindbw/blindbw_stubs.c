/* blindbw: a monotonic clock and the ways the bw-* drivers pass time: a nap
 * that releases the OCaml runtime, a nap that keeps it, a "settle" doze
 * (absolute-deadline clock_nanosleep) that keeps it, a busy spin that
 * releases it, and a whole wait written in C that lets the runtime go
 * before its rig_unblock (rig_edge.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/fail.h>
#include <caml/threads.h>

#include "rig_edge.h"

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void nap(intnat n) {
  if (n < 0) n = 0;
  struct timespec ts = { n / 1000000, (n % 1000000) * 1000 };
  nanosleep(&ts, NULL);
}

CAMLprim value bw_now_us(value unit) {
  (void)unit;
  return Val_long((intnat)mono_us());
}

/* bw_nap_us n: sleeps n microseconds without the OCaml runtime. */
CAMLprim value bw_nap_us(value vn) {
  intnat n = Long_val(vn);
  caml_enter_blocking_section();
  nap(n);
  caml_leave_blocking_section();
  return Val_unit;
}

/* bw_nap_held_us n: sleeps n microseconds KEEPING the OCaml runtime. */
CAMLprim value bw_nap_held_us(value vn) {
  nap(Long_val(vn));
  return Val_unit;
}

/* bw_settle_held_us n: the "settle" doze of bw-sig3-busy-c-settle: an
 * absolute-deadline clock_nanosleep of n microseconds, resumed after a
 * signal's EINTR, KEEPING the OCaml runtime. */
CAMLprim value bw_settle_held_us(value vn) {
  intnat n = Long_val(vn);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (n < 0) n = 0;
  ts.tv_sec += n / 1000000;
  ts.tv_nsec += (n % 1000000) * 1000;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
  return Val_unit;
}

/* bw_spin_free_us n: burns the CPU for n microseconds without the runtime. */
CAMLprim value bw_spin_free_us(value vn) {
  int64_t until;
  caml_enter_blocking_section();
  until = mono_us() + Long_val(vn);
  while (mono_us() < until) {
  }
  caml_leave_blocking_section();
  return Val_unit;
}

/* bw_wait_released_first_us n: a whole wait in C (bw-ok-busy-release-first).
 * It lets the OCaml runtime go first, then calls rig_unblock right before
 * its blocking step (a nap of n microseconds), takes the runtime back, runs
 * the OCaml handlers of the signals that came meanwhile while they are
 * still unblocked (so that they run inside the wait, and an exception one
 * raises ends the wait), and calls rig_block right after, on both paths. */
CAMLprim value bw_wait_released_first_us(value vn) {
  intnat n = Long_val(vn);
  value res;
  caml_enter_blocking_section();
  rig_unblock();
  nap(n);
  caml_leave_blocking_section();
  res = caml_process_pending_actions_exn();
  rig_block();
  if (Is_exception_result(res)) caml_raise(Extract_exception(res));
  return Val_unit;
}
