(** [rig-conform calibrate]: runs every case cleanly on the fake driver
    (seeds 1-3, a flat limit) and writes the longest wall time of each to
    case_seconds.tsv, from which each case's limit is derived (Case_limits).
    Run it when cases change; the suite checks that every case is there. *)

val main : string list -> unit
