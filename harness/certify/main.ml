(* rig-conform: the command line.  Subcommands: certify (a verdict per
   clause for a driver), run (one job: the child of certify, and the replay
   line), selftest (every mutant caught with exactly its clause, the
   conforming pair clean across seeds), list, bench. *)

(* The name the user typed: rig-cert is the same program (make install). *)
let me = if Filename.basename Sys.argv.(0) = "rig-cert" then "rig-cert" else "rig-conform"

let usage_error fmt =
  Printf.ksprintf
    (fun s ->
      prerr_endline (me ^ ": " ^ s);
      Printf.eprintf "Try '%s --help'.\n" me;
      exit 2)
    fmt

let help =
  {|rig-conform: conformance harness for rig drivers

Usage:
  rig-conform certify [--plugin PATH] [--driver NAME] [--only IDS] [--seeds N | --seed N] [-j N]
                      [--timeout SECONDS] [--report PATH] [--junit PATH] [--markdown PATH]
                      [--no-sweep] [--batch N] [--list] [--no-color]
      Certifies a driver: one verdict per clause of spec/clauses.tsv (pass, fail, n/a,
      unchecked), printed and written to PATH (default out/certify/report.json).
      Exit 0 when no clause fails, 1 when one does, 2 on a usage error.  Where the
      driver has fault injection (the fake), it also runs the systematic sweep
      (see sweep) and counts its runs in the verdicts; --no-sweep skips it.
  rig-conform run --case NAME --seed N [--plugin PATH] [--driver NAME] [--mutant NAME] [--inject F:N:K]
      Runs one case once, in this process, and prints its findings: the replay line
      that certify prints beside each failure.  Exit 1 when it finds a violation.
  rig-conform selftest [--seeds N] [-j N] [--timeout SECONDS] [--report PATH]
      Proves the checks: each mutant of the fake driver and of the reference rig must be
      flagged with exactly its clause, and the conforming pair with nothing across N seeds
      (default 20).  Writes out/selftest/report.json.
  rig-conform sweep [--driver NAME] [--only IDS] [-j N] [--shard I/N] [--random N [--seed S]] [--batch N] [--report PATH]
      Systematic fault injection: runs each rig-side scenario once per driver call and
      failure kind the document allows there, failing just that call, and checks what
      the validation layer sees.  --random N runs N of those points, drawn from the seed (a
      random fault plan).  A child runs up to --batch N points of one scenario in turn
      (default: as many as its clean run says fit in 2 s, at most 64; 1: a process per
      point); a point whose batch crashed or hung runs again alone.  Writes
      out/sweep/report.json.  Exit 1 on any failure.  Needs a driver that fails its
      n-th call on demand: the fake (another driver: exit 2).
  rig-conform async-sweep [--plugin PATH] [--driver NAME] [--case NAME] [--max-alloc N] [-j N] [--shard I/N] [--report PATH]
      Asynchronous exceptions at every allocation point: counts the allocations of each
      driver call of each async.* case, then runs the case once per call and allocation
      N <= --max-alloc (default 20), raising an asynchronous exception at the N-th
      (--inject FN:NTH:async@N).  Writes out/async-sweep/report.json.  Exit 1 on any failure.
  rig-conform list [--plugin PATH] [--driver NAME]
      The cases, the clauses each checks, and the mutants.
  rig-conform bench [--report PATH]
      The validation layer's cost (wrapped vs bare, same workload), the wall time of a
      whole certification of each bundled driver at -j1 and -j2, and the sweeps' speed.
  rig-cert is another name of rig-conform (make install).

Options:
  --driver NAME     the driver to certify (default fake, the bundled one)
  --plugin PATH     load a driver plugin (.cmxs) that registers a driver (repeatable)
  --only IDS        comma-separated clause IDs or globs (STOP-*, CNT-1,EXC-*)
  --seeds N         seeds 1..N (certify default 3)
  --seed N          a single seed
  -j N              jobs run at once (default: the number of cores)
  --timeout S       seconds a case may take before it is killed (default 60)
  --report PATH     where the JSON report goes
  --junit PATH      (certify) the JUnit XML report (default: beside the JSON one, .xml)
  --markdown PATH   (certify) the Markdown conformance matrix (default: beside it, .md)
  --shard I/N       run only the I-th of N disjoint slices of the runs (CI matrices)
  --batch N         (sweep, certify) up to N injection points of one scenario per child
  --inject F:N:K    (run) fail the N-th call of driver function F with K: fault, raise, fail,
                    or F's failure answer: none (alloc), error (dma, image), no_memory (entry),
                    short (grow), early (sleep), grow (room answers RIG_GROW);
                    or, for the async.* cases, K = async@A: an asynchronous exception at the
                    A-th allocation inside that call, or wait@W: at its W-th wait, from the
                    handler of a signal sent as the wait starts.  Given several times (not
                    async@/wait@), runs each point in turn in this process, each output after
                    a line POINT<TAB>F:N:K: how the sweep's children run a batch
  --no-sweep        (certify) skip the systematic fault-injection sweep
  --list            (certify) the clauses, the cases that check each, the driver's kit; runs nothing
  --no-color        no colour (also when NO_COLOR is set or stdout is not a terminal)
|}

