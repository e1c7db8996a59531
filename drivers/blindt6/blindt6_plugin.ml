(* Loading blindt6.cmxs registers every t6-* driver. *)
let () = List.iter Rig_edge_registry.register Blindt6.packages
