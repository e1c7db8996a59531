(* c7fload PLUGIN: loads the plugin and prints the names it registered. *)
let () =
  Dynlink.loadfile Sys.argv.(1);
  let names = Rig_edge_registry.names () in
  List.iter print_endline names;
  Printf.printf "c7fload: %d drivers registered\n" (List.length names)
