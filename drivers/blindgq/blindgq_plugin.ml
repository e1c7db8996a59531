(* Loading blindgq.cmxs registers every gq-* driver (and nothing else:
   hostmem's own registration is left out of the plugin).  Each passes
   hostmem's kit_more: the drivers take hostmem's images. *)
let () =
  List.iter
    (fun (p : Blindgq.driver) -> Rig_edge_registry.register ~more:Hostmem.kit_more p.package)
    Blindgq.all
