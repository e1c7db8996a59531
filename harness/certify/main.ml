(* rig-conform: the command line's entry (harness/cli has the subcommands).
   The channel to a certifier, when this is its child, is taken first,
   before any driver code is loaded. *)

let () = Channel.attach_from_environment ()

let dispatch = function
  | [] | ("-h" | "--help" | "help") :: _ -> print_string Cli.help
  | "certify" :: rest -> Cmd_certify.main rest
  | "run" :: rest -> Cmd_run.run rest
  | "describe" :: rest -> Cmd_run.describe rest
  | "selftest" :: rest -> Session.start (); Cmd_selftest.main rest
  | "sweep" :: rest -> Session.start (); Cmd_sweep.sweep rest
  | "async-sweep" :: rest -> Session.start (); Cmd_sweep.async_sweep rest
  | "calibrate" :: rest -> Cmd_calibrate.main rest
  | "list" :: rest -> Cmd_list.main rest
  | "bench" :: rest -> Bench.main rest
  | cmd :: _ -> Cli.usage_error "unknown subcommand %S" cmd

(* A zygote serves here, and each child it makes runs as if started anew.
   Dynlink's table of the program's own units, which each child loading a
   driver would build (a sixth of a child's page faults), is built once. *)
let () =
  Zygote.serve_if_asked
    ~warm:(fun () -> ignore (Dynlink.main_program_units ()))
    ~run:(fun args -> Channel.attach_from_environment (); dispatch args)
let () = dispatch (List.tl (Array.to_list Sys.argv))
