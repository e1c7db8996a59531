(* Child processes for cases; see runner.mli.  The child writes its outcome
   on its channel as records "FINDING\tclause\tdetail" (then "\tvalue" for a
   finding that is not a timing), "NA\treason",
   "ERROR\ttext", "CALLS\tfn\tn", "TRACED\tfn\tn", "UNJUDGED\tclause\twhy", then "DONE\tn" (n: the records before it);
   a batch writes "POINT\tinjection" before each point's records.  A child
   that ends without a DONE whose count matches crashed. *)

type job = {
  case : Case.t;
  seed : int;
  driver : string;
  plugins : string list;
  mutant : string option;
  inject : Injection.t option;
  census : bool;
}

type outcome =
  | Findings of Case.finding list
  | Not_applicable of string
  | Crashed of string
  | Timed_out of { limit : float; running : string option; stuck : (string * float) option }
  | Hung of { fn : string; seconds : float; inside : string option; deadlock : bool }
  | Blocked of { fn : string; first : string }
  | Crashed_once of { how : string; again : outcome }

type result = {
  job : job;
  outcome : outcome;
  calls : (string * int) list;
  traced : (string * int) list;
  unjudged : (string * string) list;
  seconds : float;
}

let run_args j =
  [ "run" ]
  @ List.concat_map (fun p -> [ "--plugin"; p ]) j.plugins
  @ [ "--driver"; j.driver; "--case"; j.case.name; "--seed"; string_of_int j.seed ]
  @ (match j.mutant with Some m -> [ "--mutant"; m ] | None -> [])
  @ (match Sys.getenv_opt "RIG_CONFORM_SEQUENCES" with
    | Some n when String.starts_with ~prefix:"model." j.case.name -> [ "--sequences"; n ]
    | _ -> [])
  @ (if j.census then [ "--census" ] else [])
  @ match j.inject with Some i -> [ "--inject"; Injection.to_string i ] | None -> []

(* The program as the user would type it: relative to the current directory
   when it lies below it. *)
let program () =
  let exe = Sys.executable_name in
  let cwd = Sys.getcwd () ^ "/" in
  if String.starts_with ~prefix:cwd exe then
    "./" ^ String.sub exe (String.length cwd) (String.length exe - String.length cwd)
  else exe

(* Quoted for a POSIX shell only where it needs to be, so that lines read well. *)
let shell_word w =
  let plain = function 'a' .. 'z' | 'A' .. 'Z' | '0' .. '9' | '.' | '_' | '/' | ':' | '=' | '+' | '-' | ',' -> true | _ -> false in
  if w <> "" && String.for_all plain w then w else Filename.quote w

let replay j = String.concat " " (List.map shell_word (program () :: run_args j))
let clean s = String.map (function '\n' | '\t' -> ' ' | c -> c) s

