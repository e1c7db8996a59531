(* rig-conform list; see cmd_list.mli. *)

let main args =
  let o = Cli.parse_opts args ~allowed:[ "--driver"; "--plugin" ] in
  let drv = Session.driver_info_or_exit o in
  print_endline "cases:";
  List.iter (fun (c : Case.t) -> Printf.printf "  %-32s %s\n" (Report.for_terminal c.name) (String.concat " " c.clauses)) (Known_cases.all_cases ());
  print_endline "mutants of the reference rig:";
  List.iter
    (fun (n, c, w) ->
      let under =
        match List.find_opt (fun (m, _, _) -> m = n) Rig_mutant.under_fault with
        | Some (_, case, inject) -> Printf.sprintf " [under %s --inject %s]" case inject
        | None -> ""
      in
      Printf.printf "  %-26s %-8s %s%s\n" n c w under)
    Rig_mutant.all;
  print_endline "mutants of the edge primitives:";
  List.iter (fun (n, c, w) -> Printf.printf "  %-26s %-8s %s\n" n c w) Rig_edge_primitives.Mutant.all;
  Printf.printf "mutants of driver %s:\n" o.driver;
  List.iter (fun (n, c, w) -> Printf.printf "  %-26s %-8s %s\n" n c w) drv.info_mutants

