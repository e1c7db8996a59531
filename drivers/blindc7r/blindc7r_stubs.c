/* blindc7r: c7r-ok-cstub's commit, the one piece of C of its own.
 *
 * c7r_claim_make dev fn scratch state cell: if the Atomic [state] is 0 (no
 * entry, nothing started), sets it to 1, makes the entry with hostmem's
 * hm_entry (the scratch charged to the device's Device budget), stores its
 * handle into field 0 of [cell], and sets [state] to 2 (0 when hm_entry
 * found no memory: nothing was made).  Answers the handle (0: no memory), or
 * -1 when [state] was not 0 (someone else made or is making it).
 *
 * It allocates nothing in the OCaml heap and runs no OCaml code: no
 * asynchronous exception (a signal's handler, a Gc.Memprof callback) can
 * come between the claim, the reservation and its record, which is the
 * point.  The claim is a compare-and-set, so two domains cannot both make.
 */
#define CAML_NAME_SPACE
#include <caml/memory.h>
#include <caml/mlvalues.h>

/* hostmem's stub (drivers/hostmem/hostmem_stubs.c), linked beside us. */
extern value hm_entry(value dev, value vfn, value vscratch);

CAMLprim value c7r_claim_make(value dev, value vfn, value vscratch, value state, value cell) {
  if (!caml_atomic_cas_field(state, 0, Val_int(0), Val_int(1))) return Val_long(-1);
  value h = hm_entry(dev, vfn, vscratch); /* an immediate: no GC root needed */
  Store_field(cell, 0, h);
  caml_atomic_cas_field(state, 0, Val_int(1), Long_val(h) != 0 ? Val_int(2) : Val_int(0));
  return h;
}
