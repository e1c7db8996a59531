(** The far end of a bracket around the exit handlers a plugin registers
    as it loads.  Exit handlers run last registered first, so one
    registered just before a plugin loads runs right after every handler
    the plugin's initialisation registered: SIG-7's probe ends its watch
    there, and so sees those handlers as well as the ones the driver
    registers later.  A driver linked into the program (the fake) loads
    before any of this: then nothing is registered. *)

(** [before_load ()]: registers the bracket's end, once per process; called
    right before a plugin loads. *)
val before_load : unit -> unit

(** Whether [before_load] ran in this process. *)
val registered : unit -> bool

(** [on_reached f]: [f] runs when the bracket's end runs (replacing what
    was set before). *)
val on_reached : (unit -> unit) -> unit
