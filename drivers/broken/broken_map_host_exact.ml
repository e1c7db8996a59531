(* broken-map-host-exact: map_host maps exactly the n bytes asked, not the
   whole pages that hold them, so work on the last word faults.  Breaks
   MEM-7. *)
module D = struct
  include Hostmem.D

  let map_host = Hostmem.map
end

let name = "broken-map-host-exact"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
