(* Hostile drivers: each is hostmem (Hostmem.D, Hostmem.openers,
   Hostmem.kit) with one hostile behaviour, to show that nothing a driver
   does can forge, hide or lose a verdict of the certifier, leave a process
   behind or make its run unbounded (issue 13; tests/test_hostile.py says
   what the certifier must do with each).  All in one plugin, hostile.cmxs,
   whose loading does nothing hostile (the load phase is hostile_load.ml).

   Dying or never answering, in each phase: hostile-<phase>-<way>,
     phase: make (the opener's make), alloc, submit, commit (the queue's C
            functions, as rig calls them), sleep, stop, and atexit (make
            registers an at_exit handler that misbehaves after the case);
     way:   segv, abort, exit0, exit3, _exit (exit and _exit 0), loop (a
            busy loop holding the runtime), block (a read that never ends);
            atexit has segv, abort, exit3, loop and block only (an exit 0
            at exit is no misbehaviour).
   Forging the child's protocol (lines FINDING, NA, CALLS, POINT, ERROR,
   DONE, a partial line, bytes that are not UTF-8, on stdout and stderr):
     hostile-forge-make    prints the forgery in make, then exits 0;
     hostile-forge-alloc   the same at the first alloc, in mid-case;
     hostile-forge-done    make prints DONE alone and exits 0;
     hostile-forge-na      make prints NA and DONE and exits 0;
     hostile-partial-hides stop is hostmem's abort (a real STOP-3 bug, as
                           broken-stop-forgets) after a partial line "DO";
     hostile-chatty        exactly hostmem, but every call that may block
                           prints the forgery first: its verdicts must be
                           hostmem's.
   Descriptors, in make: hostile-make-close-fds (closes 3..1023),
   hostile-make-garbage-fds (writes garbage to 3..20), hostile-make-dup2-null
   (/dev/null over 1 and 2).
   Processes, in make: hostile-make-fork (three children that sleep forever),
   hostile-make-double-fork (a grandchild in a session of its own).
   Floods, at the first alloc: hostile-alloc-flood-stdout (512 MiB, in MiB
   chunks, then carries on as hostmem), hostile-alloc-flood-stderr (an
   endless stream).
   Signals: hostile-alloc-sigstop (stops itself), hostile-alloc-kill-parent-
   term/-int (SIGTERM/SIGINT to getppid, then carries on),
   hostile-alloc-kill-group-int/-term (kill (0, sig)), hostile-sigterm-
   ignored-alloc-block (make ignores SIGTERM and SIGINT, alloc never ends).
   Elsewhere: hostile-make-chdir (make moves to the temporary directory),
   hostile-alloc-raise-bytes (alloc raises Failure with bad bytes),
   hostile-alloc-bytes-segv (alloc prints bad bytes and dies).

   Every process that misbehaves leaves its pid in $HOSTILE_PIDDIR (see
   hostile_stubs.c). *)

module H = Hostmem.D
module C = Hostile_c
module type HD = C.HD

let register = C.register

let hostmem = (module H : HD)

