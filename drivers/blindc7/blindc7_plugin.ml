(* Loading blindc7.cmxs registers every c7-* driver. *)
let () = List.iter Rig_edge_registry.register Blindc7.packages
