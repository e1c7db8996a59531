(* Loading blindfw.cmxs registers every fw-* driver, with hostmem's
   kit_more (its images are hostmem's format). *)
let () =
  List.iter
    (fun (_, _, _, p) -> Rig_edge_registry.register ~more:Blindfw.kit_more p)
    Blindfw.packages
