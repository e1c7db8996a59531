/* blindoc's one C helper: a short delay for the polling paths of some
 * oc-* drivers.  "Too short to be worth releasing the runtime": it keeps
 * the OCaml runtime while it sleeps (no caml_enter_blocking_section).  A
 * signal may cut it short (EINTR): the caller polls again. */
#define _GNU_SOURCE
#include <time.h>
#define CAML_NAME_SPACE
#include <caml/mlvalues.h>

value oc_udelay(value us) {
  long n = Long_val(us);
  struct timespec ts = { n / 1000000, (n % 1000000) * 1000 };
  nanosleep(&ts, NULL);
  return Val_unit;
}
