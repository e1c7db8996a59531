(* qsload: loads a plugin (default: blindqs.cmxs beside ../) as the
   certifier loads one, and lists the drivers it registered: only qs-* ones
   (hostmem's own registration, Hostmem_plugin, is not in the plugin). *)
let () =
  let path = if Array.length Sys.argv > 1 then Sys.argv.(1) else "blindqs.cmxs" in
  (try Dynlink.loadfile (Dynlink.adapt_filename path)
   with Dynlink.Error e ->
     prerr_endline (Dynlink.error_message e);
     exit 2);
  let names = Rig_edge_registry.names () in
  List.iter print_endline names;
  let bad = List.filter (fun n -> String.length n < 3 || String.sub n 0 3 <> "qs-") names in
  Printf.printf "%d driver(s) registered, %d not qs-*\n" (List.length names) (List.length bad);
  exit (if bad = [] && names <> [] then 0 else 1)
