(* Loading blinds3.cmxs registers every s3-* driver. *)
let () = List.iter Rig_edge_registry.register Blinds3.packages
