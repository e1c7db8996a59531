(** Every case the certifier knows: the driver-side probes, the rig-side
    flows, the scenario files (read on first use, so that [--help] never
    touches them), the asynchronous cases; and the time limit of each. *)

(** The rig-side cases: what a sweep injects failures into. *)
val rig_cases : unit -> Case.t list

val all_cases : unit -> Case.t list

(** The cases that check at least one of the clauses. *)
val cases_for : Catalog.clause list -> Case.t list

(** The rig-side cases that check at least one of the clauses. *)
val rig_cases_of : Catalog.clause list -> Case.t list

(** Whether a case needs the fake driver's knobs (n/a for another driver). *)
val needs_fake : string -> bool

(** [limit ~timeout name]: the seconds the case may run, [timeout] when
    given, else derived from its clean run on the fake (Case_limits). *)
val limit : timeout:float option -> string -> float
