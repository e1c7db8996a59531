(* Loading blindld.cmxs registers every ld-* driver (Blindld.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blindld.kit_more p) Blindld.all
