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
  | true, _ -> ( match na with Some why when findings = [] -> Not_applicable why | _ -> Findings findings)
  | false, Unix.WSIGNALED s ->
      Crashed (Printf.sprintf "killed by %s; last output: %s" (signal_name s) (last_lines 5 (out ^ err)))
  | false, (Unix.WEXITED c | Unix.WSTOPPED c) ->
      Crashed (Printf.sprintf "exited %d before its end; last output: %s" c (last_lines 5 (out ^ err)))

type running = { rjob : int * job; pid : int; out : string; err : string; started : float }

let spawn (i, j) =
  let out = Filename.temp_file "rig-case" ".out" and err = Filename.temp_file "rig-case" ".err" in
  let fd_out = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let fd_err = Unix.openfile err [ O_WRONLY; O_TRUNC ] 0o600 in
  let argv = Array.of_list (Sys.executable_name :: run_args j) in
  let pid = Unix.create_process Sys.executable_name argv Unix.stdin fd_out fd_err in
  Unix.close fd_out;
  Unix.close fd_err;
  { rjob = (i, j); pid; out; err; started = Unix.gettimeofday () }

let collect r status ~timed_out ~timeout =
  let _, j = r.rjob in
  let out = read_file r.out and err = read_file r.err in
  Sys.remove r.out;
  Sys.remove r.err;
  let outcome = if timed_out then Timed_out timeout else parse j ~status ~out ~err in
  let calls =
    String.split_on_char '\n' out
    |> List.filter_map (fun l ->
           match String.split_on_char '\t' l with
           | [ "CALLS"; fn; n ] -> Option.map (fun n -> (fn, n)) (int_of_string_opt n)
           | _ -> None)
  in
  { job = j; outcome; calls; seconds = Unix.gettimeofday () -. r.started }

let run_all ~parallel ~timeout ~progress ~stop jobs =
  let results = Array.make (List.length jobs) None in
  let queue = ref (List.mapi (fun i j -> (i, j)) jobs) in
  let running = ref [] in
  let finished = ref 0 in
  let finish r res =
    results.(fst r.rjob) <- Some res;
    incr finished;
    progress !finished res.job
  in
  let kill r = try Unix.kill r.pid Sys.sigkill with Unix.Unix_error _ -> () in
  while (!queue <> [] && not (stop ())) || !running <> [] do
    if stop () then List.iter kill !running;
    while List.length !running < parallel && !queue <> [] && not (stop ()) do
      let ((i, j) as next) = List.hd !queue in
      queue := List.tl !queue;
      match spawn next with
      | r -> running := r :: !running
      | exception (Unix.Unix_error _ | Sys_error _ as e) ->
          (* The child could not even start (the program was replaced, no
             processes left): a verdict on that run, not the runner's end. *)
          results.(i) <- Some { job = j; outcome = Crashed ("could not start: " ^ Printexc.to_string e); calls = []; seconds = 0. };
          incr finished;
          progress !finished j
    done;
    let still = ref [] in
    List.iter
      (fun r ->
        match Unix.waitpid [ Unix.WNOHANG ] r.pid with
        | 0, _ ->
            if Unix.gettimeofday () -. r.started > timeout then begin
              kill r;
              let _, status = Unix.waitpid [] r.pid in
              finish r (collect r status ~timed_out:true ~timeout)
            end
            else still := r :: !still
        | _, status -> finish r (collect r status ~timed_out:false ~timeout)
        | exception Unix.Unix_error (Unix.EINTR, _, _) -> still := r :: !still)
      !running;
    running := List.rev !still;
    (* Polling the children is the runner's own pacing, not a test's. *)
    if !running <> [] then Thread.delay 0.005
  done;
  Array.to_list results |> List.filter_map Fun.id
