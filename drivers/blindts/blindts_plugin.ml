(* Loading blindts.cmxs registers every ts-* driver (and nothing else),
   each with hostmem's kit_more, as hostmem's own plugin does. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Hostmem.kit_more p) Blindts.packages
