(* rig-conform certify: a verdict per clause for a driver; see cmd_certify.mli. *)

(* certify --list: what would be checked, without running a case: each
   clause with the cases that check it, and what the driver's kit declares
   (a case whose kit item is missing comes out n/a when it runs). *)
let list_clauses (drv : Drivers.info) selected =
  let item key label = match List.assoc_opt key drv.kit with Some true -> label | _ -> label ^ " (none)" in
  Printf.printf "driver %s; kit: image, %s, %s, %s, %s, %s, %s, %s, %s, %s\n" drv.name
    (item "kit.refused_binary" "refused binary") (item "kit.spin" "spin") (item "kit.fault" "fault")
    (item "kit.hang" "hang") (item "kit.scratch" "scratch") (item "kit.bus_function" "bus function")
    (item "kit.bus_agent" "bus agent") (item "kit.refused_launch" "refused launch")
    (item "kit.scratch_functions" "scratch functions");
  (* Cases that need the fake's knobs come out n/a for another driver. *)
  let mark name = if drv.name <> Fake.name && Known_cases.needs_fake name then name ^ "(n/a)" else name in
  if drv.name <> Fake.name then
    print_endline "cases marked (n/a) need the fake driver's knobs: they are n/a for this driver";
  List.iter
    (fun (c : Catalog.clause) ->
      let mine = List.filter (fun (case : Case.t) -> List.mem c.id case.clauses) (Known_cases.all_cases ()) in
      let names = List.map (fun (case : Case.t) -> Report.for_terminal (mark case.name)) mine in
      Printf.printf "%-8s %-6s %s\n" c.id c.side
        (if mine = [] then "unchecked: " ^ Report.why_unchecked c.id else String.concat " " names))
    selected

(* A driver that cannot even be loaded conforms to nothing: every clause
   fails, with how the load failed, and the line that shows it again. *)
let load_failure_lines (o : Cli.opts) why =
  let repro =
    String.concat " "
      (List.map Filename.quote (Sys.executable_name :: "describe" :: List.concat_map (fun p -> [ "--plugin"; p ]) o.plugins))
  in
  List.map
    (fun (c : Catalog.clause) ->
      { Report.clause = c; verdict = Fail; evidence = "the driver could not be loaded: " ^ why ^ "; no case ran"; repro = Some repro })
    Catalog.all

let main args =
  let o =
    Cli.parse_opts args
      ~allowed:
        [ "--driver"; "--plugin"; "--only"; "--seeds"; "--seed"; "-j"; "--timeout"; "--report"; "--junit"; "--markdown";
          "--shard"; "--no-sweep"; "--list"; "--batch"; "--no-color"; "--sequences" ]
  in
  let seeds = if o.seeds = [] then [ 1; 2; 3 ] else o.seeds in
  let report = Option.value o.report ~default:(Filename.concat (Sys.getcwd ()) "out/certify/report.json") in
  (* The model cases' counterexamples go beside the report (the children
     inherit the variable). *)
  if Sys.getenv_opt "RIG_CONFORM_COUNTEREXAMPLES" = None then
    Unix.putenv "RIG_CONFORM_COUNTEREXAMPLES"
      (Filename.concat (Filename.dirname report) (Filename.remove_extension (Filename.basename report) ^ "-counterexamples"));
  let beside ext = Filename.remove_extension report ^ ext in
  let junit = Option.value o.junit ~default:(beside ".xml") in
  let markdown = Option.value o.markdown ~default:(beside ".md") in
  let selected =
    if o.only = [] then Catalog.all
    else match Catalog.select o.only with Ok l -> l | Error p -> Cli.usage_error "--only: %S names no clause of the catalog" p
  in
  (* Bad input is refused before anything runs: the scenarios, the paths. *)
  ignore (Known_cases.all_cases ());
  if not o.list then begin
    Cli.writable_or_exit ~what:"report" report;
    Cli.writable_or_exit ~what:"JUnit report" junit;
    Cli.writable_or_exit ~what:"Markdown report" markdown
  end;
  Session.start ();
  let write ?load_error ~declared lines results =
    Report.write_json ~declared ?load_error report ~driver:o.driver ~seeds ~interrupted:(Session.interrupted () <> None)
      ~runs:results lines;
    Report.write_junit junit ~driver:o.driver lines;
    Report.write_markdown markdown ~driver:o.driver lines;
    Printf.printf "report: %s (JUnit %s, Markdown %s)\n" report junit markdown
  in
  match Session.driver_info o with
  | Error why when o.list -> Printf.eprintf "%s: the driver could not be loaded: %s\n" Cli.me why; exit 1
  | Error why ->
      Printf.printf "certifying driver %s: its plugin could not be loaded\n" o.driver;
      let lines = load_failure_lines o why in
      Report.print_table ~color:o.color lines;
      write ~load_error:why ~declared:[] lines [];
      Session.exit_if_interrupted ();
      exit 1
  | Ok drv ->
      if o.list then (list_clauses drv selected; exit 0);
      let cases = Known_cases.cases_for selected in
      let jobs =
        List.concat_map
          (fun case -> List.map (fun seed -> { Runner.case; seed; driver = o.driver; plugins = o.plugins; mutant = None; inject = None; census = false }) seeds)
          cases
        |> Session.in_shard o
      in
      Printf.printf "certifying driver %s: %d cases x %d seeds, -j %d%s\n%!" o.driver (List.length cases) (List.length seeds) (Cli.jobs o)
        (match o.shard with Some (i, n) -> Printf.sprintf ", shard %d/%d (%d runs)" i n (List.length jobs) | None -> "");
      (* The sweep's points run among the cases, not after them: both
         mostly wait, and each fills the other's idle cores.  Each
         scenario's points are queued as its clean run (the census) ends.
         A clean run counts in no verdict, as the case's own run of seed 1
         (the same run) does, unless it stands for it: a case that hung in
         its clean run first is not run again on any seed (Runner). *)
      let sweeps = drv.fault_injection && o.sweep in
      let results =
        match if sweeps then Fault_sweep.pipelined ~batch_seconds:2.0 o (Known_cases.rig_cases_of selected) else None with
        | Some p ->
            let all = Session.run_jobs ~batch:p.batch ~more:p.more ~limit:p.limit o ~what:"certify" (jobs @ p.census_jobs) in
            let is_census (r : Runner.result) = List.memq r.job p.census_jobs in
            let ran =
              List.filter_map (fun (r : Runner.result) -> if is_census r || r.job.inject <> None then None else Some r.job.case.name) all
            in
            List.filter (fun (r : Runner.result) -> (not (is_census r)) || not (List.mem r.job.case.name ran)) all
        | None ->
            let census = if sweeps then Fault_sweep.census o (Known_cases.rig_cases_of selected) else [] in
            let points, batch = if census = [] then ([], fun _ -> 1) else Fault_sweep.points o census in
            Session.run_jobs ~batch ~limit:(Fault_sweep.point_limit o census) o ~what:"certify" (jobs @ points)
      in
      let lines = Report.verdicts ~cases:(Known_cases.all_cases ()) ~selected results in
      Report.print_table ~color:o.color lines;
      write ~declared:(drv.kit @ [ ("fault_injection", drv.fault_injection) ]) lines results;
      Session.exit_if_interrupted ();
      if List.exists (fun (l : Report.line) -> l.verdict = Fail) lines then exit 1
