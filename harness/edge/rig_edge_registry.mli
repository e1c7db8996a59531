(** Where driver packages make themselves known to the certifier.  A driver
    built as a plugin (a .cmxs loaded with [rig-conform --plugin]) calls
    [register] when it is loaded; the bundled ones are registered by the
    certifier itself. *)

(** [register p] adds [p] under [P.name]; Invalid_argument if that name is
    taken. *)
val register : (module Rig_edge.Package) -> unit

val find : string -> (module Rig_edge.Package) option

(** The names registered, in registration order. *)
val names : unit -> string list
