(* run's watch over its own case; see run_watch.mli. *)

let me = Cli.me

let rec reap pid = try snd (Unix.waitpid [] pid) with Unix.Unix_error (Unix.EINTR, _, _) -> reap pid

(* [ended] is the read end of a pipe whose write end only the child holds:
   it reads end-of-file the moment the child exits, or earlier if the
   driver closes it; after that the calls in flight are looked at every
   10 ms until the child is reaped. *)
let watch (case : Case.t) pid page ended =
  let open_ = ref true in
  (* The child leads a session of its own: what the driver started there
     goes with it; what it moved out was re-parented here (a subreaper). *)
  let kill_session () = try Unix.kill (-pid) Sys.sigkill with Unix.Unix_error _ -> () in
  let kill () =
    kill_session ();
    try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ()
  in
  let exit code =
    kill_session ();
    ignore (Child_process.end_strays ~keep:[]);
    exit code
  in
  let on_signal code = Sys.Signal_handle (fun _ -> kill (); ignore (reap pid); exit code) in
  Sys.set_signal Sys.sigint (on_signal 130);
  Sys.set_signal Sys.sigterm (on_signal 143);
  let rec loop () =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> loop ()
    | 0, _ -> (
        match Runner.overstayed_call ~deadlocked:(Lock_wait.forever ~pid) (Call_trace.in_flight page) with
        | None | Some (`Blocked _) ->
            (if not !open_ then Unix.sleepf 0.01
             else
               match Unix.select [ ended ] [] [] 0.1 with
               | [], _, _ -> ()
               | _ -> ( try if Unix.read ended (Bytes.create 1) 0 1 = 0 then open_ := false with Unix.Unix_error _ -> open_ := false)
               | exception Unix.Unix_error (Unix.EINTR, _, _) -> ());
            loop ()
        | Some (`Hung (fn, s, inside, deadlock)) ->
            kill ();
            ignore (reap pid);
            let clause = match Report.clause_of_hang ?inside case fn with Some c -> c | None -> String.concat "," case.clauses in
            Printf.printf "HUNG\t%s\t%.0f\t%s\n%!" fn s clause;
            let inside = match inside with Some o -> " (called inside " ^ o ^ ")" | None -> "" in
            if deadlock then
              Printf.eprintf "%s: the driver's %s%s deadlocked: after %.1f s its thread waited for good on a mutex (a chain of owners that comes back on itself; a hang there is %s's); the case was killed\n%!" me fn inside s clause
            else
              Printf.eprintf "%s: the driver's %s%s did not return within %.0f s (a hang there is %s's); the case was killed\n%!" me fn inside s clause;
            exit 1)
    | _, Unix.WEXITED n -> exit n
    | _, Unix.WSIGNALED n ->
        Printf.eprintf "%s: the case's process was killed by %s\n%!" me (Runner.signal_name n);
        exit 1
    | _, Unix.WSTOPPED _ -> loop ()
  in
  loop ()

let fork_watched case =
  if not (Channel.to_certifier ()) then begin
    let page = Call_trace.create () in
    flush stdout;
    flush stderr;
    let ended, alive = Unix.pipe ~cloexec:true () in
    Child_process.become_subreaper ();
    match Unix.fork () with
    | 0 ->
        Unix.close ended;
        ignore (Unix.setsid ());
        ignore (Call_trace.attach_page page)
    | pid ->
        Unix.close alive;
        watch case pid page ended
  end
