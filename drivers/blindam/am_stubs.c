/* blindam's own two stubs, beside hostmem's (hm_*).
 *
 * am_nap_held us: naps [us] microseconds WITHOUT releasing the OCaml
 *   runtime (no caml_enter_blocking_section): the blocking step the broken
 *   am-held-* drivers run inside a wait under their condition (SIG-3).  A
 *   signal that interrupts the nap (EINTR) does not end it.
 * am_now_us (): CLOCK_MONOTONIC in microseconds.
 * Neither allocates nor takes a lock. */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>

value am_nap_held(value vus) {
  long us = Long_val(vus);
  struct timespec t;
  t.tv_sec = us / 1000000;
  t.tv_nsec = (us % 1000000) * 1000;
  while (nanosleep(&t, &t) == -1 && errno == EINTR)
    ;
  return Val_unit;
}

value am_now_us(value unit) {
  (void)unit;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return Val_long((long)t.tv_sec * 1000000L + t.tv_nsec / 1000);
}
