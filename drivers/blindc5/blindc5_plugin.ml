(* Loading blindc5.cmxs registers every c5-* driver. *)
let () = List.iter Rig_edge_registry.register Blindc5.packages
