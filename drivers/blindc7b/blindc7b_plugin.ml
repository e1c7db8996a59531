(* Loading blindc7b.cmxs registers every c7b-* driver, each with the
   certification material beyond its kit (scratch_functions,
   refused_launch). *)
let () =
  List.iter (fun (_, p) -> Rig_edge_registry.register ~more:Blindc7b.kit_more p) Blindc7b.drivers
