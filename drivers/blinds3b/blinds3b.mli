(** blinds3b: ten drivers on hostmem's device whose sleep differs (SIG-3).
    See the table at the top of blinds3b.ml. *)

(** [(name, package)]: every s3b-* driver, the name being its package's. *)
val drivers : (string * (module Rig_edge.Package)) list

(** What each driver is expected to be: [(name, expected)], expected being
    ["SIG-3"] for the broken ones and ["conforming"] for the others. *)
val expected : (string * string) list
