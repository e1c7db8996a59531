(* Loading blindsr.cmxs registers every sr-* driver (Blindsr.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blindsr.kit_more p) Blindsr.all
