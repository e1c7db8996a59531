(* blinds3d_plugin: loading blinds3d.cmxs (rig-conform --plugin) registers
   every s3d-* driver of Blinds3d.drivers, each with hostmem's kit_more. *)
let () = List.iter (fun (_, p) -> Rig_edge_registry.register ~more:Blinds3d.kit_more p) Blinds3d.drivers