(* A FINDING record's last field when the finding is not a timing. *)
let value_mark = "value"

let child (drv : Drivers.t) j =
  let say fmt = Printf.ksprintf Channel.say fmt in
  Call_trace.reset_called ();
  let code =
    try
      match (j.case.run (Call_trace.wrap drv.package) ~seed:j.seed : Case.result) with
      | Ran fs ->
          List.iter
            (fun (f : Case.finding) ->
              say "FINDING\t%s\t%s%s" f.clause (clean f.detail) (if f.timing then "" else "\t" ^ value_mark))
            fs;
          if fs = [] then 0 else 1
      | Not_applicable why -> say "NA\t%s" (clean why); 0
    with e -> say "ERROR\t%s" (clean (Printexc.to_string e)); 1
  in
  List.iter (fun (fn, n) -> say "CALLS\t%s\t%d" fn n) (Case.reported_calls ());
  (* for the report's premises; a replay by hand does not need them *)
  if Channel.to_certifier () then List.iter (fun (fn, n) -> say "TRACED\t%s\t%d" fn n) (Call_trace.called ());
  List.iter (fun (c, why) -> say "UNJUDGED\t%s\t%s" c (clean why)) (Case.reported_unjudged ());
  Channel.say_done ();
  code

(* OCaml's numbers for signals are its own: name the common ones. *)
let signal_name s =
  let names =
    Sys.[ (sigsegv, "SIGSEGV"); (sigabrt, "SIGABRT"); (sigbus, "SIGBUS"); (sigfpe, "SIGFPE"); (sigill, "SIGILL");
          (sigkill, "SIGKILL"); (sigterm, "SIGTERM"); (sigint, "SIGINT"); (sigtrap, "SIGTRAP"); (sigsys, "SIGSYS");
          (sigstop, "SIGSTOP"); (sigtstp, "SIGTSTP"); (sigttin, "SIGTTIN"); (sigttou, "SIGTTOU"); (sigpipe, "SIGPIPE");
          (sigxfsz, "SIGXFSZ"); (sigxcpu, "SIGXCPU"); (sighup, "SIGHUP"); (sigusr1, "SIGUSR1"); (sigusr2, "SIGUSR2") ]
  in
  match List.assoc_opt s names with Some n -> n | None -> Printf.sprintf "signal %d" s

(* The records of one run (or point): complete when they end in a DONE
   that counts the records before it. *)
let complete records =
  match List.rev records with
  | last :: before -> (
      match String.split_on_char '\t' last with
      | [ "DONE"; n ] -> int_of_string_opt n = Some (List.length before)
      | _ -> false)
  | [] -> false

let tally_of tag records =
  List.filter_map
    (fun l ->
      match String.split_on_char '\t' l with
      | [ t; fn; n ] when t = tag -> Option.map (fun n -> (fn, n)) (int_of_string_opt n)
      | _ -> None)
    records

let calls_of = tally_of "CALLS"
let traced_of = tally_of "TRACED"

(* A case speaks only for its own clauses. *)
let unjudged_of j records =
  List.filter_map
    (fun l ->
      match String.split_on_char '\t' l with
      | [ "UNJUDGED"; clause; why ] when List.mem clause j.case.Case.clauses -> Some (clause, why)
      | _ -> None)
    records

let findings_of j records =
  let fields l = String.split_on_char '\t' l in
  let na = List.find_map (fun l -> match fields l with [ "NA"; why ] -> Some why | _ -> None) records in
  let findings =
    List.concat_map
      (fun l ->
        match fields l with
        | [ "FINDING"; clause; detail ] -> [ { Case.clause; detail; timing = true } ]
        | [ "FINDING"; clause; detail; mark ] when mark = value_mark -> [ { Case.clause; detail; timing = false } ]
        | [ "ERROR"; text ] ->
            (* an exception may come of a deadline the case gave up at *)
            List.map (fun clause -> { Case.clause; detail = "the case raised " ^ text; timing = true }) j.case.clauses
        | _ -> [])
      records
  in
  match na with Some why when findings = [] -> Not_applicable why | _ -> Findings findings

(* The records of each point of a batch, in order. *)
let segments records =
  let rec go acc cur = function
    | [] -> List.rev (match cur with Some c -> List.rev c :: acc | None -> acc)
    | l :: rest when String.starts_with ~prefix:"POINT\t" l ->
        let acc = match cur with Some c -> List.rev c :: acc | None -> acc in
        go acc (Some []) rest
    | l :: rest -> go acc (Option.map (fun c -> l :: c) cur) rest
  in
  go [] None records

(* What the child did, in words, for a run without its end. *)
let how_it_ended c (ended : Child_process.ended option) =
  let where = match Call_trace.describe (Child_process.in_flight c) with Some w -> " " ^ w | None -> "" in
  let last = Child_process.last_lines c 5 in
  let last = if last = "" then "" else "; last output: " ^ last in
  let foreign =
    match Child_process.foreign_bytes c with 0 -> "" | n -> Printf.sprintf "; %d bytes on its channel were not its own" n
  in
  let what =
    match ended with
    | Some (Exited c) -> Printf.sprintf "exited %d" c
    | Some (Killed s) -> "killed by " ^ signal_name s
    | Some (Stopped s) -> "stopped by " ^ signal_name s ^ " (a run that stops itself never ends)"
    | None -> "was killed"
  in
  (what, where, last ^ foreign)

let outcome_of j c ended records =
  let what, where, rest = how_it_ended c ended in
  match ended with
  | Some (Exited (0 | 1)) when complete records -> findings_of j records
  | Some _ when complete records ->
      (* After its end: a sanitizer's report at exit (LeakSanitizer), an
         exit handler that failed. *)
      Crashed (Printf.sprintf "%s after its end%s" what rest)
  | _ -> Crashed (Printf.sprintf "%s%s, before its end%s" what where rest)

(* A batch: jobs alike but for their injection, run one after another in one
   child ([run] with several --inject).  A point whose records have no DONE
   (the child crashed or hung there) runs again alone, so that its verdict
   is the one its own process gives. *)
let batchable j = j.inject <> None

(* An asynchronous exception may leave the process in a state the next point
   inherits (a lock taken, a thread stuck): in a batch of such points, the
   first one that found something, and every one after it, runs again alone. *)
let asynchronous j =
  match j.inject with Some i -> Injection.async_at i <> None || Injection.wait_at i <> None | None -> false

let alike a b =
  a.case.name = b.case.name && a.seed = b.seed && a.driver = b.driver && a.plugins = b.plugins && a.mutant = b.mutant

let batches ~size jobs =
  let rec go acc cur = function
    | [] -> List.rev (if cur = [] then acc else List.rev cur :: acc)
    | ((_, j) as x) :: rest -> (
        match cur with
        | ((_, j0) :: _ as c) when batchable j && batchable j0 && alike j j0 && List.length c < size j0 -> go acc (x :: c) rest
        | [] -> go acc [ x ] rest
        | c -> go (List.rev c :: acc) [ x ] rest)
  in
  go [] [] jobs

type running = {
  rjobs : (int * job) list;
  child : Child_process.t;
  started : float;
  mutable deadline : float;
  limit : float;
  point_limits : float array;  (* each point's limit, in order: one for a run of one job *)
  mutable points_begun : int;  (* the POINT records a batch has written so far *)
  mutable watched : float;  (* when its calls in flight were last looked at *)
  mutable crowded : bool;   (* more children than [parallel] ran beside it at some time *)
  quiet : bool;             (* a run again of a crowded run's findings *)
  kept : Case.finding list; (* that crowded run's findings that are not timings: they stand *)
}

(* The functions the document bounds (sleep by still_ms, which rig keeps
   under its hang bound; a stop that must not wait; calls that must not
   block) get well under the probes' own bound of 9 s, so that the first hang
   is seen here and every later one costs a second; the others (make, image,
   alloc: a real device may take seconds) get more. *)
let call_limit = function "sleep" | "stop" | "signaled" | "locate" | "peer" -> 5. | _ -> 30.
let known_hang_limit = 1.

(* A call in flight this long is looked at for a deadlock (Lock_wait): a
   certain one ends the run there, where the bound would wait on. *)
let deadlock_after = 0.5

(* The functions that hung, per driver (plugins) and mutant: "case C, seed
   S" of the run where each hung first (a run of its own: a batch's hang
   marks nothing, its point runs again alone). *)
let hangs : (string * string list * string option * string, string) Hashtbl.t = Hashtbl.create 8
let hang_key j fn = (j.driver, j.plugins, j.mutant, fn)

let overstayed_call ?(known = fun _ -> None) ?(deadlocked = fun _ -> false) threads =
  (* Innermost first: a call made from a callback inside another on the
     same thread is the one that hangs; the outer one only waits for it. *)
  let rec innermost tid = function
    | [] -> None
    | (fn, s) :: outer -> (
        let inside = match outer with (o, _) :: _ -> Some o | [] -> None in
        match known fn with
        | Some first when s > known_hang_limit -> Some (`Blocked (fn, first))
        | _ ->
            if s > call_limit fn then Some (`Hung (fn, s, inside, false))
            else if s > deadlock_after && deadlocked tid then Some (`Hung (fn, s, inside, true))
            else innermost tid outer)
  in
  List.find_map (fun (tid, calls) -> innermost tid (List.rev calls)) threads

(* Whether a call in flight has overstayed: [Some outcome] to end the run. *)
let overstayed j c =
  let pid = Child_process.pid c in
  match
    overstayed_call
      ~known:(fun fn -> Hashtbl.find_opt hangs (hang_key j fn))
      ~deadlocked:(Lock_wait.forever ~pid) (Child_process.in_flight c)
  with
  | Some (`Blocked (fn, first)) -> Some (Blocked { fn; first })
  | Some (`Hung (fn, seconds, inside, deadlock)) -> Some (Hung { fn; seconds; inside; deadlock })
  | None -> None

(* Every child started, so that a stop signal one of them (or what it
   started) sends is known for what it is. *)
let started_pids : (int, unit) Hashtbl.t = Hashtbl.create 64
let is_ours pid = Hashtbl.mem started_pids pid

let spawn_args args =
  (* This very program, whatever has become of its file since it started. *)
  let c = Child_process.spawn ~argv0:Sys.argv.(0) ~prog:"/proc/self/exe" ~args () in
  Hashtbl.replace started_pids (Child_process.pid c) ();
  c

let spawn ?(quiet = false) ?(kept = []) ~limit batch =
  let args =
    match batch with
    | [ (_, j) ] -> run_args j
    | (_, j) :: _ ->
        run_args { j with inject = None }
        @ List.concat_map (fun (_, j) -> match j.inject with Some i -> [ "--inject"; Injection.to_string i ] | None -> []) batch
    | [] -> invalid_arg "Runner.spawn: empty batch"
  in
  let point_limits = Array.of_list (List.map (fun (_, j) -> limit j) batch) in
  let limit = Array.fold_left ( +. ) 0. point_limits in
  let now = Unix.gettimeofday () in
  (* a batch's deadline moves with its points (advance_point) *)
  { rjobs = batch; child = spawn_args args; started = now; deadline = now +. point_limits.(0); limit; point_limits;
    points_begun = 0; watched = now; crowded = false; quiet; kept }

(* A batch is given each point's limit from the point's start, not the sum
   of its points' limits from its own: a point that never ends (rig looping
   in a flow) would hold its batch for hours otherwise. *)
let advance_point r now =
  if Array.length r.point_limits > 1 then begin
    let begun =
      List.fold_left (fun n l -> if String.starts_with ~prefix:"POINT\t" l then n + 1 else n) 0 (Child_process.records r.child)
    in
    if begun > r.points_begun then begin
      r.points_begun <- begun;
      r.deadline <- now +. r.point_limits.(min (begun - 1) (Array.length r.point_limits - 1))
    end
  end

(* The results of an ended (or killed) child, and the jobs of a batch that
   must run again alone. *)
let collect ?overstay r ended ~timed_out =
  let c = r.child in
  let records = Child_process.records c in
  let seconds = Unix.gettimeofday () -. r.started in
  match r.rjobs with
  | [ (i, j) ] ->
      let outcome =
        match overstay with
        | Some o -> o
        | None when timed_out && complete records ->
            (* Its case had ended: what hung is the exit (an exit handler). *)
            let _, where, rest = how_it_ended c None in
            Crashed (Printf.sprintf "did not exit within %.0f s after its end%s%s" r.limit where rest)
        | None when timed_out ->
            let flight = Child_process.in_flight c in
            Timed_out { limit = r.limit; running = Call_trace.describe flight; stuck = Call_trace.longest flight }
        | None -> outcome_of j c ended records
      in
      (match outcome with
      | Hung { fn; inside = None; _ } when not (Hashtbl.mem hangs (hang_key j fn)) ->
          (* A call that hung inside another (a callback's) hangs for what
             the outer call holds, not of itself: later runs still wait for it. *)
          Hashtbl.replace hangs (hang_key j fn) (Printf.sprintf "case %s, seed %d" j.case.name j.seed)
      | _ -> ());
      (* a crash wrote no TRACED records: the page says what it called *)
      let traced =
        match outcome with
        | Crashed _ when traced_of records = [] -> List.map (fun fn -> (fn, 1)) (Child_process.entered c)
        | _ -> traced_of records
      in
      ([ (i, { job = j; outcome; calls = calls_of records; traced; unjudged = unjudged_of j records; seconds }) ], [])
  | batch when overstay = None && (not timed_out) && (match ended with Some (Exited (0 | 1)) -> false | _ -> true) ->
      (* The batch failed after its points (at exit, say): each point again
         alone, so that the one to blame has its own verdict. *)
      ([], batch)
  | batch ->
      (* Ended early (a hang, the limit): the points that reached their end
         keep their verdict, the others run again alone. *)
      let segs = segments records in
      let n = List.length batch in
      List.fold_left
        (fun (ok, again, tainted) (k, (i, j)) ->
          match List.nth_opt segs k with
          | Some seg when complete seg && not tainted -> (
              match findings_of j seg with
              | Findings (_ :: _) when asynchronous j -> (ok, (i, j) :: again, true)
              | outcome ->
                  ((i, { job = j; outcome; calls = calls_of seg; traced = traced_of seg; unjudged = unjudged_of j seg; seconds = seconds /. float n }) :: ok, again, false))
          | _ -> (ok, (i, j) :: again, tainted))
        ([], [], false) (List.mapi (fun k x -> (k, x)) batch)
      |> fun (ok, again, _) -> (List.rev ok, List.rev again)

(* Waits until a child's descriptor has something, a child ends (its pipes
   close), or [timeout] passes. *)
let wait_for_any running timeout =
  let fds = List.concat_map (fun r -> Child_process.descriptors r.child) running in
  match Unix.select fds [] [] timeout with
  | _ -> ()
  | exception Unix.Unix_error (Unix.EINTR, _, _) -> ()

let end_strays running = ignore (Child_process.end_strays ~keep:(List.map (fun r -> Child_process.pid r.child) running))

(* Runs beyond [parallel] while the machine's cores idle: up to this many
   times [parallel], twice [parallel] more per look at the cores (most runs
   are short; one a look left the cores idle between looks). *)
let overcommit =
  match Sys.getenv_opt "RIG_CONFORM_OVERCOMMIT" with
  | Some v -> ( match int_of_string_opt v with Some n when n >= 1 -> n | _ -> 1)
  | None -> 8

(* Findings of crowded runs: run again, those that came again and those that
   did not; not run again, those that were all values. *)
type crowd_tally = { again : int; not_again : int; values_only : int }

let tally = ref { again = 0; not_again = 0; values_only = 0 }
let crowd_tally () = !tally

(* A quiet run's outcome, with the crowded run's findings that no load makes. *)
let with_kept kept outcome =
  match outcome with
  | _ when kept = [] -> outcome
  | Findings fs ->
      let known (k : Case.finding) = List.exists (fun (f : Case.finding) -> f.clause = k.clause && f.detail = k.detail) fs in
      Findings (fs @ List.filter (fun k -> not (known k)) kept)
  | Not_applicable _ -> Findings kept
  | other -> other

(* RIG_CONFORM_CROWD=always: take every chance to run beyond [parallel],
   idle cores or not (for tests of what a crowded run's findings become). *)
let always_crowd = Sys.getenv_opt "RIG_CONFORM_CROWD" = Some "always"

(* A run that printed its end just as its limit came is given a moment
   more to exit: judged at once, a loaded machine's slow exit would read as
   an exit handler that hangs. *)
let exit_grace = 1.

let deadline_of r now =
  if now > r.deadline && complete (Child_process.records r.child) then r.deadline +. exit_grace else r.deadline

(* A run expected to last less than this (its case's calibrated time) is
   short: its child's start and end are most of it. *)
let short_run_seconds = 0.1

let run_all ?(batch = fun _ -> 1) ?(cost = fun _ -> 0.) ?(crowd = true) ?(more = fun _ -> []) ?(flow = fun j -> j.inject <> None)
    ~parallel ~limit ~progress ~stop jobs =
  let results = ref (Array.make (List.length jobs) None) in
  (* The longest first: one started last would keep the others waiting. *)
  let batch_cost b = List.fold_left (fun acc (_, j) -> acc +. cost j) 0. b in
  let by_cost a b = Float.compare (batch_cost b) (batch_cost a) in
  let queue = ref (List.stable_sort by_cost (batches ~size:batch (List.mapi (fun i j -> (i, j)) jobs))) in
  (* Findings of runs that were crowded, to run again as [parallel] alone
     allows: a run beside more children than cores may have been starved of
     its time, and a finding a timing shows must not come of the runner's
     own load.  Their verdict is the second run's. *)
  let quiet_queue = ref [] in
  let running = ref [] in
  let finished = ref 0 in
  (* The machine's cores are watched only where runs may go beyond [parallel]. *)
  let crowd = crowd && overcommit > 1 in
  let idle = if crowd then Some (Idle_cores.create ()) else None in
  let busy = ref None in
  (* Whether the last window of the cores had half of them idle, less the
     short runs' own: the short ones beyond [parallel] need it as the
     longer ones do, but not a window of their own per start. *)
  let spare = ref false in
  let timed_out_cases = Hashtbl.create 8 in
  (* A run that crashed runs once more: a crash that does not come again
     (a heap the driver corrupted, seen at a later allocation) shows no
     violation of the case's clauses, and passes none of them either. *)
  let crashed_first = Hashtbl.create 4 in
  let rec finish ?(retry = false) (i, res) =
    match (res.outcome, Hashtbl.find_opt crashed_first i) with
    | Crashed how, None when retry && res.job.inject = None && not (stop ()) ->
        Hashtbl.replace crashed_first i (how, res);
        queue := [ (i, res.job) ] :: !queue
    | Crashed how, Some _ -> record (i, { res with outcome = Crashed (how ^ " (and again when run a second time)") })
    | again, Some (how, _) -> record (i, { res with outcome = Crashed_once { how; again } })
    | _, None -> record (i, res)
  and record (i, res) =
    !results.(i) <- Some res;
    (match res.outcome with
    | (Timed_out _ | Hung _ | Blocked _) when res.job.inject = None ->
        Hashtbl.replace timed_out_cases (res.job.case.name, res.job.mutant) ()
    | _ -> ());
    incr finished;
    progress !finished res.job;
    if not (stop ()) then add (more res)
  (* Jobs an ended one called for: indexed after all others, batched, and
     queued by their cost among those waiting. *)
  and add = function
    | [] -> ()
    | extra ->
        let n0 = Array.length !results in
        let grown = Array.make (n0 + List.length extra) None in
        Array.blit !results 0 grown 0 n0;
        results := grown;
        queue := List.stable_sort by_cost (!queue @ batches ~size:batch (List.mapi (fun k j -> (n0 + k, j)) extra))
  in
  let count f = tally := f !tally in
  let settle r (done_, again) =
    List.iter
      (fun ((i, res) as x) ->
        match res.outcome with
        | Findings (_ :: _ as fs) when r.crowded && (not r.quiet) && not (stop ()) ->
            (* A value no load can make stands; a timing runs again. *)
            if List.exists (fun (f : Case.finding) -> f.timing) fs then quiet_queue := !quiet_queue @ [ x ]
            else begin
              count (fun t -> { t with values_only = t.values_only + 1 });
              finish ~retry:true x
            end
        | outcome when r.quiet ->
            count (fun t ->
                match outcome with
                | Findings (_ :: _) -> { t with again = t.again + 1 }
                | _ -> { t with not_again = t.not_again + 1 });
            finish ~retry:true (i, { res with outcome = with_kept r.kept outcome })
        | _ -> finish ~retry:true x)
      done_;
    queue := List.map (fun x -> [ x ]) again @ !queue
  in
  (* Another seed of a case that hung would only hang as long again. *)
  let hung_already = function
    | [ (_, j) ] when j.inject = None -> Hashtbl.mem timed_out_cases (j.case.name, j.mutant)
    | _ -> false
  in
  let start ?quiet ?kept next =
    match spawn ?quiet ?kept ~limit next with
    | r -> running := r :: !running
    | exception (Unix.Unix_error _ | Sys_error _ as e) ->
        (* The child could not even start (the program was replaced, no
           processes left): a verdict on those runs, not the runner's end. *)
        List.iter
          (fun (i, j) -> finish (i, { job = j; outcome = Crashed ("could not start: " ^ Printexc.to_string e); calls = []; traced = []; unjudged = []; seconds = 0. }))
          next
  in
  let take next =
    if hung_already next then (incr finished; progress !finished (snd (List.hd next))) else start next
  in
  let take_next () =
    let next = List.hd !queue in
    queue := List.tl !queue;
    take next
  in
  (* The longest runs, first in the queue, mostly wait (holds, hangs,
     sleeps).  Beside them run the shortest, from the queue's end, which
     are mostly a child's start and end, all CPU: [parallel] of them at
     most at once, while the last look at the cores found half of them
     idle (each ends within a look or two: no look of its own), their
     cores counted as theirs in that look.  On a machine busy with other
     work, none: there every child more starves the others' timings (run
     at any load, they crowded the suite's certifications, and four SIG-3
     blind drivers passed).  Before, the short ones all ran last,
     [parallel] at a time, with nothing left to wait beside them:
     hostmem's certification at -j 2 took 8 s, now 5.6. *)
  let short b = batch_cost b < short_run_seconds in
  let shorts_running () = List.length (List.filter (fun r -> short r.rjobs) !running) in
  let take_short () =
    match List.rev !queue with
    | last :: rest when short last && shorts_running () < parallel ->
        queue := List.rev rest;
        take last
    | _ -> ()
  in
  let quiet_running () = List.exists (fun r -> r.quiet) !running in
  let points_only batch = List.for_all (fun (_, j) -> flow j) batch in
  let only_points_running () = List.for_all (fun r -> points_only r.rjobs) !running in
  while (!queue <> [] && not (stop ())) || !quiet_queue <> [] || !running <> [] do
    if stop () then begin
      (* Interrupted: what still runs says nothing about the driver. *)
      List.iter (fun r -> ignore (Child_process.finish r.child)) !running;
      running := [];
      (* A crowded run's findings stand when there is no time to run it again. *)
      List.iter record !quiet_queue;
      quiet_queue := []
    end
    else begin
      (* Runs again of findings come last, when no more than [parallel] run
         (one wait for the crowd to thin, not one per finding). *)
      if !queue = [] && !quiet_queue <> [] then begin
        if List.length !running < parallel then begin
          let i, first = List.hd !quiet_queue in
          quiet_queue := List.tl !quiet_queue;
          let kept = match first.outcome with Findings fs -> List.filter (fun (f : Case.finding) -> not f.timing) fs | _ -> [] in
          start ~quiet:true ~kept [ (i, first.job) ]
        end
      end
      else begin
        while List.length !running < parallel && !queue <> [] do take_next () done;
        (* More, beyond [parallel], while at least half the cores it stands
           for (of the machine's) idle and nothing runs again quietly. *)
        match idle with
        | None -> ()
        | Some idle ->
          let half = float (min parallel (Idle_cores.machine_cores idle)) /. 2. in
          (* the zygote's CPU too: it forks every child *)
          let own_cpu () =
            Idle_cores.children_cpu ~running:(Option.to_list (Zygote.pid ()) @ List.map (fun r -> Child_process.pid r.child) !running)
          in
          (match Idle_cores.busy ~own_cpu idle with
          | Some b ->
              busy := Some b;
              spare := b -. float (shorts_running ()) <= half
          | None -> ());
          if always_crowd then (busy := Some 0.; spare := true);
          (if !queue <> [] && List.length !running < parallel * overcommit && not (quiet_running ()) then
            match !busy with
            | Some b when b -. float (shorts_running ()) <= half ->
                (* The cores the runs starting now use show in the next window. *)
                busy := None;
                for _ = 1 to 2 * parallel do
                  if !queue <> [] && List.length !running < parallel * overcommit then take_next ()
                done;
                if List.length !running > parallel then List.iter (fun r -> r.crowded <- true) !running
            | _ -> ());
          (* Where only injection points run and wait to run (the reference
             rig's flows, each failed at one call: mostly holds and hang
             bounds; [flow]), and the machine's other work leaves half its cores
             idle, every slot fills at once, four times as many: their own CPU
             (all the short ones') starves nobody else's timing, and a
             timing they find runs again alone.  A sweep on an idle machine
             otherwise took 4.4 s for 1,419 points, its waiting points let in
             four per look at the cores while the short ones kept both busy. *)
          (match Idle_cores.others_busy idle with
          | Some others when others <= half && !queue <> [] && (not (quiet_running ())) && only_points_running () ->
              while !queue <> [] && points_only (List.hd !queue) && List.length !running < 4 * parallel * overcommit do
                take_next ()
              done;
              if List.length !running > parallel then List.iter (fun r -> r.crowded <- true) !running
          | _ -> ());
          if !spare && !queue <> [] && List.length !running < parallel * overcommit && List.length !running >= parallel
             && not (quiet_running ()) then begin
            for _ = 1 to parallel do take_short () done;
            if List.length !running > parallel then List.iter (fun r -> r.crowded <- true) !running
          end
      end;
      let now = Unix.gettimeofday () in
      let nearest = List.fold_left (fun a r -> Float.min a (deadline_of r now -. now)) 0.05 !running in
      wait_for_any !running (Float.max 0.001 nearest);
      let still = ref [] and ended_any = ref false in
      List.iter
        (fun r ->
          Child_process.drain r.child;
          advance_point r (Unix.gettimeofday ());
          match Child_process.ended r.child with
          | Some _ ->
              let ended = Child_process.finish r.child in
              ended_any := true;
              settle r (collect r ended ~timed_out:false)
          | None when (let now = Unix.gettimeofday () in now > deadline_of r now) ->
              ignore (Child_process.finish r.child);
              ended_any := true;
              settle r (collect r None ~timed_out:true)
          | None -> (
              (* The calls in flight, a few times a second: cheap enough. *)
              let now = Unix.gettimeofday () in
              let look = now -. r.watched > 0.1 in
              if look then r.watched <- now;
              match if look then overstayed (snd (List.hd r.rjobs)) r.child else None with
              | Some o ->
                  ignore (Child_process.finish r.child);
                  ended_any := true;
                  settle r (collect ~overstay:o r None ~timed_out:false)
              | None -> still := r :: !still))
        !running;
      running := List.rev !still;
      if !ended_any then end_strays !running
    end
  done;
  end_strays [];
  (* interrupted before a second run of a crash ended: the crash stands *)
  Hashtbl.iter (fun i (_, first) -> if !results.(i) = None then !results.(i) <- Some first) crashed_first;
  Array.to_list !results |> List.filter_map Fun.id

let run_command ~args ~limit =
  let c = spawn_args args in
  let deadline = Unix.gettimeofday () +. limit in
  let rec loop () =
    match Child_process.ended c with
    | Some _ -> `Ended (Child_process.finish c)
    | None when Unix.gettimeofday () > deadline -> ignore (Child_process.finish c); `Timed_out
    | None ->
        (match Unix.select (Child_process.descriptors c) [] [] 0.05 with
        | _ -> ()
        | exception Unix.Unix_error (Unix.EINTR, _, _) -> ());
        Child_process.drain c;
        loop ()
  in
  let how = loop () in
  end_strays [];
  let records = Child_process.records c in
  match how with
  | `Ended (Some (Exited 0)) when complete records -> Ok records
  | `Ended ended ->
      let what, where, rest = how_it_ended c ended in
      Error (Printf.sprintf "%s%s%s" what where rest)
  | `Timed_out ->
      let _, where, rest = how_it_ended c None in
      Error (Printf.sprintf "did not end within %.0f s%s%s" limit where rest)
