(** [rig-conform bench]: figures, not tests.  The validation layer's cost as
    a ratio (the same workload through the reference rig over the bare fake
    driver and over the wrapped one, in one run) and the wall time of a
    certification.  Writes out/bench/report.json. *)

val main : string list -> unit
