(** blindst8: hostmem's device wrapped per driver, about STOP-8 (free and
    unload after stop, after an open of the same hardware made a new
    device, must touch nothing of the new device).  See the table at the
    top of blindst8.ml. *)

(** [(expected, package)]: expected is ["STOP-8"] for a broken driver,
    ["conforming"] otherwise.  Names start with "st8-". *)
val drivers : (string * (module Rig_edge.Package)) list
