(* Loading blindc7r.cmxs registers every c7r-* driver, with hostmem's
   scratch_functions (Rig_edge.kit_more, added after the set was written:
   its images are hostmem's). *)
let () =
  let more = Rig_edge.kit_more ?scratch_functions:(Rig_edge.scratch_functions Hostmem.kit_more) () in
  List.iter (fun (_, p) -> Rig_edge_registry.register ~more p) Blindc7r.drivers
