(* broken-entry-remakes: entry compiles the function at every call (no cache
   of what it made): a new handle and new scratch memory each time.  Breaks
   CODE-2: a second call for f must make nothing new. *)
module D = struct
  include Hostmem.D

  let entry = Hostmem.compile
end

let name = "broken-entry-remakes"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
