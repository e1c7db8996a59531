(* Loading blindfx.cmxs registers every fx-* driver, with hostmem's
   kit_more (its images are hostmem's format). *)
let () =
  List.iter (fun (_, _, p) -> Rig_edge_registry.register ~more:Hostmem.kit_more p) Blindfx.packages
