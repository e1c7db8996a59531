(* Child processes for cases; see runner.mli.  The child writes its outcome
   as lines "FINDING\tclause\tdetail", "NA\treason", "ERROR\ttext", then
   "DONE"; a child that dies before "DONE" crashed. *)

type job = {
  case : Case.t;
  seed : int;
  driver : string;
  plugins : string list;
  mutant : string option;
  inject : Injection.t option;
}

type outcome =
  | Findings of Case.finding list
  | Not_applicable of string
  | Crashed of string
  | Timed_out of float

type result = { job : job; outcome : outcome; calls : (string * int) list; seconds : float }

let run_args j =
  [ "run" ]
  @ List.concat_map (fun p -> [ "--plugin"; p ]) j.plugins
  @ [ "--driver"; j.driver; "--case"; j.case.name; "--seed"; string_of_int j.seed ]
  @ (match j.mutant with Some m -> [ "--mutant"; m ] | None -> [])
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

let child (drv : Drivers.t) j =
  let say fmt = Printf.printf (fmt ^^ "\n%!") in
  let code =
    try
      match (j.case.run drv.package ~seed:j.seed : Case.result) with
      | Ran fs ->
          List.iter (fun (f : Case.finding) -> say "FINDING\t%s\t%s" f.clause (clean f.detail)) fs;
          if fs = [] then 0 else 1
      | Not_applicable why -> say "NA\t%s" (clean why); 0
    with e -> say "ERROR\t%s" (clean (Printexc.to_string e)); 1
  in
  List.iter (fun (fn, n) -> say "CALLS\t%s\t%d" fn n) (Case.reported_calls ());
  say "DONE";
  code

let read_file path = In_channel.with_open_bin path In_channel.input_all

let last_lines n text =
  let lines = List.filter (( <> ) "") (String.split_on_char '\n' text) in
  let k = List.length lines in
  String.concat " | " (List.filteri (fun i _ -> i >= k - n) lines)

