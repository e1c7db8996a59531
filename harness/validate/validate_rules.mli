(** What the validation layer checks calls against, from the document: which
    signals rig's mask must block, which functions lose a device, what a
    rig may call after a loss or a stop, which calls run unmasked, and the
    grace of GUAR-7. *)

(** [hang_grace_ms hang_ms]: the grace beyond the rig's hang bound before
    GUAR-7 calls a rig unbounded (ms). *)
val hang_grace_ms : int -> int

(** Signals rig_mask must block (SIG-1): a sample of those a fault does not
    raise. *)
val must_be_blocked : int list

(** The functions after whose other exceptions a device is lost (EXC-1). *)
val losing_fns : string list

(** What a rig may still call on a lost device before its stop. *)
val allowed_after_loss : string list

(** What a rig may still call on a device after its stop. *)
val allowed_after_stop : string list

(** The functions rig calls without its mask. *)
val unmasked_fns : string list

(** An exception as evidence shows it. *)
val short_exn : exn -> string
