(* Loading blindrf.cmxs registers every rf-* driver. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register p) Blindrf.drivers
