(* Loading blindsg.cmxs (rig-conform --plugin blindsg.cmxs) registers every
   sg-* driver, each with hostmem's kit_more (its images are hostmem's). *)
let () = List.iter (fun (_, _, p) -> Rig_edge_registry.register ~more:Hostmem.kit_more p) Blindsg.all
