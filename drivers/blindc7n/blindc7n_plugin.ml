(* Loading blindc7n.cmxs registers every c7n-* driver. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register p) Blindc7n.drivers