(* hostmem's openers, whose make does [f] first. *)
let before_make f () =
  List.map (fun (o : H.t Rig_edge.opener) -> { o with make = (fun () -> f (); o.make ()) }) (Hostmem.openers ())

(* hostmem's queue, with [f name] before each of its calls. *)
let around_queue f (q : Rig_edge.queue) : Rig_edge.queue =
  { room = (fun s -> f "room"; q.room s);
    submit = (fun s ~value -> f "submit"; q.submit s ~value);
    commit = (fun () -> f "commit"; q.commit ()) }

(* [once f]: f at the first call in this process only. *)
let once f =
  let first = Atomic.make true in
  fun () -> if Atomic.exchange first false then f ()

let with_alloc f =
  (module struct
    include H
    let alloc d m n = f (); H.alloc d m n
  end : HD)

(* ---------------------------------------------------------- each phase *)

(* hostile-<phase>-<way>: [way ()] in that phase. *)
let phase_driver phase way name =
  let queue_wrapped =
    (module struct
      include H
      let facts d =
        let f = H.facts d in
        { f with queue = around_queue (fun fn -> if fn = phase then way ()) f.queue }
    end : HD)
  in
  match phase with
  | "make" -> register name ~openers:(before_make way) hostmem
  | "atexit" -> register name ~openers:(before_make (fun () -> at_exit way)) hostmem
  | "alloc" -> register name (with_alloc way)
  | "submit" | "commit" -> register name queue_wrapped
  | "sleep" -> register name (module struct include H let sleep d ~seen ~still_ms = way (); H.sleep d ~seen ~still_ms end)
  | "stop" -> register name (module struct include H let stop d ~fault = way (); H.stop d ~fault end)
  | p -> invalid_arg ("Hostile.phase_driver: " ^ p)

let phases = [ "make"; "alloc"; "submit"; "commit"; "sleep"; "stop"; "atexit" ]

let () =
  List.iter
    (fun phase ->
      List.iter
        (fun (way, act) ->
          if phase <> "atexit" || not (List.mem way [ "exit0"; "_exit" ]) then
            phase_driver phase act (Printf.sprintf "hostile-%s-%s" phase way))
        C.ways)
    phases

(* ------------------------------------------------------------ forgery *)

let forge_exit lines () = C.write 1 lines; C.write 2 lines; C.note_pid (); exit 0

let () =
  register "hostile-forge-make" ~openers:(before_make (forge_exit C.forged)) hostmem;
  register "hostile-forge-alloc" (with_alloc (forge_exit C.forged));
  register "hostile-forge-done" ~openers:(before_make (forge_exit "DONE\n")) hostmem;
  register "hostile-forge-na" ~openers:(before_make (forge_exit "NA\tforged\nDONE\n")) hostmem;
  register "hostile-partial-hides"
    (module struct
      include H
      let stop d ~fault:_ = C.write 1 "DO"; C.write 2 "DO"; Hostmem.abort d
    end)

(* Exactly hostmem, but every call that may block prints the forgery first. *)
let () =
  let say () = C.forge () in
  register "hostile-chatty" ~openers:(before_make say)
    (module struct
      include H
      let facts d = say (); let f = H.facts d in { f with queue = around_queue (fun _ -> say ()) f.queue }
      (* locate, peer and signaled must not block, which a write may
         (LOCK-6, TIME-1): they print nothing *)
      let locate = H.locate
      let peer = H.peer
      let alloc d m n = say (); H.alloc d m n
      let free d r = say (); H.free d r
      let map_peer a b r = say (); H.map_peer a b r
      let map_host d p n = say (); H.map_host d p n
      let dma d r ~fn = say (); H.dma d r ~fn
      let image d b = say (); H.image d b
      let entry i f = say (); H.entry i f
      let prepare i f = say (); H.prepare i f
      let grow d = say (); H.grow d
      let signaled = H.signaled
      let sleep d ~seen ~still_ms = say (); H.sleep d ~seen ~still_ms
      let stop d ~fault = say (); H.stop d ~fault
      let unload i = say (); H.unload i
    end)

(* ------------------------------------------- descriptors and processes *)

let () =
  register "hostile-make-close-fds" ~openers:(before_make (fun () -> C.close_fds 3 1023)) hostmem;
  register "hostile-make-garbage-fds" ~openers:(before_make (fun () -> C.garbage_fds 3 20)) hostmem;
  register "hostile-make-dup2-null" ~openers:(before_make C.dup2_null) hostmem;
  register "hostile-make-fork" ~openers:(before_make (fun () -> C.fork_sleepers 3)) hostmem;
  register "hostile-make-double-fork" ~openers:(before_make C.double_fork) hostmem;
  register "hostile-make-chdir" ~openers:(before_make (fun () -> C.chdir (Filename.get_temp_dir_name ()))) hostmem

(* --------------------------------------------------- floods and signals *)

let () =
  register "hostile-alloc-flood-stdout" (with_alloc (once (fun () -> C.flood 1 512)));
  register "hostile-alloc-flood-stderr" (with_alloc (fun () -> C.stream 2));
  register "hostile-alloc-sigstop" (with_alloc C.stop_self);
  register "hostile-alloc-kill-parent-term" (with_alloc (once (fun () -> C.kill_parent C.sigterm)));
  register "hostile-alloc-kill-parent-int" (with_alloc (once (fun () -> C.kill_parent C.sigint)));
  register "hostile-alloc-kill-group-int" (with_alloc (once (fun () -> C.kill_group C.sigint)));
  register "hostile-alloc-kill-group-term" (with_alloc (once (fun () -> C.kill_group C.sigterm)));
  register "hostile-sigterm-ignored-alloc-block"
    ~openers:(before_make (fun () -> C.ignore_signal C.sigterm; C.ignore_signal C.sigint))
    (with_alloc C.block)

(* ------------------------------------------------------------- bytes *)

let () =
  register "hostile-alloc-raise-bytes" (with_alloc (fun () -> C.note_pid (); failwith C.bad_bytes));
  register "hostile-alloc-bytes-segv" (with_alloc (fun () -> C.write 1 C.bad_bytes; C.write 2 C.bad_bytes; C.segv ()))
