(* The document's lists the validation layer checks against; see
   validate_rules.mli. *)

(* Grace beyond the rig's hang bound before GUAR-7 calls a rig unbounded:
   half the bound.  A rig that keeps its bound computes what is left of it
   just before it sleeps, from a stall that began no later than the one this
   layer sees, so only the scheduling between those two statements needs the
   grace; a rig that waits twice its bound exceeds it. *)
let hang_grace_ms hang_ms = hang_ms / 2

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
