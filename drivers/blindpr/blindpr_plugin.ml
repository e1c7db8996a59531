(* Loading blindpr.cmxs registers every pr-* driver. *)
let () = List.iter Rig_edge_registry.register Blindpr.packages
