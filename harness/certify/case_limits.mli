(** The time limit of each case, derived from its clean run on the
    conforming fake driver (case_seconds.tsv, written by [rig-conform
    calibrate]): a backstop for what the watch of driver calls in flight
    (Runner.call_limit) cannot see, a case that loops without a call
    hanging.  It is generous because conforming drivers may be much slower
    than the fake: a stop that leaves the word behind makes rig wait its
    hang bound at each close (20 times the fake's time, measured). *)

(** The seconds the case's clean run took on the fake, when calibrated. *)
val seconds_on_fake : string -> float option

(** 40 times that, at least 120 s; 120 s for a case never calibrated (a
    scenario file of the user's, say).  Conforming but slow drivers took 30
    s where the fake takes 1 (a make of 3 s, blind-make-slow). *)
val limit : string -> float

(** The table as case_seconds.tsv holds it, for [calibrate] to write. *)
val to_tsv : (string * float) list -> string
