(* ldload [blindld.cmxs]: loads the plugin and lists what it registered. *)
let () =
  let plugin =
    if Array.length Sys.argv > 1 then Sys.argv.(1)
    else Filename.concat (Filename.dirname (Filename.dirname Sys.executable_name)) "blindld.cmxs"
  in
  (try Dynlink.loadfile plugin
   with Dynlink.Error e ->
     prerr_endline ("ldload: " ^ Dynlink.error_message e);
     exit 2);
  let names = Rig_edge_registry.names () in
  List.iter
    (fun n ->
      match Rig_edge_registry.find n with
      | Some (module P : Rig_edge.Package) ->
          Printf.printf "%-30s kit.spin=%s refused_launch=%b\n" P.name
            (Option.value ~default:"-" P.kit.spin)
            (Rig_edge.refused_launch (Rig_edge_registry.more n) <> None)
      | None -> ())
    names;
  Printf.printf "%d drivers registered\n" (List.length names)
