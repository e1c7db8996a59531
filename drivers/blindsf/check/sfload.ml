(* sfload PLUGIN: loads the plugin and lists the drivers it registered. *)
let () =
  Dynlink.allow_unsafe_modules true;
  (try Dynlink.loadfile Sys.argv.(1)
   with Dynlink.Error e -> prerr_endline (Dynlink.error_message e); exit 1);
  List.iter
    (fun n ->
      Printf.printf "%s refused_launch=%s\n" n
        (Option.fold ~none:"-" ~some:snd (Rig_edge.refused_launch (Rig_edge_registry.more n))))
    (Rig_edge_registry.names ())
