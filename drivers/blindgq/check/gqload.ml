(* gqload PLUGIN: loads a driver plugin and prints what it registered. *)
let () =
  let before = Rig_edge_registry.names () in
  Dynlink.loadfile Sys.argv.(1);
  let added = List.filter (fun n -> not (List.mem n before)) (Rig_edge_registry.names ()) in
  List.iter print_endline added;
  Printf.printf "%d registered\n" (List.length added)
