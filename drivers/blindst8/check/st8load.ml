(* st8load PLUGIN: loads the plugin and lists the drivers it registered. *)
let () =
  Dynlink.loadfile Sys.argv.(1);
  List.iter print_endline (Rig_edge_registry.names ())
