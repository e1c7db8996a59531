(* Loading blindc7r.cmxs registers every c7r-* driver. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register p) Blindc7r.drivers
