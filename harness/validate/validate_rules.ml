(* The document's lists the validation layer checks against; see
   validate_rules.mli. *)

(* Grace beyond the rig's hang bound before GUAR-7 calls a rig unbounded:
   generous, since only a rig that never gives up should trip it. *)
let hang_grace_ms = 1500

(* Signals rig_mask must block (SIG-1): a sample of those a fault does not raise. *)
let must_be_blocked =
  Sys.[ sigint; sigterm; sighup; sigquit; sigusr1; sigusr2; sigalrm; sigpipe; sigchld ]

(* The functions after whose other exceptions a device is lost (EXC-1). *)
let losing_fns =
  [ "alloc"; "free"; "map_peer"; "map_host"; "dma"; "image"; "reach"; "entry"; "grow"; "unload" ]

(* What a rig may still call on a lost device before its stop. *)
let allowed_after_loss = [ "stop"; "free"; "unload"; "signaled"; "locate"; "peer"; "facts" ]
let allowed_after_stop = [ "free"; "unload"; "signaled" ]
let unmasked_fns = [ "locate"; "peer"; "signaled" ]

let short_exn e = match e with Invalid_argument s -> "Invalid_argument " ^ s | e -> Printexc.to_string e
