(* rig-conform selftest: every mutant flagged with exactly its clause, the
   conforming pair clean across seeds; see cmd_selftest.mli. *)

let main args =
  let o = Cli.parse_opts args ~allowed:[ "--seeds"; "-j"; "--timeout"; "--report"; "--no-color"; "--mutant" ] in
  (* A mutant's verdict is the clause it is caught with: model.driver's
     shrinking of its counterexample (30 s at most, the same clause) is for
     a person reading one, and was most of the self-test's time (34 mutants
     are caught there).  Set before the first child, which the children's
     zygote is started from. *)
  if Sys.getenv_opt "RIG_CONFORM_SHRINK_SECONDS" = None then Unix.putenv "RIG_CONFORM_SHRINK_SECONDS" "0";
  let drv = Session.driver_info_or_exit o in
  let seeds = if o.seeds = [] then List.init 20 (fun i -> i + 1) else o.seeds in
  (* --mutant M: that mutant's runs alone, to see one verdict again. *)
  let mutants =
    match Session.chosen_mutant ~cmd:"selftest" o drv with Some one -> [ one ] | None -> Session.mutants o drv
  in
  let report = Option.value o.report ~default:"out/selftest/report.json" in
  Cli.writable_or_exit ~what:"report" report;
  let checked = List.sort_uniq compare (List.concat_map (fun (c : Case.t) -> c.clauses) (Known_cases.all_cases ())) in
  let without_mutant = if o.mutant <> None then [] else List.filter (fun id -> not (List.exists (fun (_, c, _, _) -> c = id) mutants)) checked in
  let conforming_jobs =
    if o.mutant <> None then [] else
    List.concat_map (fun case -> List.map (fun seed -> { Runner.case; seed; driver = o.driver; plugins = o.plugins; mutant = None; inject = None; census = false }) seeds) (Known_cases.all_cases ())
  in
  let mutant_jobs =
    List.concat_map
      (fun (m, clause, _, _) ->
        let job ?inject case = { Runner.case; seed = 1; driver = o.driver; plugins = o.plugins; mutant = Some m; inject; census = false } in
        match List.find_opt (fun (m', _, _) -> m' = m) Rig_mutant.under_fault with
        | Some (_, case, inject) ->
            let case = List.find (fun (c : Case.t) -> c.name = case) (Known_cases.all_cases ()) in
            [ job ~inject:(Result.get_ok (Injection.of_string inject)) case ]
        | None -> List.map (fun case -> job case) (List.filter (fun (c : Case.t) -> List.mem clause c.clauses) (Known_cases.all_cases ())))
      mutants
  in
  (* The conforming pair's runs mostly wait and rarely find anything: they
     run beyond -j while the cores idle (a finding of a crowded run runs
     again alone).  A mutant's runs find something nearly every time, each
     of which would run again: they run at -j, after. *)
  let conforming = Session.run_jobs o ~what:"selftest (conforming pair)" conforming_jobs in
  let mutant_results = Session.run_jobs ~crowd:false o ~what:"selftest (mutants)" mutant_jobs in
  let conforming_flagged = Report.flagged conforming in
  let rows =
    List.map
      (fun (m, clause, what, side) ->
        let mine = List.filter (fun (r : Runner.result) -> r.job.mutant = Some m) mutant_results in
        let flagged = Report.flagged mine in
        let caught = flagged = [ clause ] in
        (m, clause, what, side, caught, flagged, mine))
      mutants
  in
  let ok_mutants = List.for_all (fun (_, _, _, _, c, _, _) -> c) rows in
  List.iter
    (fun (m, clause, _, side, caught, flagged, mine) ->
      Printf.printf "%-8s %-26s %-12s %s%s\n" clause m side
        (if caught then "caught" else if mine = [] then "NOT RUN" else "MISSED")
        (if caught then "" else Printf.sprintf " (flagged: %s)" (String.concat "," flagged)))
    rows;
  Printf.printf "conforming pair: %d runs over %d seeds, flagged: %s\n" (List.length conforming) (List.length seeds)
    (if conforming_flagged = [] then "nothing" else String.concat "," conforming_flagged);
  List.iter (fun id -> Printf.printf "clause %s is checked but no mutant proves it\n" id) without_mutant;
  List.iter
    (fun (r : Runner.result) ->
      match r.outcome with
      | Findings (_ :: _) | Crashed _ | Crashed_once _ | Timed_out _ | Hung _ | Blocked _ -> Printf.printf "  conforming failure: %s\n" (Runner.replay r.job)
      | _ -> ())
    conforming;
  let row_json (m, clause, what, side, caught, flagged, _) =
    Printf.sprintf "    {\"clause\": %s, \"mutant\": %s, \"side\": %s, \"breaks\": %s, \"caught\": %b, \"flagged\": [%s]}"
      (Report.json_string clause) (Report.json_string m) (Report.json_string side) (Report.json_string what) caught
      (String.concat ", " (List.map Report.json_string flagged))
  in
  let dir = Filename.dirname report in
  ignore (Sys.command (Printf.sprintf "mkdir -p %s" (Filename.quote dir)));
  Out_channel.with_open_bin report (fun oc ->
      Printf.fprintf oc
        "{\n  \"format\": \"rig-conform-selftest/1\",\n  \"driver\": %s,\n  \"conforming\": {\"seeds\": %d, \"runs\": %d, \"flagged\": [%s]},\n  \"unproven_clauses\": [%s],\n  \"mutants\": [\n%s\n  ]\n}\n"
        (Report.json_string o.driver) (List.length seeds) (List.length conforming)
        (String.concat ", " (List.map Report.json_string conforming_flagged))
        (String.concat ", " (List.map Report.json_string without_mutant))
        (String.concat ",\n" (List.map row_json rows)));
  Printf.printf "report: %s\n" report;
  Session.exit_if_interrupted ();
  if not (ok_mutants && conforming_flagged = [] && without_mutant = []) then exit 1

