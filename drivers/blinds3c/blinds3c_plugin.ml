(* Loading blinds3c.cmxs registers every s3c-* driver. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register ~more:Blinds3c.kit_more p) Blinds3c.drivers
