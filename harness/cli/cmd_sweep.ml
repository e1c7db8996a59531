(* rig-conform sweep and async-sweep; see cmd_sweep.mli. *)

let sweep args =
  let o =
    Cli.parse_opts args
      ~allowed:[ "--driver"; "--plugin"; "--only"; "-j"; "--timeout"; "--report"; "--shard"; "--random"; "--seed"; "--batch"; "--no-color" ]
  in
  let drv = Session.driver_info_or_exit o in
  if not drv.fault_injection then Cli.usage_error "driver %S has no fault injection to sweep with" o.driver;
  let report = Option.value o.report ~default:"out/sweep/report.json" in
  Cli.writable_or_exit ~what:"report" report;
  let selected =
    if o.only = [] then Catalog.all
    else match Catalog.select o.only with Ok l -> l | Error p -> Cli.usage_error "--only: %S names no clause of the catalog" p
  in
  let cases = Known_cases.rig_cases_of selected in
  let results = Fault_sweep.sweep_runs ~with_census:true o cases in
  let failures = Fault_sweep.report_sweep o ~cases ~selected ~report results in
  Printf.printf "%d runs (%d with a failure injected), %d failing; report: %s\n" (List.length results)
    (List.length (List.filter (fun (r : Runner.result) -> r.job.inject <> None) results))
    failures report;
  Session.exit_if_interrupted ();
  if failures > 0 then exit 1

let async_batch = 16

let async_sweep args =
  let max_alloc = ref 20 in
  let rec strip = function
    | "--max-alloc" :: v :: rest -> max_alloc := Cli.positive "--max-alloc" v; strip rest
    | a :: rest -> a :: strip rest
    | [] -> []
  in
  let o =
    Cli.parse_opts (strip args)
      ~allowed:[ "--driver"; "--plugin"; "--case"; "-j"; "--timeout"; "--report"; "--shard"; "--batch"; "--mutant"; "--no-color" ]
  in
  (* --mutant M: the sweep of a mutant (of the rig, the edge or the driver),
     to see which points catch it. *)
  ignore (Session.chosen_mutant ~cmd:"async-sweep" o (Session.driver_info_or_exit o));
  let report = Option.value o.report ~default:"out/async-sweep/report.json" in
  Cli.writable_or_exit ~what:"report" report;
  let cases =
    match o.case with
    | None -> Registry.async_cases
    | Some n -> (
        match List.filter (fun (c : Case.t) -> c.name = n || c.name = "async." ^ n) Registry.async_cases with
        | [] -> Cli.usage_error "no async case %S (see rig-conform list)" n
        | l -> l)
  in
  let selected = List.filter (fun (k : Catalog.clause) -> List.mem k.id (List.concat_map (fun (c : Case.t) -> c.clauses) cases)) Catalog.all in
  let job = Fault_sweep.clean_job o in
  let t0 = Unix.gettimeofday () in
  Printf.printf "async sweep of driver %s: counting the allocations of %d scenarios\n%!" o.driver (List.length cases);
  (* The census runs count; the points are tried below, each alone. *)
  let census = Session.run_jobs o ~what:"census" (List.map (fun c -> { (job c) with census = true }) cases) in
  let points =
    List.concat_map
      (fun (r : Runner.result) ->
        List.map
          (fun (p : Async_inject.target) ->
            let inject = match p.on with Allocation -> Injection.async | Wait -> Injection.wait in
            job ~inject:(inject ~fn:p.fn ~nth:p.nth ~at:p.at) r.job.case)
          (Async_cases.points_of_census ~max_alloc:!max_alloc r.calls))
      census
    |> Session.in_shard o
  in
  List.iter
    (fun (r : Runner.result) ->
      let waits, allocs = List.partition (fun (k, _) -> String.starts_with ~prefix:"wait:" k) r.calls in
      let total l = List.fold_left (fun a (_, n) -> a + n) 0 l in
      let swept = List.fold_left (fun a (_, n) -> a + min n !max_alloc) 0 r.calls in
      Printf.printf "  %-32s %3d calls that allocate, %5d allocations, %3d waits, %5d points\n" r.job.case.name
        (List.length allocs) (total allocs) (total waits) swept)
    census;
  Printf.printf "async sweep: %d points (at most %d per call)%s\n%!" (List.length points) !max_alloc
    (match o.shard with Some (i, n) -> Printf.sprintf " (shard %d/%d)" i n | None -> "");
  (* Points of one case share a child, [async_batch] at a time (--batch): a
     process per point is most of a point's cost. *)
  let batch = match o.batch with Some n -> fun _ -> n | None -> fun _ -> async_batch in
  let results = Session.in_shard o census @ Session.run_jobs ~batch o ~what:"async sweep" points in
  let failures = Fault_sweep.report_sweep o ~cases ~selected ~report results in
  Printf.printf "%d runs (%d with an asynchronous exception injected), %d failing, %.1f s; report: %s\n" (List.length results)
    (List.length (List.filter (fun (r : Runner.result) -> r.job.inject <> None) results))
    failures (Unix.gettimeofday () -. t0) report;
  Session.exit_if_interrupted ();
  if failures > 0 then exit 1

