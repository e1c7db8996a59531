(* Loading blindoc.cmxs registers every oc-* driver (Blindoc.all), each
   with hostmem's kit and kit_more. *)
let () = List.iter (fun p -> Rig_edge_registry.register ~more:Blindoc.kit_more p) Blindoc.all
