/* blindcs: a monotonic clock and the ways the cs-* drivers pass time: a nap
 * that releases the OCaml runtime, a nap that keeps it, and a nap to an
 * absolute deadline (computed by the caller) that releases it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
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

CAMLprim value cs_now_us(value unit) {
  (void)unit;
  return Val_long((intnat)mono_us());
}

/* cs_nap_us n: sleeps n microseconds without the OCaml runtime. */
CAMLprim value cs_nap_us(value vn) {
  intnat n = Long_val(vn);
  caml_enter_blocking_section();
  nap(n);
  caml_leave_blocking_section();
  return Val_unit;
}

/* cs_nap_held_us n: sleeps n microseconds KEEPING the OCaml runtime. */
CAMLprim value cs_nap_held_us(value vn) {
  nap(Long_val(vn));
  return Val_unit;
}

/* cs_nap_until_us t: sleeps until the CLOCK_MONOTONIC instant t (in
 * microseconds, as cs_now_us tells it) without the OCaml runtime; returns
 * at once if t has passed, and early on a signal (EINTR), so that the wait
 * around it runs the signal's handler. */
CAMLprim value cs_nap_until_us(value vt) {
  int64_t t = Long_val(vt);
  struct timespec ts;
  if (t < 0) t = 0;
  ts.tv_sec = t / 1000000;
  ts.tv_nsec = (t % 1000000) * 1000;
  caml_enter_blocking_section();
  clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  caml_leave_blocking_section();
  return Val_unit;
}
