(* Loading blindseq.cmxs registers every bq-* driver. *)
let () = List.iter Rig_edge_registry.register Blindseq.packages
