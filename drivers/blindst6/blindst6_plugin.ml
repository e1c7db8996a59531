(* Loading blindst6.cmxs registers every st6-* driver. *)
let () = List.iter Rig_edge_registry.register Blindst6.packages
