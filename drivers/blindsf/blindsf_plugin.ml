(* Loading blindsf.cmxs registers every sf-* driver, each with its
   refused_launch. *)
let () =
  List.iter (fun (name, p) -> Rig_edge_registry.register ~more:(Blindsf.kit_more name) p) Blindsf.drivers
