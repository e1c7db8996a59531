(* Loading blindlq.cmxs registers every lq-* driver (Blindlq.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blindlq.kit_more p) Blindlq.all
