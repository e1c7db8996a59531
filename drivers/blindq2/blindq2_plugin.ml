(* Loading blindq2.cmxs registers every q2-* driver. *)
let () = List.iter Rig_edge_registry.register Blindq2.packages