(* OCaml's numbers for signals are its own: name the common ones. *)
let signal_name s =
  let names =
    Sys.[ (sigsegv, "SIGSEGV"); (sigabrt, "SIGABRT"); (sigbus, "SIGBUS"); (sigfpe, "SIGFPE"); (sigill, "SIGILL");
          (sigkill, "SIGKILL"); (sigterm, "SIGTERM"); (sigint, "SIGINT"); (sigtrap, "SIGTRAP"); (sigsys, "SIGSYS") ]
  in
  match List.assoc_opt s names with Some n -> n | None -> Printf.sprintf "signal %d" s

let parse j ~status ~out ~err =
  let lines = String.split_on_char '\n' out in
  let done_ = List.mem "DONE" lines in
  let fields l = String.split_on_char '\t' l in
  let na = List.find_map (fun l -> match fields l with [ "NA"; why ] -> Some why | _ -> None) lines in
  let findings =
    List.concat_map
      (fun l ->
        match fields l with
        | [ "FINDING"; clause; detail ] -> [ { Case.clause; detail } ]
        | [ "ERROR"; text ] ->
            List.map (fun clause -> { Case.clause; detail = "the case raised " ^ text }) j.case.clauses
        | _ -> [])
      lines
  in
  match (done_, status) with
  | true, Unix.WEXITED (0 | 1) -> ( match na with Some why when findings = [] -> Not_applicable why | _ -> Findings findings)
  | true, Unix.WEXITED c ->
      (* After its end: a sanitizer's report at exit (LeakSanitizer), an
         exit handler that failed. *)
      Crashed (Printf.sprintf "exited %d after its end; last output: %s" c (last_lines 5 (out ^ err)))
  | true, Unix.WSIGNALED s ->
      Crashed (Printf.sprintf "killed by %s after its end; last output: %s" (signal_name s) (last_lines 5 (out ^ err)))
  | true, Unix.WSTOPPED _ -> ( match na with Some why when findings = [] -> Not_applicable why | _ -> Findings findings)
  | false, Unix.WSIGNALED s ->
      Crashed (Printf.sprintf "killed by %s; last output: %s" (signal_name s) (last_lines 5 (out ^ err)))
  | false, (Unix.WEXITED c | Unix.WSTOPPED c) ->
      Crashed (Printf.sprintf "exited %d before its end; last output: %s" c (last_lines 5 (out ^ err)))

(* A batch: jobs alike but for their injection, run one after another in one
   child ([run] with several --inject), each point's output after a line
   "POINT\t<injection>".  A point whose output has no DONE (the child crashed
   or hung there) runs again alone, so that its verdict is the one its own
   process gives. *)
let batchable j =
  match j.inject with Some i -> Injection.async_at i = None && Injection.wait_at i = None | None -> false

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

type running = { rjobs : (int * job) list; pid : int; out : string; err : string; started : float }

let spawn batch =
  let out = Filename.temp_file "rig-case" ".out" and err = Filename.temp_file "rig-case" ".err" in
  let fd_out = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let fd_err = Unix.openfile err [ O_WRONLY; O_TRUNC ] 0o600 in
  let args =
    match batch with
    | [ (_, j) ] -> run_args j
    | (_, j) :: _ ->
        run_args { j with inject = None }
        @ List.concat_map (fun (_, j) -> match j.inject with Some i -> [ "--inject"; Injection.to_string i ] | None -> []) batch
    | [] -> invalid_arg "Runner.spawn: empty batch"
  in
  let argv = Array.of_list (Sys.executable_name :: args) in
  let pid = Unix.create_process Sys.executable_name argv Unix.stdin fd_out fd_err in
  Unix.close fd_out;
  Unix.close fd_err;
  { rjobs = batch; pid; out; err; started = Unix.gettimeofday () }

let calls_of out =
  String.split_on_char '\n' out
  |> List.filter_map (fun l ->
         match String.split_on_char '\t' l with
         | [ "CALLS"; fn; n ] -> Option.map (fun n -> (fn, n)) (int_of_string_opt n)
         | _ -> None)

(* The output of each point of a batch, in order. *)
let segments out =
  let rec go acc cur = function
    | [] -> List.rev (match cur with Some c -> String.concat "\n" (List.rev c) :: acc | None -> acc)
    | l :: rest when String.starts_with ~prefix:"POINT\t" l ->
        let acc = match cur with Some c -> String.concat "\n" (List.rev c) :: acc | None -> acc in
        go acc (Some []) rest
    | l :: rest -> go acc (Option.map (fun c -> l :: c) cur) rest
  in
  go [] None (String.split_on_char '\n' out)

(* The results of a finished (or killed) child, and the jobs of a batch
   that must run again alone. *)
let collect r status ~timed_out ~timeout =
  let out = read_file r.out and err = read_file r.err in
  Sys.remove r.out;
  Sys.remove r.err;
  let seconds = Unix.gettimeofday () -. r.started in
  match r.rjobs with
  | [ (i, j) ] ->
      let outcome = if timed_out then Timed_out timeout else parse j ~status ~out ~err in
      ([ (i, { job = j; outcome; calls = calls_of out; seconds }) ], [])
  | batch when (match status with Unix.WEXITED (0 | 1) -> false | _ -> true) && not timed_out ->
      (* The batch failed after its points (at exit, say): each point again
         alone, so that the one to blame has its own verdict. *)
      ([], batch)
  | batch ->
      let segs = segments out in
      let n = List.length batch in
      List.fold_left
        (fun (ok, again) (k, (i, j)) ->
          match List.nth_opt segs k with
          | Some seg when List.mem "DONE" (String.split_on_char '\n' seg) ->
              let outcome = parse j ~status:(Unix.WEXITED 0) ~out:seg ~err:"" in
              ((i, { job = j; outcome; calls = calls_of seg; seconds = seconds /. float n }) :: ok, again)
          | _ -> (ok, (i, j) :: again))
        ([], []) (List.mapi (fun k x -> (k, x)) batch)
      |> fun (ok, again) -> (List.rev ok, List.rev again)

let run_all ?(batch = fun _ -> 1) ~parallel ~timeout ~progress ~stop jobs =
  let results = Array.make (List.length jobs) None in
  let queue = ref (batches ~size:batch (List.mapi (fun i j -> (i, j)) jobs)) in
  let running = ref [] in
  let finished = ref 0 in
  let finish (i, res) =
    results.(i) <- Some res;
    incr finished;
    progress !finished res.job
  in
  let settle (done_, again) =
    List.iter finish done_;
    queue := List.map (fun x -> [ x ]) again @ !queue
  in
  let kill r = try Unix.kill r.pid Sys.sigkill with Unix.Unix_error _ -> () in
  while (!queue <> [] && not (stop ())) || !running <> [] do
    if stop () then List.iter kill !running;
    while List.length !running < parallel && !queue <> [] && not (stop ()) do
      let next = List.hd !queue in
      queue := List.tl !queue;
      match spawn next with
      | r -> running := r :: !running
      | exception (Unix.Unix_error _ | Sys_error _ as e) ->
          (* The child could not even start (the program was replaced, no
             processes left): a verdict on those runs, not the runner's end. *)
          List.iter
            (fun (i, j) -> finish (i, { job = j; outcome = Crashed ("could not start: " ^ Printexc.to_string e); calls = []; seconds = 0. }))
            next
    done;
    let still = ref [] in
    List.iter
      (fun r ->
        match Unix.waitpid [ Unix.WNOHANG ] r.pid with
        | 0, _ ->
            if Unix.gettimeofday () -. r.started > timeout then begin
              kill r;
              let _, status = Unix.waitpid [] r.pid in
              settle (collect r status ~timed_out:true ~timeout)
            end
            else still := r :: !still
        | _, status -> settle (collect r status ~timed_out:false ~timeout)
        | exception Unix.Unix_error (Unix.EINTR, _, _) -> still := r :: !still)
      !running;
    running := List.rev !still;
    (* Polling the children is the runner's own pacing, not a test's. *)
    if !running <> [] then Thread.delay 0.005
  done;
  Array.to_list results |> List.filter_map Fun.id
