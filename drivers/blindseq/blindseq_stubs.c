/* blindseq: the one blocking step the blindseq drivers need, releasing the
 * OCaml runtime while it blocks (SIG-3), as a wait's step must. */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
#include <caml/threads.h>

/* blindseq_nap ms: sleeps ms milliseconds. */
value blindseq_nap(value vms) {
  long ms = Long_val(vms);
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  caml_enter_blocking_section();
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  caml_leave_blocking_section();
  return Val_unit;
}
