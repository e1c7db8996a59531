(* broken-lock-cleanup-late: alloc serialises on a mutex of the driver's own,
   counted (rig_hold before the take, rig_give after the give) and taken by
   hand, so that a failed alloc is noted in the driver's log while the
   table is still its own.  On the raise, the handler notes the failure (an
   allocation) before it gives the mutex back: an asynchronous exception
   that lands there leaves the mutex taken.  Breaks ASYNC-2: a driver gives
   each lock back first in both the return and the raise, as Mutex.protect
   does. *)
module Prim = Rig_edge_primitives

module D = struct
  include Hostmem.D

  let table = Mutex.create ()
  let failures = ref []

  let alloc d m n =
    Prim.hold ();
    Mutex.lock table;
    match Hostmem.D.alloc d m n with
    | r ->
        Mutex.unlock table;
        Prim.give ();
        r
    | exception e ->
        failures := Printexc.to_string e :: !failures;
        Mutex.unlock table;
        Prim.give ();
        raise e
end

let name = "broken-lock-cleanup-late"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
