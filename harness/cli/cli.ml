(* The options; see cli.mli. *)

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
                      [--no-sweep] [--batch N] [--sequences N] [--list] [--no-color]
      Certifies a driver: one verdict per clause of spec/clauses.tsv (pass, fail, n/a,
      unchecked), printed and written to PATH (default out/certify/report.json).
      Exit 0 when no clause fails, 1 when one does (a driver whose plugin cannot be
      loaded fails every clause), 2 on a usage error, 130 on SIGINT and 143 on SIGTERM
      (the report then holds what was done).  Where the
      driver has fault injection (the fake), it also runs the systematic sweep
      (see sweep) and counts its runs in the verdicts; --no-sweep skips it.
  rig-conform run --case NAME --seed N [--plugin PATH] [--driver NAME] [--mutant NAME] [--inject F:N:K]
                  [--sequences N] [--census]
      Runs one case once, in a child it watches, and prints its findings: the replay line
      that certify prints beside each failure.  Exit 1 when it finds a violation, and when
      a driver call outlives its limit (printed: HUNG, the function, seconds, its clause).
  rig-conform run --scenario FILE [--plugin PATH] [--driver NAME]
      Runs one scenario file (a model counterexample's .scn, say) as a case, the same way.
  rig-conform selftest [--seeds N] [-j N] [--timeout SECONDS] [--report PATH] [--mutant NAME]
      Proves the checks: each mutant of the fake driver and of the reference rig must be
      flagged with exactly its clause, and the conforming pair with nothing across N seeds
      (default 20).  --mutant NAME: that mutant's runs only.  Writes out/selftest/report.json.
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
  rig-conform describe --plugin PATH...
      Loads the plugins in this process and prints the drivers each registered and their
      kits: what certify asks of a child before it runs any case (a plugin that crashes,
      exits or hangs as it loads is shown this way).
  rig-conform calibrate [--out PATH]
      Runs every case cleanly on the fake driver (seeds 1-3) and writes the wall time of
      each (default harness/certify/case_seconds.tsv of the checkout): each case's time
      limit on any driver is derived from it.
  rig-conform bench [--report PATH] [--validation-only]
      The validation layer's cost (wrapped vs bare, same workload), the wall time of a
      whole certification of each bundled driver at -j1 and -j2, and the sweeps' speed.
  rig-cert is another name of rig-conform (make install).

Options:
  --driver NAME     the driver to certify (default fake, the bundled one)
  --plugin PATH     load a driver plugin (.cmxs) that registers a driver (repeatable)
  --only IDS        comma-separated clause IDs or globs (STOP-*, CNT-1,EXC-*)
  --seeds N         seeds 1..N (certify default 3; at most 10000)
  --seed N          a single seed
  -j N              cores' worth of jobs run at once (default: the number of cores); while
                    the machine's cores idle (jobs that only wait), up to 8N at once, and a
                    finding of a job run beside more than N is confirmed by running it again
                    with N at most (RIG_CONFORM_OVERCOMMIT=1: never more than N)
  --timeout S       seconds a case may take before it is killed (default: 40 times the
                    case's clean run on the fake driver, at least 120 s; a run killed with
                    no call hung is too slow to judge, not a fail).  Apart from it, a
                    driver call in flight for 5 s (sleep, stop, signaled, locate, peer) or
                    30 s (the others) ends its run as a hang of that call; 1 s for a
                    function that hung before in the same certification
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
  --sequences N     (certify, run) programs each run of a model.* case draws and runs
                    (default 8, fewer on a driver so slow that they take over 45 s; given,
                    all N run: raise --timeout with it; at most 100000)
  --scenario FILE   (run) the scenario file to run
  --census          (run) the run of a sweep's census: it counts the calls the points are
                    drawn from and leaves out what the points try one by one (an async.*
                    case's points in-process)
  --no-sweep        (certify) skip the systematic fault-injection sweep
  --list            (certify) the clauses, the cases that check each, the driver's kit; runs nothing
  --no-color        no colour (also when NO_COLOR is set or stdout is not a terminal)
|}

type opts = {
  mutable driver : string;
  mutable only : string list;
  mutable seeds : int list;
  mutable jobs_given : int option;
  mutable timeout : float option;
  mutable report : string option;
  mutable case : string option;
  mutable mutant : string option;
  mutable plugins : string list;
  mutable injects : Injection.t list;
  mutable shard : (int * int) option;
  mutable sweep : bool;
  mutable random : int option;
  mutable batch : int option;
  mutable list : bool;
  mutable junit : string option;
  mutable markdown : string option;
  mutable color : bool;
  mutable out : string option;
  mutable sequences : int option;
  mutable scenario : string option;
  mutable census : bool;
}

let cores () = Idle_cores.count ()

(* Every child parses the options too, and never runs jobs: the cores are
   counted only where they are asked for. *)
let jobs o = match o.jobs_given with Some n -> n | None -> cores ()

let positive name s =
  match int_of_string_opt s with
  | Some n when n > 0 -> n
  | _ -> usage_error "%s wants a positive integer, not %S" name s

(* More seeds than this is a mistake (a billion would only fill memory). *)
let max_seeds = 10000

let absolute p = if Filename.is_relative p then Filename.concat (Sys.getcwd ()) p else p

let path_arg flag v =
  if v = "" then usage_error "%s wants a path, not an empty word" flag;
  absolute v

let plugin_arg v =
  if v = "" then usage_error "--plugin wants a path, not an empty word";
  match (Unix.stat v).st_kind with
  | Unix.S_REG -> absolute v
  | _ -> usage_error "cannot use the driver plugin %s: not a regular file" v
  | exception Unix.Unix_error (e, _, _) -> usage_error "cannot use the driver plugin %s: %s" v (Unix.error_message e)

let parse_opts args ~allowed =
  let o =
    { driver = "fake"; only = []; seeds = []; jobs_given = None; timeout = None; report = None; case = None;
      mutant = None; plugins = []; injects = []; shard = None; sweep = true; random = None; batch = None; list = false;
      junit = None; markdown = None; color = Unix.isatty Unix.stdout && Sys.getenv_opt "NO_COLOR" = None; out = None;
      sequences = None; scenario = None; census = false }
  in
  let is_flag s = String.length s > 0 && s.[0] = '-' in
  (* A flag given twice with other values, or --seed with --seeds: which one
     was meant is not ours to guess. *)
  let given = Hashtbl.create 8 in
  let once flag v =
    (match Hashtbl.find_opt given flag with
    | Some w when w <> v -> usage_error "%s given twice (%S and %S): give it once" flag w v
    | _ -> ());
    Hashtbl.replace given flag v;
    if Hashtbl.mem given "--seed" && Hashtbl.mem given "--seeds" then usage_error "--seed and --seeds: give one of them"
  in
  let rec go = function
    | [] -> ()
    | ("-h" | "--help") :: _ -> print_string help; exit 0
    | flag :: _ when is_flag flag && not (List.mem flag allowed) -> usage_error "unknown option %s for this subcommand" flag
    | "--no-color" :: rest -> o.color <- false; go rest
    | "--no-sweep" :: rest -> o.sweep <- false; go rest
    | "--census" :: rest -> o.census <- true; go rest
    | "--list" :: rest -> o.list <- true; go rest
    | flag :: [] when is_flag flag -> usage_error "%s needs a value" flag
    | "--random" :: v :: rest -> o.random <- Some (positive "--random" v); go rest
    | "--batch" :: v :: rest -> o.batch <- Some (positive "--batch" v); go rest
    | "--sequences" :: v :: rest ->
        once "--sequences" v;
        let n = positive "--sequences" v in
        if n > 100000 then usage_error "--sequences %d: at most 100000" n;
        (* the model cases read it in the children, which inherit it *)
        Unix.putenv "RIG_CONFORM_SEQUENCES" (string_of_int n);
        o.sequences <- Some n; go rest
    | "--scenario" :: v :: rest -> once "--scenario" v; o.scenario <- Some (path_arg "--scenario" v); go rest
    | "--driver" :: v :: rest ->
        if v = "" then usage_error "--driver wants a driver's name, not an empty word";
        o.driver <- v; go rest
    | "--only" :: v :: rest ->
        let ids = List.filter (fun s -> String.trim s <> "") (String.split_on_char ',' v) in
        if ids = [] then usage_error "--only %S names no clause (give IDs or globs: STOP-*,CNT-1)" v;
        o.only <- o.only @ List.map String.trim ids; go rest
    | "--seeds" :: v :: rest ->
        once "--seeds" v;
        let n = positive "--seeds" v in
        if n > max_seeds then usage_error "--seeds %d: at most %d seeds" n max_seeds;
        o.seeds <- List.init n (fun i -> i + 1); go rest
    | "--seed" :: v :: rest ->
        once "--seed" v;
        (match int_of_string_opt v with Some n -> o.seeds <- [ n ] | None -> usage_error "--seed wants an integer, not %S" v);
        go rest
    | "-j" :: v :: rest ->
        let n = positive "-j" v in
        if n > 256 then usage_error "-j %d: at most 256 jobs at once" n;
        o.jobs_given <- Some n; go rest
    | "--timeout" :: v :: rest ->
        (match float_of_string_opt v with
        | Some s when s > 0. && Float.is_finite s && s <= 86400. -> o.timeout <- Some s
        | _ -> usage_error "--timeout wants a number of seconds above 0 and at most 86400, not %S" v);
        go rest
    | "--report" :: v :: rest -> once "--report" v; o.report <- Some (path_arg "--report" v); go rest
    | "--junit" :: v :: rest -> once "--junit" v; o.junit <- Some (path_arg "--junit" v); go rest
    | "--markdown" :: v :: rest -> once "--markdown" v; o.markdown <- Some (path_arg "--markdown" v); go rest
    | "--out" :: v :: rest -> once "--out" v; o.out <- Some (path_arg "--out" v); go rest
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
    | "--plugin" :: v :: rest -> o.plugins <- o.plugins @ [ plugin_arg v ]; go rest
    | arg :: _ -> usage_error "unexpected argument %S" arg
  in
  go args;
  o

let rec make_dirs d =
  if not (Sys.file_exists d) then begin
    make_dirs (Filename.dirname d);
    try Unix.mkdir d 0o755 with Unix.Unix_error (Unix.EEXIST, _, _) -> ()
  end

let writable_or_exit ~what path =
  let fail why = usage_error "cannot write the %s %s: %s" what path why in
  (match (Unix.stat path).st_kind with
  | Unix.S_DIR -> fail "it is a directory"
  | _ -> ()
  | exception Unix.Unix_error (Unix.ENOENT, _, _) -> ()
  | exception Unix.Unix_error (Unix.ENOTDIR, _, _) -> fail "a part of its path is not a directory");
  let dir = Filename.dirname path in
  (try make_dirs dir with Unix.Unix_error (e, _, _) -> fail (Unix.error_message e));
  (* The report is written beside itself and renamed: that must work there. *)
  match Filename.temp_file ~temp_dir:dir ".rig-conform-check" ".tmp" with
  | probe -> Sys.remove probe
  | exception Sys_error why -> fail why

let temp_dir_or_exit () =
  let dir = Filename.get_temp_dir_name () in
  match Filename.temp_file "rig-conform-check" ".tmp" with
  | probe -> Sys.remove probe
  | exception Sys_error why ->
      usage_error "the temporary directory %s (TMPDIR) cannot hold a file: %s" dir why
