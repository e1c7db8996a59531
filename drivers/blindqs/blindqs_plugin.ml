(* Loading blindqs.cmxs registers every qs-* driver (Blindqs.drivers), each
   with hostmem's material beyond its kit (as hostmem_plugin.ml does). *)
let () =
  List.iter
    (fun (module Q : Blindqs.QS) ->
      Rig_edge_registry.register ~more:Blindqs.kit_more (module Q : Rig_edge.Package))
    Blindqs.drivers
