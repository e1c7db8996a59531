(* broken-grow-unused: grow answers Grown and makes nothing (a stub left in
   place), so room answers RIG_GROW again for the same parts.  Breaks
   QUEUE-2. *)
module D = struct
  include Hostmem.D

  let grow _ = Rig_edge.Grown
end

let name = "broken-grow-unused"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
