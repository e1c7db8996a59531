(** The time limit of each case, derived from its clean run on the
    conforming fake driver (case_seconds.tsv, written by [rig-conform
    calibrate]) rather than one flat limit: a driver whose stop never
    returns then costs each case a few seconds, not a minute. *)

(** The seconds the case's clean run took on the fake, when calibrated. *)
val seconds_on_fake : string -> float option

(** 4 times that, and 2 s, at least 5 s; 60 s for a case never calibrated
    (a scenario file of the user's, say). *)
val limit : string -> float

(** The table as case_seconds.tsv holds it, for [calibrate] to write. *)
val to_tsv : (string * float) list -> string
