(* Loading blindl3.cmxs registers every l3-* driver. *)
let () = List.iter Rig_edge_registry.register Blindl3.packages