type opts = {
  mutable driver : string;
  mutable only : string list;
  mutable seeds : int list;
  mutable jobs : int;
  mutable timeout : float;
  mutable report : string option;
  mutable case : string option;
  mutable mutant : string option;
  mutable plugins : string list;
  mutable injects : Injection.t list;  (** in the order given *)
  mutable shard : (int * int) option;  (* i of n, from 1 *)
  mutable sweep : bool;
  mutable random : int option;
  mutable batch : int option;
  mutable list : bool;
  mutable junit : string option;
  mutable markdown : string option;
  mutable color : bool;
}

let cores () =
  try
    let ic = Unix.open_process_in "nproc 2>/dev/null" in
    let n = int_of_string (String.trim (input_line ic)) in
    ignore (Unix.close_process_in ic);
    max 1 n
  with _ -> 1

let positive name s =
  match int_of_string_opt s with
  | Some n when n > 0 -> n
  | _ -> usage_error "%s wants a positive integer, not %S" name s

let parse_opts args ~allowed =
  let o =
    { driver = "fake"; only = []; seeds = []; jobs = cores (); timeout = 60.; report = None; case = None;
      mutant = None; plugins = []; injects = []; shard = None; sweep = true; random = None; batch = None; list = false; junit = None; markdown = None; color = Unix.isatty Unix.stdout && Sys.getenv_opt "NO_COLOR" = None }
  in
  let rec go = function
    | [] -> ()
    | ("-h" | "--help") :: _ -> print_string help; exit 0
    | flag :: rest when not (List.mem flag allowed) && String.length flag > 0 && flag.[0] = '-' ->
        ignore rest;
        usage_error "unknown option %s for this subcommand" flag
    | "--no-color" :: rest -> o.color <- false; go rest
    | "--no-sweep" :: rest -> o.sweep <- false; go rest
    | "--list" :: rest -> o.list <- true; go rest
    | "--random" :: v :: rest -> o.random <- Some (positive "--random" v); go rest
    | "--batch" :: v :: rest -> o.batch <- Some (positive "--batch" v); go rest
    | flag :: [] when flag.[0] = '-' -> usage_error "%s needs a value" flag
    | "--driver" :: v :: rest -> o.driver <- v; go rest
    | "--only" :: v :: rest -> o.only <- o.only @ List.filter (( <> ) "") (String.split_on_char ',' v); go rest
    | "--seeds" :: v :: rest -> o.seeds <- List.init (positive "--seeds" v) (fun i -> i + 1); go rest
    | "--seed" :: v :: rest ->
        (match int_of_string_opt v with Some n -> o.seeds <- [ n ] | None -> usage_error "--seed wants an integer, not %S" v);
        go rest
    | "-j" :: v :: rest -> o.jobs <- positive "-j" v; go rest
    | "--timeout" :: v :: rest ->
        (match float_of_string_opt v with
        | Some s when s > 0. -> o.timeout <- s
        | _ -> usage_error "--timeout wants a positive number of seconds, not %S" v);
        go rest
    | "--report" :: v :: rest -> o.report <- Some v; go rest
    | "--junit" :: v :: rest -> o.junit <- Some v; go rest
    | "--markdown" :: v :: rest -> o.markdown <- Some v; go rest
    | "--case" :: v :: rest -> o.case <- Some v; go rest
    | "--mutant" :: v :: rest -> o.mutant <- Some v; go rest
    | "--inject" :: v :: rest ->
        (match Injection.of_string v with Ok i -> o.injects <- o.injects @ [ i ] | Error why -> usage_error "--inject %s" why);
        go rest
    | "--shard" :: v :: rest ->
        (match String.split_on_char '/' v |> List.map int_of_string_opt with
        | [ Some i; Some n ] when n >= 1 && i >= 1 && i <= n -> o.shard <- Some (i, n)
        | _ -> usage_error "--shard wants I/N with 1 <= I <= N, not %S" v);
        go rest
    | "--plugin" :: v :: rest ->
        (match Drivers.load_plugin v with
        | Ok () -> o.plugins <- o.plugins @ [ v ]
        | Error why ->
            prerr_endline ("rig-conform: cannot load the driver plugin " ^ why);
            exit 2);
        go rest
    | arg :: _ -> usage_error "unexpected argument %S" arg
  in
  go args;
  o

