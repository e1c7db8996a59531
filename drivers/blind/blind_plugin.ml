(* Loading blind.cmxs registers every blind-* driver. *)
let () = List.iter Rig_edge_registry.register Blind.packages
