let () = List.iter (Printf.printf "%d ") Rig_edge_primitives.fault_signals; print_newline ();
Printf.printf "sigsegv=%d sigusr2=%d\n" Sys.sigsegv Sys.sigusr2
