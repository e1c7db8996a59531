/* A blocking call that keeps the OCaml runtime: what a broken wait step
 * does (SIG-3), for the edge's test of time_in_waits. */
#include <time.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include "rig_edge.h"

value held_in_waits_nap_held(value ms) {
  struct timespec t = { Long_val(ms) / 1000, (Long_val(ms) % 1000) * 1000000L };
  while (nanosleep(&t, &t) != 0) {
  }
  return Val_unit;
}

/* A C step shaped the other way round, as rig_edge.h allows: the runtime
 * let go first, then rig_unblock, the blocking call, rig_block, and the
 * runtime taken back: conforming, nothing held. */
value held_in_waits_c_step_released(value ms) {
  struct timespec t = { Long_val(ms) / 1000, (Long_val(ms) % 1000) * 1000000L };
  caml_enter_blocking_section();
  rig_unblock();
  while (nanosleep(&t, &t) != 0) {
  }
  rig_block();
  caml_leave_blocking_section();
  return Val_unit;
}