let driver_of o =
  match Drivers.find o.driver with
  | Some d -> d
  | None -> usage_error "no driver %S (known: %s; a plugin's with --plugin PATH)" o.driver (String.concat ", " (Drivers.names ()))

(* Scenario files are read at start: a malformed one is a usage error. *)
let scenario_files =
  match Scenario_run.directory () with
  | Error why -> usage_error "%s" why
  | Ok dir -> ( match Scenario_run.load dir with Ok cases -> cases | Error why -> usage_error "scenario %s" why)

(* The rig-side cases: what a sweep injects failures into. *)
let rig_cases = Registry.rig_flow_cases @ scenario_files
let all_cases = Registry.probe_cases @ rig_cases @ Registry.async_cases

(* Cases that check at least one of the clauses. *)
let cases_for (clauses : Catalog.clause list) =
  List.filter (fun (c : Case.t) -> List.exists (fun (k : Catalog.clause) -> List.mem k.id c.clauses) clauses) all_cases

let interrupted = ref false

(* Shard i of n takes every n-th job from the i-th: the shards' jobs are
   disjoint and together all of them, whatever the machine. *)
let in_shard o jobs =
  match o.shard with
  | None -> jobs
  | Some (i, n) -> List.filteri (fun k _ -> k mod n = i - 1) jobs

(* The progress line: runs done, clauses whose runs have all ended, time. *)
let progress_printer ~what (jobs : Runner.job list) =
  let t0 = Unix.gettimeofday () in
  let total = List.length jobs in
  let tty = Unix.isatty Unix.stderr in
  let left = Hashtbl.create 80 in
  List.iter
    (fun (j : Runner.job) ->
      List.iter (fun c -> Hashtbl.replace left c (1 + Option.value ~default:0 (Hashtbl.find_opt left c))) j.case.clauses)
    jobs;
  let clauses = Hashtbl.length left in
  fun done_ (j : Runner.job) ->
    List.iter (fun c -> Hashtbl.replace left c (Hashtbl.find left c - 1)) j.case.clauses;
    let decided = Hashtbl.fold (fun _ n acc -> if n = 0 then acc + 1 else acc) left 0 in
    let line () =
      Printf.sprintf "%s: %d/%d runs, %d/%d clauses done, %.0f s" what done_ total decided clauses
        (Unix.gettimeofday () -. t0)
    in
    if tty then begin
      Printf.eprintf "\r%s%!" (line ());
      if done_ = total then prerr_newline ()
    end
    else if done_ = total || done_ mod 50 = 0 then Printf.eprintf "%s\n%!" (line ())

