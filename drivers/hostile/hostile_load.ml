(* A plugin that misbehaves as it is loaded (module initialisation), in the
   certifier and in each of its children alike: what it does is chosen by
   the environment variable HOSTILE_LOAD (the certifier's children inherit
   it), a comma-separated list of
     segv, abort, exit0, exit3, _exit, loop, block  die or never end: the
                          plugin fails to load;
     raise                its initialisation raises Failure with bytes
                          that are not UTF-8;
     sigint-handler, sigterm-handler  installs a handler that does nothing
                          for SIGINT / SIGTERM (sigaction, in C);
     signal-handlers      both;
     sigterm-ignore, sigint-ignore    sets the signal to SIG_IGN;
     chdir                moves to / ;
     atexit-hang, atexit-abort  registers an at_exit handler that blocks
                          forever / aborts;
     fork                 forks a child that sleeps forever;
     thread               starts a C thread, every signal blocked, that
                          prints forged protocol lines and bad bytes on
                          stdout and stderr every 20 ms, for ever;
     none (or unset)      nothing.
   An unknown word aborts the load with Failure.

   It registers two drivers:
     hostile-load           exactly hostmem;
     hostile-crash-then-hang  hostmem whose alloc segfaults in the first
                          process of the certification to call it, and
                          never returns (block) in the second (tokens in
                          $HOSTILE_PIDDIR; without it, alloc is hostmem's).
   Each process that misbehaves leaves its pid in $HOSTILE_PIDDIR. *)

module C = Hostile_c
module H = Hostmem.D

let act = function
  | "" | "none" -> ()
  | "raise" -> C.note_pid (); failwith ("hostile load: " ^ C.bad_bytes)
  | "sigint-handler" -> C.handle_nothing C.sigint
  | "sigterm-handler" -> C.handle_nothing C.sigterm
  | "signal-handlers" -> C.handle_nothing C.sigint; C.handle_nothing C.sigterm
  | "sigterm-ignore" -> C.ignore_signal C.sigterm
  | "sigint-ignore" -> C.ignore_signal C.sigint
  | "chdir" -> C.chdir "/"
  | "atexit-hang" -> C.note_pid (); at_exit C.block
  | "atexit-abort" -> C.note_pid (); at_exit C.abort
  | "fork" -> C.fork_sleepers 1
  | "thread" -> C.start_forger ()
  | w -> (
      match List.assoc_opt w C.ways with
      | Some die -> die ()
      | None -> failwith ("HOSTILE_LOAD: unknown behaviour " ^ w))

let () =
  List.iter act (String.split_on_char ',' (Option.value (Sys.getenv_opt "HOSTILE_LOAD") ~default:""))

let () =
  C.register "hostile-load" (module H);
  C.register "hostile-crash-then-hang"
    (module struct
      include H
      let alloc d m n =
        if C.take_token "crash" then C.segv () else if C.take_token "hang" then C.block ();
        H.alloc d m n
    end)
