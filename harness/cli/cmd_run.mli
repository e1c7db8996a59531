(** The subcommands that run driver code in this process: [run] (one job:
    each child of the certifier, and the replay line a person types) and
    [describe] (what the plugins register: the certifier's first child).
    Plugins are loaded here, after the options are read and every path
    made absolute. *)

val run : string list -> unit
val describe : string list -> unit
