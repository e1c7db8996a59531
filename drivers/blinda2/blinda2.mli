(** blinda2: the a2-* drivers (see blinda2.ml's header).  Nothing else of
    the module is public: no function of its own that rig would call
    without its check (LOCK-4). *)

val all : (module Rig_edge.Package) list
val kit_more : Rig_edge.kit_more
