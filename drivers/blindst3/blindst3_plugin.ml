(* Loading blindst3.cmxs registers every st3-* driver. *)
let () = List.iter Rig_edge_registry.register Blindst3.packages
