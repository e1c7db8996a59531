(* broken-sleep-overstays: sleep waits with a timeout of its own (3 s) and
   ignores still_ms.  Breaks TIME-4: sleep must return, or raise Fault, at
   the latest after still_ms milliseconds. *)
module D = struct
  include Hostmem.D

  let sleep d ~seen ~still_ms:_ = Hostmem.D.sleep d ~seen ~still_ms:3000
end

let name = "broken-sleep-overstays"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
