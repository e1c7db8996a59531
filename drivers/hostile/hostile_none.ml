(* A plugin that registers no driver: loading it does nothing at all.  The
   certifier must refuse it (exit 2, naming the plugin) before any case runs. *)
let () = ()
