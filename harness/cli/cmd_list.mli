(** [rig-conform list]: the cases and the clauses each checks, and the
    mutants of the reference rig, the edge and the driver. *)

val main : string list -> unit
