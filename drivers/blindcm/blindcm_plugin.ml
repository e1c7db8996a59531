(* Loading blindcm.cmxs registers every cm-* driver. *)
let () = List.iter Rig_edge_registry.register Blindcm.packages
