(* Loading blindfn.cmxs registers every fn-* driver (Blindfn.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blindfn.kit_more p) Blindfn.all
