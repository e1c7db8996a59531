(* Loading blinda2.cmxs registers every a2-* driver (Blinda2.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blinda2.kit_more p) Blinda2.all
