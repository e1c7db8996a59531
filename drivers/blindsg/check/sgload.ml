(* sgload PLUGIN: loads a plugin as rig-conform --plugin does and lists the
   drivers it registered (only sg-* ones for blindsg.cmxs). *)
let () =
  let before = Rig_edge_registry.names () in
  Dynlink.loadfile Sys.argv.(1);
  let added = List.filter (fun n -> not (List.mem n before)) (Rig_edge_registry.names ()) in
  List.iter print_endline added;
  Printf.printf "%d drivers registered%s\n" (List.length added)
    (if List.for_all (fun n -> String.length n > 3 && String.sub n 0 3 = "sg-") added then ", all sg-*" else ", NOT all sg-*")
