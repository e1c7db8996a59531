(** blindc7n: hostmem's device with prepare (and what prepare shares with
    entry and unload) changed per driver, about CODE-7's second half.  See
    the table at the top of blindc7n.ml.  None of these takes a lock. *)

(** (name, package) for every c7n-* driver. *)
val drivers : (string * (module Rig_edge.Package)) list

(** "conforming" or "CODE-7": what the table says of a driver. *)
val expected : string -> string

(** How many clean prepares of f c7ncheck makes before the probed one
    (c7n-ok-twice's making prepare is the second). *)
val warmups : string -> int list
