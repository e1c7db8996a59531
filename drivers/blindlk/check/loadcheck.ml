let () =
  Dynlink.loadfile Sys.argv.(1);
  let names = Rig_edge_registry.names () in
  Printf.printf "%d drivers registered: %s\n" (List.length names) (String.concat " " names)
