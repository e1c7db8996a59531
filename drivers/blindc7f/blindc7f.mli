(** blindc7f: hostmem's device with prepare changed per driver, around a
    device whose work faulted before rig learnt it (CODE-7's second half).
    See the table at the top of blindc7f.ml. *)

(** [(expected, package)]: expected is ["CODE-7"] for a broken driver,
    ["conforming"] otherwise.  Names start with "c7f-". *)
val drivers : (string * (module Rig_edge.Package)) list
