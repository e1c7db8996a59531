/* schedule_stubs.c: the OCaml binding of the room/grow schedule interpreter
 * (room_grow_schedule.h) for the certifier's `schedule` statement.  The
 * input is copied out of the OCaml heap first; the run holds the runtime
 * lock (it is short: at most 600 steps, and no step waits). */
#include <stdlib.h>
#include <string.h>

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#include "room_grow_schedule.h"

/* bytes -> mutant -> trace -> (int * string * string) option, or Failure
 * when the driver could not be set up.  Some (step, clause, message) is a
 * violation. */
value caml_rig_schedule_run(value vinput, value vmutant, value vtrace) {
  CAMLparam3(vinput, vmutant, vtrace);
  CAMLlocal4(r, clause, msg, tuple);
  size_t len = caml_string_length(vinput);
  uint8_t *in = malloc(len ? len : 1);
  if (!in) caml_raise_out_of_memory();
  memcpy(in, String_val(vinput), len);
  struct rig_schedule_options opt = {0};
  struct rig_schedule_result res;
  opt.mutant = Int_val(vmutant);
  opt.trace = Bool_val(vtrace);
  int rc = rig_schedule_run(in, len, &opt, &res);
  free(in);
  if (rc != 0) caml_failwith(res.message);
  if (!res.violated) CAMLreturn(Val_none);
  clause = caml_copy_string(res.clause);
  msg = caml_copy_string(res.message);
  tuple = caml_alloc_small(3, 0);
  Field(tuple, 0) = Val_int(res.step);
  Field(tuple, 1) = clause;
  Field(tuple, 2) = msg;
  r = caml_alloc_some(tuple);
  CAMLreturn(r);
}

/* string -> int (-1: unknown) */
value caml_rig_schedule_mutant_code(value vname) {
  return Val_int(rig_schedule_mutant_code(String_val(vname)));
}

/* int -> string option */
value caml_rig_schedule_mutant_name(value vi) {
  CAMLparam1(vi);
  CAMLlocal1(s);
  const char *n = rig_schedule_mutant_name(Int_val(vi));
  if (!n) CAMLreturn(Val_none);
  s = caml_copy_string(n);
  CAMLreturn(caml_alloc_some(s));
}
