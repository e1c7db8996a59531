(** blinds3d: drivers about SIG-3, each hostmem's driver (its OCaml side
    copied, over hostmem's C device) with [sleep], and what sleep uses,
    changed.  The table of drivers, what each sleep does and whether it
    breaks SIG-3, is at the top of blinds3d.ml. *)

(** Every s3d-* driver, by name, as a package to register. *)
val drivers : (string * (module Rig_edge.Package)) list

(** What every driver registers beyond its kit (hostmem's: refused_launch,
    scratch_functions). *)
val kit_more : Rig_edge.kit_more
