(* Loading blindlk.cmxs registers every lk-* driver. *)
let () =
  List.iter
    (fun (_, _, _, (module M : Blindlk.S)) ->
      Rig_edge_registry.register ~more:Blindlk.kit_more (module M : Rig_edge.Package))
    Blindlk.packages
