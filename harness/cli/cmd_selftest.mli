(** [rig-conform selftest]: proves the checks.  Each mutant of the fake
    driver, of the reference rig and of the edge must be flagged with exactly
    its clause, the conforming pair with nothing over N seeds, and no checked
    clause may lack a mutant.  Writes out/selftest/report.json. *)

val main : string list -> unit