(* Ctrl-C stops the runs and still writes the report: set before anything
   is printed, so that no interruption falls between. *)
let catch_interrupt () = Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> interrupted := true))

let run_jobs ?batch o ~what jobs =
  let results =
    Runner.run_all ?batch ~parallel:o.jobs ~timeout:o.timeout
      ~progress:(progress_printer ~what jobs)
      ~stop:(fun () -> !interrupted)
      jobs
  in
  (* Children killed by the interruption say nothing about the driver. *)
  if !interrupted then
    List.filter (fun (r : Runner.result) -> match r.outcome with Findings _ | Not_applicable _ -> true | _ -> false) results
  else results

(* ---- systematic fault injection (fail-nth) ---- *)

(* --random N: N of the points, drawn from the seed (--seed, default 1): a
   random fault plan that the same seed draws again. *)
let random_plan o points =
  match o.random with
  | None -> points
  | Some n ->
      let st = Random.State.make [| (match o.seeds with [ s ] -> s | _ -> 1) |] in
      let tagged = List.map (fun p -> (Random.State.bits st, p)) points in
      List.sort compare tagged |> List.filteri (fun i _ -> i < n) |> List.map snd

(* A sweep's run of a case: seed 1, no mutant, and the injection if any. *)
let clean_job o ?inject case = { Runner.case; seed = 1; driver = o.driver; plugins = o.plugins; mutant = None; inject }

(* Counts the calls each rig-side case makes (a clean run, seed 1), then
   runs it once per call and failure kind the document allows there, with
   just that call failed.  Answers the injected runs, and [with_census] the
   counting ones too (certify has run those already). *)
let sweep_runs ?(with_census = false) o cases =
  let job = clean_job o in
  Printf.printf "sweep of driver %s: counting the calls of %d scenarios\n%!" o.driver (List.length cases);
  let census = run_jobs o ~what:"census" (List.map (fun c -> job c) cases) in
  let points =
    List.concat_map
      (fun (r : Runner.result) ->
        List.concat_map
          (fun (fn, n) ->
            List.concat_map
              (fun kind ->
                List.init n (fun k -> job ~inject:{ Injection.fn; nth = k + 1; kind } r.job.case))
              (Injection.kinds_for fn))
          (Injection.swept r.calls))
      census
    |> random_plan o
    |> in_shard o
  in
  Printf.printf "sweep: %d injection points%s\n%!" (List.length points)
    (match o.shard with Some (i, n) -> Printf.sprintf " (shard %d/%d)" i n | None -> "");
  (* Points of one scenario share a child, as many as its clean run says fit
     in a couple of seconds: the process per point is most of a quick run. *)
  let batch =
    match o.batch with
    | Some n -> fun _ -> n
    | None ->
        fun (j : Runner.job) ->
          match List.find_opt (fun (r : Runner.result) -> r.job.case.name = j.case.name) census with
          | Some r -> max 1 (min 64 (int_of_float (2.0 /. Float.max 0.001 r.seconds)))
          | None -> 1
  in
  (if with_census then in_shard o census else []) @ run_jobs ~batch o ~what:"sweep" points

let rig_cases_of selected =
  List.filter (fun (c : Case.t) -> List.exists (fun (k : Catalog.clause) -> List.mem k.id c.clauses) selected) rig_cases

(* ---- certify ---- *)

(* certify --list: what would be checked, without running the driver: each
   clause with the cases that check it, and what the driver's kit declares
   (a case whose kit item is missing comes out n/a when it runs). *)
let list_clauses (drv : Drivers.t) selected =
  let (module P : Rig_edge.Package) = drv.package in
  let k = P.kit in
  let item name = function Some _ -> name | None -> name ^ " (none)" in
  Printf.printf "driver %s; kit: image, %s, %s, %s, %s, %s, %s, %s\n" P.name
    (item "refused binary" k.refused_binary) (item "spin" k.spin) (item "fault" k.fault) (item "hang" k.hang)
    (item "scratch" k.scratch) (item "bus function" k.bus_function) (item "bus agent" k.bus_agent);
  (* Cases that need the fake's knobs come out n/a for another driver. *)
  let knobs name =
    Scenario_run.needs_fake name || Registry.needs_fake name
  in
  let mark name = if P.name <> Fake.name && knobs name then name ^ "(n/a)" else name in
  if P.name <> Fake.name then
    print_endline "cases marked (n/a) need the fake driver's knobs: they are n/a for this driver";
  List.iter
    (fun (c : Catalog.clause) ->
      let mine = List.filter (fun (case : Case.t) -> List.mem c.id case.clauses) all_cases in
      let names = List.map (fun (case : Case.t) -> mark case.name) mine in
      Printf.printf "%-8s %-6s %s\n" c.id c.side
        (if mine = [] then "unchecked: " ^ Report.why_unchecked c.id else String.concat " " names))
    selected

(* ---- certify ---- *)

let certify args =
  let o =
    parse_opts args
      ~allowed:
        [ "--driver"; "--plugin"; "--only"; "--seeds"; "--seed"; "-j"; "--timeout"; "--report"; "--junit"; "--markdown";
          "--shard"; "--no-sweep"; "--list"; "--batch"; "--no-color" ]
  in
  let drv = driver_of o in
  let seeds = if o.seeds = [] then [ 1; 2; 3 ] else o.seeds in
  let report = Option.value o.report ~default:"out/certify/report.json" in
  let selected =
    if o.only = [] then Catalog.all
    else match Catalog.select o.only with Ok l -> l | Error p -> usage_error "--only: %S names no clause of the catalog" p
  in
  if o.list then (list_clauses drv selected; exit 0);
  let cases = cases_for selected in
  let jobs =
    List.concat_map (fun case -> List.map (fun seed -> { Runner.case; seed; driver = o.driver; plugins = o.plugins; mutant = None; inject = None }) seeds) cases
  in
  let jobs = in_shard o jobs in
  Printf.printf "certifying driver %s: %d cases x %d seeds, -j %d%s\n%!" o.driver (List.length cases) (List.length seeds) o.jobs
    (match o.shard with Some (i, n) -> Printf.sprintf ", shard %d/%d (%d runs)" i n (List.length jobs) | None -> "");
  let results = run_jobs o ~what:"certify" jobs in
  let swept =
    match (drv.inject, o.sweep) with
    | Some _, true when not !interrupted -> sweep_runs o (rig_cases_of selected)
    | _ -> []
  in
  let results = results @ swept in
  let lines = Report.verdicts ~cases:all_cases ~selected results in
  Report.print_table ~color:o.color lines;
  let declared =
    let (module P : Rig_edge.Package) = drv.package in
    let k = P.kit in
    [ ("kit.refused_binary", k.refused_binary <> None); ("kit.spin", k.spin <> None); ("kit.fault", k.fault <> None);
      ("kit.hang", k.hang <> None); ("kit.scratch", k.scratch <> None); ("kit.bus_function", k.bus_function <> None);
      ("kit.bus_agent", k.bus_agent <> None);
      ("fault_injection", drv.inject <> None) ]
  in
  Report.write_json ~declared report ~driver:o.driver ~seeds ~interrupted:!interrupted ~runs:results lines;
  let beside ext = Filename.remove_extension report ^ ext in
  let junit = Option.value o.junit ~default:(beside ".xml") in
  let markdown = Option.value o.markdown ~default:(beside ".md") in
  Report.write_junit junit ~driver:o.driver lines;
  Report.write_markdown markdown ~driver:o.driver lines;
  Printf.printf "report: %s (JUnit %s, Markdown %s)\n" report junit markdown;
  if !interrupted then (prerr_endline "rig-conform: interrupted; the report holds what was done"; exit 130);
  if List.exists (fun (l : Report.line) -> l.verdict = Fail) lines then exit 1

(* ---- run: one job, in this process ---- *)

let apply_mutant (drv : Drivers.t) = function
  | None -> ()
  | Some m ->
      if List.exists (fun (n, _, _) -> n = m) Rig_mutant.all then Rig_mutant.set (Some m)
      else if List.exists (fun (n, _, _) -> n = m) Rig_edge_primitives.Mutant.all then
        Rig_edge_primitives.Mutant.set (Some m)
      else if List.exists (fun (n, _, _) -> n = m) drv.mutants then drv.set_mutant (Some m)
      else usage_error "no mutant %S of the reference rig or of this driver (see rig-conform list)" m

let run args =
  let o = parse_opts args ~allowed:[ "--driver"; "--plugin"; "--case"; "--seed"; "--mutant"; "--inject" ] in
  let drv = driver_of o in
  let name = match o.case with Some n -> n | None -> usage_error "run needs --case NAME" in
  let case =
    match List.find_opt (fun (c : Case.t) -> c.name = name) all_cases with
    | Some c -> c
    | None -> usage_error "no case %S (see rig-conform list)" name
  in
  let seed = match o.seeds with [ s ] -> s | _ -> usage_error "run needs --seed N" in
  let arm inject =
    drv.reset ();
    apply_mutant drv o.mutant;
    Case.report_calls [];
    match (inject, drv.inject) with
    | None, _ -> ()
    | Some i, _ when Injection.async_at i <> None || Injection.wait_at i <> None ->
        (* An asynchronous exception (async.* cases): the wrapper raises it, for any driver. *)
        if not (Async_cases.is_async_case name) then usage_error "--inject %s: only for the async.* cases" (Injection.to_string i);
        let on, at =
          match Injection.async_at i with Some at -> (Async_inject.Allocation, at) | None -> (Wait, Option.get (Injection.wait_at i))
        in
        Async_inject.target := Some { Async_inject.fn = i.fn; nth = i.nth; at; on }
    | Some i, Some inject -> Case.injecting := true; inject i
    | Some _, None -> usage_error "driver %S has no fault injection" o.driver
  in
  let job inject = { Runner.case; seed; driver = o.driver; plugins = o.plugins; mutant = o.mutant; inject } in
  match o.injects with
  | [] | [ _ ] ->
      let inject = match o.injects with [ i ] -> Some i | _ -> None in
      arm inject;
      exit (Runner.child drv (job inject))
  | several ->
      (* A batch: each point in turn in this process, each output after a
         POINT line (Runner's batches); every point is checked first. *)
      List.iter (fun i -> if Injection.async_at i <> None || Injection.wait_at i <> None then usage_error "--inject %s: one asynchronous point per run" (Injection.to_string i)) several;
      let worst =
        List.fold_left
          (fun worst i ->
            Printf.printf "POINT\t%s\n%!" (Injection.to_string i);
            arm (Some i);
            max worst (Runner.child drv (job (Some i))))
          0 several
      in
      exit worst

(* The run subcommand as a person types it: the protocol lines, then a
   summary and an exit code.  The certifier's children use the same path;
   the parent reads the lines and ignores the rest. *)

(* ---- selftest ---- *)

let selftest args =
  let o = parse_opts args ~allowed:[ "--seeds"; "-j"; "--timeout"; "--report"; "--no-color" ] in
  let drv = driver_of o in
  let seeds = if o.seeds = [] then List.init 20 (fun i -> i + 1) else o.seeds in
  let report = Option.value o.report ~default:"out/selftest/report.json" in
  let mutants =
    List.map (fun (n, c, w) -> (n, c, w, "rig")) Rig_mutant.all
    @ List.map (fun (n, c, w) -> (n, c, w, "edge")) Rig_edge_primitives.Mutant.all
    @ List.map (fun (n, c, w) -> (n, c, w, "driver " ^ o.driver)) drv.mutants
  in
  let checked = List.sort_uniq compare (List.concat_map (fun (c : Case.t) -> c.clauses) all_cases) in
  let without_mutant = List.filter (fun id -> not (List.exists (fun (_, c, _, _) -> c = id) mutants)) checked in
  let conforming_jobs =
    List.concat_map (fun case -> List.map (fun seed -> { Runner.case; seed; driver = o.driver; plugins = o.plugins; mutant = None; inject = None }) seeds) all_cases
  in
  let mutant_jobs =
    List.concat_map
      (fun (m, clause, _, _) ->
        let job ?inject case = { Runner.case; seed = 1; driver = o.driver; plugins = o.plugins; mutant = Some m; inject } in
        match List.find_opt (fun (m', _, _) -> m' = m) Rig_mutant.under_fault with
        | Some (_, case, inject) ->
            let case = List.find (fun (c : Case.t) -> c.name = case) all_cases in
            [ job ~inject:(Result.get_ok (Injection.of_string inject)) case ]
        | None -> List.map (fun case -> job case) (List.filter (fun (c : Case.t) -> List.mem clause c.clauses) all_cases))
      mutants
  in
  let results = run_jobs o ~what:"selftest" (conforming_jobs @ mutant_jobs) in
  let conforming = List.filter (fun (r : Runner.result) -> r.job.mutant = None) results in
  let conforming_flagged = Report.flagged conforming in
  let rows =
    List.map
      (fun (m, clause, what, side) ->
        let mine = List.filter (fun (r : Runner.result) -> r.job.mutant = Some m) results in
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
      | Findings (_ :: _) | Crashed _ | Timed_out _ -> Printf.printf "  conforming failure: %s\n" (Runner.replay r.job)
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
  if !interrupted then exit 130;
  if not (ok_mutants && conforming_flagged = [] && without_mutant = []) then exit 1

(* What sweep and async-sweep print and write of their runs: each failing
   run with its replay line, the verdicts of the clauses they reached, the
   JSON report.  Answers the number of failing runs. *)
let report_sweep o ~cases ~selected ~report results =
  let lines = Report.verdicts ~cases ~selected results in
  let failures =
    List.filter
      (fun (r : Runner.result) -> match r.outcome with Findings (_ :: _) | Crashed _ | Timed_out _ -> true | _ -> false)
      results
  in
  List.iter
    (fun (r : Runner.result) ->
      let what =
        match r.outcome with
        | Findings fs -> String.concat "; " (List.map (fun (f : Case.finding) -> f.clause ^ ": " ^ f.detail) fs)
        | Crashed how -> "crashed: " ^ how
        | Timed_out s -> Printf.sprintf "killed after %.0f s" s
        | Not_applicable _ -> ""
      in
      Printf.printf "FAIL %s\n     replay: %s\n" what (Runner.replay r.job))
    failures;
  Report.print_table ~color:o.color (List.filter (fun (l : Report.line) -> l.verdict <> Report.Unchecked) lines);
  Report.write_json report ~driver:o.driver ~seeds:[ 1 ] ~interrupted:!interrupted ~runs:results lines;
  List.length failures

(* ---- sweep: systematic fault injection (fail-nth) ---- *)

let sweep args =
  let o =
    parse_opts args
      ~allowed:[ "--driver"; "--plugin"; "--only"; "-j"; "--timeout"; "--report"; "--shard"; "--random"; "--seed"; "--batch"; "--no-color" ]
  in
  let drv = driver_of o in
  if drv.inject = None then usage_error "driver %S has no fault injection to sweep with" o.driver;
  let report = Option.value o.report ~default:"out/sweep/report.json" in
  let selected =
    if o.only = [] then Catalog.all
    else match Catalog.select o.only with Ok l -> l | Error p -> usage_error "--only: %S names no clause of the catalog" p
  in
  let cases = rig_cases_of selected in
  let results = sweep_runs ~with_census:true o cases in
  let failures = report_sweep o ~cases ~selected ~report results in
  Printf.printf "%d runs (%d with a failure injected), %d failing; report: %s\n" (List.length results)
    (List.length (List.filter (fun (r : Runner.result) -> r.job.inject <> None) results))
    failures report;
  if !interrupted then exit 130;
  if failures > 0 then exit 1

(* ---- async-sweep: an asynchronous exception at every allocation point ----
   (Async_inject, Async_cases.)  A plain run of each async.* case is the
   census: it reports the allocations of each driver call as CALLS lines
   "fn#nth"; then each (call, N), N up to --max-alloc, runs in its own child
   with --inject FN:NTH:async@N. *)

let async_sweep args =
  let max_alloc = ref 20 in
  let rec strip = function
    | "--max-alloc" :: v :: rest -> max_alloc := positive "--max-alloc" v; strip rest
    | a :: rest -> a :: strip rest
    | [] -> []
  in
  let o =
    parse_opts (strip args)
      ~allowed:[ "--driver"; "--plugin"; "--case"; "-j"; "--timeout"; "--report"; "--shard"; "--no-color" ]
  in
  ignore (driver_of o);
  let report = Option.value o.report ~default:"out/async-sweep/report.json" in
  let cases =
    match o.case with
    | None -> Registry.async_cases
    | Some n -> (
        match List.filter (fun (c : Case.t) -> c.name = n || c.name = "async." ^ n) Registry.async_cases with
        | [] -> usage_error "no async case %S (see rig-conform list)" n
        | l -> l)
  in
  let selected = List.filter (fun (k : Catalog.clause) -> List.mem k.id (List.concat_map (fun (c : Case.t) -> c.clauses) cases)) Catalog.all in
  let job = clean_job o in
  let t0 = Unix.gettimeofday () in
  Printf.printf "async sweep of driver %s: counting the allocations of %d scenarios\n%!" o.driver (List.length cases);
  let census = run_jobs o ~what:"census" (List.map (fun c -> job c) cases) in
  let points =
    List.concat_map
      (fun (r : Runner.result) ->
        List.map
          (fun (p : Async_inject.target) ->
            let inject = match p.on with Allocation -> Injection.async | Wait -> Injection.wait in
            job ~inject:(inject ~fn:p.fn ~nth:p.nth ~at:p.at) r.job.case)
          (Async_cases.points_of_census ~max_alloc:!max_alloc r.calls))
      census
    |> in_shard o
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
  let results = in_shard o census @ run_jobs o ~what:"async sweep" points in
  let failures = report_sweep o ~cases ~selected ~report results in
  Printf.printf "%d runs (%d with an asynchronous exception injected), %d failing, %.1f s; report: %s\n" (List.length results)
    (List.length (List.filter (fun (r : Runner.result) -> r.job.inject <> None) results))
    failures (Unix.gettimeofday () -. t0) report;
  if !interrupted then exit 130;
  if failures > 0 then exit 1

(* ---- list ---- *)

let list args =
  let o = parse_opts args ~allowed:[ "--driver"; "--plugin" ] in
  let drv = driver_of o in
  print_endline "cases:";
  List.iter (fun (c : Case.t) -> Printf.printf "  %-32s %s\n" c.name (String.concat " " c.clauses)) all_cases;
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
  List.iter (fun (n, c, w) -> Printf.printf "  %-26s %-8s %s\n" n c w) drv.mutants

let () =
  match List.tl (Array.to_list Sys.argv) with
  | [] | ("-h" | "--help" | "help") :: _ -> print_string help
  | "certify" :: rest -> catch_interrupt (); certify rest
  | "run" :: rest -> run rest
  | "selftest" :: rest -> catch_interrupt (); selftest rest
  | "sweep" :: rest -> catch_interrupt (); sweep rest
  | "async-sweep" :: rest -> catch_interrupt (); async_sweep rest
  | "list" :: rest -> list rest
  | "bench" :: rest -> Bench.main rest
  | cmd :: _ -> usage_error "unknown subcommand %S" cmd
