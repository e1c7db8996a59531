(** Where driver packages make themselves known to the certifier.  A driver
    built as a plugin (a .cmxs loaded with [rig-conform --plugin]) calls
    [register] when it is loaded; the bundled ones are registered by the
    certifier itself. *)

(** [register ?more p] adds [p] under [P.name], with the certification
    material beyond [P.kit] that [more] gives (none by default);
    Invalid_argument if that name is taken. *)
val register : ?more:Rig_edge.kit_more -> (module Rig_edge.Package) -> unit

val find : string -> (module Rig_edge.Package) option

(** [more name]: what the package registered as [name] gave beyond its
    kit; nothing for a name not registered. *)
val more : string -> Rig_edge.kit_more

(** The names registered, in registration order. *)
val names : unit -> string list
