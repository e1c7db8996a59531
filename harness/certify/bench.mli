(** [rig-conform bench]: figures, not tests.  The validation layer's cost as
    a ratio (the same workload through the reference rig over the bare fake
    driver and over the wrapped one, in one run), the wall time of a whole
    certification of each bundled driver at -j1 and -j2, and the sweeps'
    points per second.  Writes out/bench/report.json. *)

val main : string list -> unit
