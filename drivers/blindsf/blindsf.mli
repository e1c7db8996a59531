(** blindsf: ten sf-* drivers, hostmem's device with one variant each, about
    STOP-3 for a failed submit (the table is at the top of blindsf.ml). *)

(** [(name, package)] for every sf-* driver, in the table's order. *)
val drivers : (string * (module Rig_edge.Package)) list

(** What the driver [name] registers beyond its kit: its refused_launch.
    Raises Not_found for a name not in {!drivers}. *)
val kit_more : string -> Rig_edge.kit_more

(** [breaks name]: the clause the driver breaks, None for a conforming one.
    Raises Not_found for a name not in {!drivers}. *)
val breaks : string -> string option
