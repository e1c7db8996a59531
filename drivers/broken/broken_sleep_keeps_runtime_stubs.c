/* broken-sleep-keeps-runtime's blocking step: polls the device's word until
 * it differs from seen or ms pass, holding the OCaml runtime throughout
 * (the bug: no caml_enter_blocking_section).  The device is the first field
 * of hostmem's D.t record; the word is read with hostmem's own hm_signaled. */
#define _GNU_SOURCE
#include <time.h>

#include <caml/mlvalues.h>

extern value hm_signaled(value);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

value broken_skr_wait(value d, value seen, value ms) {
  value dev = Field(d, 0);
  double deadline = now_ms() + Long_val(ms);
  struct timespec slice = {0, 200000};
  while (hm_signaled(dev) == seen && now_ms() < deadline) nanosleep(&slice, NULL);
  return Val_unit;
}
