(** Whether one string occurs in another: the probes and the rig-side flows
    look for a driver's or rig's reason inside a longer text. *)

(** [contains ~sub s]: whether [sub] occurs in [s] (the empty string does). *)
val contains : sub:string -> string -> bool
