(* Loading blindhw.cmxs registers every hw-* driver, with hostmem's
   certification material beyond its kit (their images are hostmem's). *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Hostmem.kit_more p) Blindhw.packages
