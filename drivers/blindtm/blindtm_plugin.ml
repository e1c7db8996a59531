(* Loading blindtm.cmxs registers every tm-* driver. *)
let () = List.iter Rig_edge_registry.register Blindtm.packages
