/* blindnj: a monotonic clock and three ways to pass time: a nap that
 * releases the OCaml runtime, a nap that keeps it, and a busy spin that
 * releases it. */
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
#include <caml/threads.h>

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

CAMLprim value nj_now_us(value unit) {
  (void)unit;
  return Val_long((intnat)mono_us());
}

static void nap(intnat n) {
  if (n < 0) n = 0;
  struct timespec ts = { n / 1000000, (n % 1000000) * 1000 };
  nanosleep(&ts, NULL);
}

/* nj_nap_us n: sleeps n microseconds without the OCaml runtime. */
CAMLprim value nj_nap_us(value vn) {
  intnat n = Long_val(vn);
  caml_enter_blocking_section();
  nap(n);
  caml_leave_blocking_section();
  return Val_unit;
}

/* nj_nap_held_us n: sleeps n microseconds KEEPING the OCaml runtime. */
CAMLprim value nj_nap_held_us(value vn) {
  nap(Long_val(vn));
  return Val_unit;
}

/* nj_spin_free_us n: burns the CPU for n microseconds without the runtime. */
CAMLprim value nj_spin_free_us(value vn) {
  int64_t until;
  caml_enter_blocking_section();
  until = mono_us() + Long_val(vn);
  while (mono_us() < until) {
  }
  caml_leave_blocking_section();
  return Val_unit;
}
