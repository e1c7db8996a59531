(* Loading blindmb.cmxs registers every mb-* driver, each with hostmem's
   material beyond its kit, as hostmem's own plugin registers it; the bus
   function and its agent are in each package's kit. *)
let () =
  List.iter
    (fun (_, _, p) -> Rig_edge_registry.register ~more:Hostmem.kit_more p)
    Blindmb.packages
