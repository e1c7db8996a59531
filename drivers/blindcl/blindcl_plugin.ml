(* Loading blindcl.cmxs registers every cl-* driver, with hostmem's
   kit_more (its images are hostmem's format). *)
let () =
  List.iter
    (fun (_, _, _, p) -> Rig_edge_registry.register ~more:Blindcl.kit_more p)
    Blindcl.packages
