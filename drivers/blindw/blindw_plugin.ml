(* Loading blindw.cmxs registers every w-* driver. *)
let () = List.iter Rig_edge_registry.register Blindw.packages
