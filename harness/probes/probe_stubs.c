/* C side of the probes: a nap that releases the OCaml runtime and says
   exactly how long the thread slept in it (probe.SIG-3's counter). */

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <time.h>

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t); /* the clock of Unix.gettimeofday */
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* rig_probe_nap(us, span): sleeps us microseconds with the runtime
   released, and stores in span (a float array of 2) when the sleep began
   and ended, in ms, both taken while the runtime is released: what follows
   the end, until the call returns, is the wait for the runtime.  Allocates
   nothing. */
value rig_probe_nap(value us, value span)
{
  long n = Long_val(us);
  struct timespec req = { n / 1000000, (n % 1000000) * 1000 };
  double began, ended;
  caml_enter_blocking_section();
  began = now_ms();
  nanosleep(&req, NULL); /* a signal may end it early: the span says so */
  ended = now_ms();
  caml_leave_blocking_section();
  Store_double_flat_field(span, 0, began);
  Store_double_flat_field(span, 1, ended);
  return Val_unit;
}
