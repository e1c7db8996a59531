(* Loading blindmc.cmxs registers every mc-* driver, with hostmem's
   kit_more (its images are hostmem's format). *)
let () =
  List.iter
    (fun (_, _, _, p) -> Rig_edge_registry.register ~more:Blindmc.kit_more p)
    Blindmc.packages
