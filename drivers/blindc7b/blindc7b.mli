(** blindc7b: ten drivers over hostmem's device whose prepares do real work
    (a prepared program: scratch memory charged to the device) in images of
    several functions.  Six break CODE-7's "a prepare that raises must have
    changed nothing" for the image's other functions; four conform.  The
    table at the top of blindc7b.ml says which and how. *)

(** [(name, package)] for every c7b-* driver, in the table's order. *)
val drivers : (string * (module Rig_edge.Package)) list

(** What each driver registers beyond its kit: [scratch_functions] (names
    work0, work1, ... as hostmem's) and [refused_launch] (hostmem's kit.binary with a function "refuse" added). *)
val kit_more : Rig_edge.kit_more

(** [(name, conforming, clause broken or "conforming")], for the check. *)
val table : (string * bool * string) list

(** The compile a prepare waits for, in seconds (inside one
    Rig_edge_primitives.wait per prepare that compiles). *)
val compile_delay : float
