(** What a plugin did as it loaded (its module initialisation), for the
    probes of SIG-7 and SIG-8, which judge a driver's exit handlers and
    threads also when the plugin made them as it loaded.  The certifier
    loads a plugin through {!around}.  A driver linked into the program
    (the fake) loads before any of this: then {!loaded} is false. *)

(** [around load]: runs [load ()] (the plugin's load), having registered,
    once per process, the end of a bracket of exit handlers; notes the
    threads that appeared meanwhile, and redirects the lock calls of the
    plugin's C code ({!C_locks.around_load}). *)
val around : (unit -> 'a) -> 'a

(** Whether {!around} ran in this process. *)
val loaded : unit -> bool

(** Exit handlers run last registered first, so the bracket's end runs
    right after every handler the plugin registered as it loaded (and
    after the driver's later ones): [on_exit_bracket_end f] makes [f] run
    there (replacing what was set before). *)
val on_exit_bracket_end : (unit -> unit) -> unit

(** The threads (tids) that appeared while the plugin loaded, some of which
    may have ended since. *)
val threads_started : unit -> int list
