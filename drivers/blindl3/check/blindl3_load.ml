(* Loads the plugin (argument 1) as a plugin host does and prints the
   driver names it registered, one a line. *)
let () =
  Dynlink.allow_unsafe_modules true;
  (try Dynlink.loadfile Sys.argv.(1)
   with Dynlink.Error e ->
     prerr_endline (Dynlink.error_message e);
     exit 2);
  List.iter print_endline (Rig_edge_registry.names ())
