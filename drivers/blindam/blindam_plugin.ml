(* Loading blindam.cmxs registers every am-* driver (Blindam.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blindam.kit_more p) Blindam.all
