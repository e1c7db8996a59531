(* broken-stop-forgets: stop aborts the device (Hostmem.abort, the library's
   watchdog reset) instead of stopping it, so the word never gets the last
   value given to submit.  Breaks STOP-3. *)
module D = struct
  include Hostmem.D

  let stop d ~fault:_ = Hostmem.abort d
end

let name = "broken-stop-forgets"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
