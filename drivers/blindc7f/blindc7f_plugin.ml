(* Loading blindc7f.cmxs registers every c7f-* driver. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register p) Blindc7f.drivers
