/* blindtm: the C side the tm-* drivers add to hostmem: a monotonic clock
 * and a nap.
 *
 * tm_nap_ms is a wait's blocking step (called only inside
 * Rig_edge_primitives.wait): it releases the OCaml runtime while it blocks
 * (SIG-3), as a blocking stub does, and ends early on a signal (EINTR), so
 * that rig_block runs the signal's handler at once.  No lock, no state. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

/* Milliseconds of CLOCK_MONOTONIC: no allocation, no lock. */
CAMLprim value tm_now_ms(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((intnat)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* Blocks for ms milliseconds (or until a signal comes), runtime released. */
CAMLprim value tm_nap_ms(value vms) {
  CAMLparam1(vms);
  intnat ms = Long_val(vms);
  if (ms > 0) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    caml_enter_blocking_section();
    (void)nanosleep(&ts, NULL);
    caml_leave_blocking_section();
  }
  CAMLreturn(Val_unit);
}
