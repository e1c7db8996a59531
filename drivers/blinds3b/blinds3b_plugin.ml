(* Loading blinds3b.cmxs registers every s3b-* driver. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register p) Blinds3b.drivers
