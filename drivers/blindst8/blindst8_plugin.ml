(* Loading blindst8.cmxs registers every st8-* driver. *)
let () =
  List.iter (fun (_, p) -> Rig_edge_registry.register ~more:Hostmem.kit_more p) Blindst8.drivers
