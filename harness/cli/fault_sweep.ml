(* The fail-nth sweep; see fault_sweep.mli. *)

(* --random N: N of the points, drawn from the seed (--seed, default 1): a
   random fault plan that the same seed draws again. *)
let random_plan (o : Cli.opts) points =
  match o.random with
  | None -> points
  | Some n ->
      let st = Random.State.make [| (match o.seeds with [ s ] -> s | _ -> 1) |] in
      let tagged = List.map (fun p -> (Random.State.bits st, p)) points in
      List.sort compare tagged |> List.filteri (fun i _ -> i < n) |> List.map snd

let clean_job (o : Cli.opts) ?inject case = { Runner.case; seed = 1; driver = o.driver; plugins = o.plugins; mutant = o.mutant; inject; census = false }

let census (o : Cli.opts) cases =
  Printf.printf "sweep of driver %s: counting the calls of %d scenarios\n%!" o.driver (List.length cases);
  Session.run_jobs o ~what:"census" (List.map (fun c -> clean_job o c) cases)

(* Each call a clean run counted, failed in each way the document allows. *)
let points_of (o : Cli.opts) (r : Runner.result) =
  List.concat_map
    (fun (fn, n) ->
      List.concat_map
        (fun kind -> List.init n (fun k -> clean_job o ~inject:{ Injection.fn; nth = k + 1; kind } r.job.case))
        (Injection.kinds_for fn))
    (Injection.swept r.calls)

(* Points of one scenario share a child, as many as its clean run says fit
   in [batch_seconds]: the process per point is most of a quick run. *)
let batch_of ~batch_seconds (o : Cli.opts) census =
  match o.batch with
  | Some n -> fun _ -> n
  | None -> (
      fun (j : Runner.job) ->
        match List.find_opt (fun (r : Runner.result) -> r.job.case.name = j.case.name) census with
        | Some r -> max 1 (min 64 (int_of_float (batch_seconds /. Float.max 0.001 r.seconds)))
        | None -> 1)

let points ?(batch_seconds = 2.0) (o : Cli.opts) census =
  let points = List.concat_map (points_of o) census |> random_plan o |> Session.in_shard o in
  Printf.printf "sweep: %d injection points%s\n%!" (List.length points)
    (match o.shard with Some (i, n) -> Printf.sprintf " (shard %d/%d)" i n | None -> "");
  (points, batch_of ~batch_seconds o census)

(* A point runs its scenario once with one call failed: its clean run's
   time, on this driver and measured just now, says how long it may take,
   where the case's limit (120 s at least) was made for any driver.  A
   point adds at most a loss, a stop and rig's wait for the word to a clean
   run (0.05 s more on the fake, 0.4 s a point at most): 20 times the clean
   run and 10 s more leave room for a loaded machine, and a rig that loops
   for good in a point (make mutate's rg-raised-free-retried, in 88 points)
   costs 10 s a point, not 120. *)
let point_limit (o : Cli.opts) census (j : Runner.job) =
  match (o.timeout, j.inject) with
  | None, Some _ -> (
      match List.find_opt (fun (r : Runner.result) -> r.job.case.name = j.case.name) census with
      | Some r -> Some (10. +. (20. *. r.seconds))
      | None -> None)
  | _ -> None

type pipeline = {
  census_jobs : Runner.job list;
  more : Runner.result -> Runner.job list;
  batch : Runner.job -> int;
  limit : Runner.job -> float option;
}

(* The census and its points in one run: a scenario's points start as its
   clean run ends, not once every clean run has (the longest, 0.6 s, held
   all the others' points back).  Not with --random or --shard, whose
   plans are drawn over all points at once. *)
let pipelined ~batch_seconds (o : Cli.opts) cases =
  if o.random <> None || o.shard <> None then None
  else
    let census_jobs = List.map (fun c -> clean_job o c) cases in
    let census = ref [] in
    Some
      {
        census_jobs;
        more =
          (fun (r : Runner.result) ->
            if List.memq r.job census_jobs then begin
              census := r :: !census;
              points_of o r
            end
            else []);
        batch = (fun j -> batch_of ~batch_seconds o !census j);
        limit = (fun j -> point_limit o !census j);
      }

let sweep_runs ?(with_census = false) (o : Cli.opts) cases =
  (* Half a second a child: where only points run, those that wait (holds,
     hang bounds) run side by side (Runner.run_all), and 2 s chained 3 to 13
     of them in one child, the sweep's longest path (sweep -j 2: 2.8 s, 2.5
     with 0.5).  Beside certify's cases, which leave them no such room, the
     children that smaller batches add cost more than they save. *)
  let batch_seconds = 0.5 in
  match pipelined ~batch_seconds o cases with
  | Some p ->
      Printf.printf "sweep of driver %s: %d scenarios, each one's points as its clean run ends\n%!" o.driver (List.length cases);
      (* the clean runs are the same flows as their points *)
      let results = Session.run_jobs ~batch:p.batch ~more:p.more ~flow:(fun _ -> true) ~limit:p.limit o ~what:"sweep" p.census_jobs in
      let points = List.filter (fun (r : Runner.result) -> not (List.memq r.job p.census_jobs)) results in
      Printf.printf "sweep: %d injection points\n%!" (List.length points);
      if with_census then results else points
  | None ->
      let census = census o cases in
      let points, batch = points ~batch_seconds o census in
      (if with_census then Session.in_shard o census else [])
      @ Session.run_jobs ~batch ~limit:(point_limit o census) o ~what:"sweep" points

let report_sweep (o : Cli.opts) ~cases ~selected ~report results =
  let lines = Report.verdicts ~cases ~selected results in
  let failures =
    List.filter
      (fun (r : Runner.result) ->
        match r.outcome with Findings (_ :: _) | Crashed _ | Crashed_once _ | Timed_out _ | Hung _ | Blocked _ -> true | _ -> false)
      results
  in
  List.iter
    (fun (r : Runner.result) ->
      let what =
        match r.outcome with
        | Findings fs -> String.concat "; " (List.map (fun (f : Case.finding) -> f.clause ^ ": " ^ f.detail) fs)
        | Crashed how -> "crashed: " ^ how
        | Crashed_once { how; _ } -> "crashed once, not when run again: " ^ how
        | Timed_out { limit; running; _ } ->
            Printf.sprintf "killed after %.0f s%s" limit (match running with Some w -> " " ^ w | None -> "")
        | Hung { fn; seconds; _ } -> Printf.sprintf "%s did not return within %.0f s" fn seconds
        | Blocked { fn; first } -> Printf.sprintf "blocked: %s had hung before (%s)" fn first
        | Not_applicable _ -> ""
      in
      Printf.printf "FAIL %s\n     replay: %s\n" (Report.for_terminal what) (Report.for_terminal (Runner.replay r.job)))
    failures;
  Report.print_table ~color:o.color (List.filter (fun (l : Report.line) -> l.verdict <> Report.Unchecked) lines);
  Report.write_json report ~driver:o.driver ~seeds:[ 1 ] ~interrupted:(Session.interrupted () <> None) ~runs:results lines;
  List.length failures
