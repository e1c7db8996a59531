(** Every case written in OCaml, in one table: what [list], applicability
    and replay read.  Each case module keeps its own list; this joins them,
    in the order the certifier runs and reports them.  The scenario files
    (scenarios/*.scn) are loaded apart, by the CLI, at start. *)

(** The driver-side probes (harness/probes), section by section. *)
val probe_cases : Case.t list

(** The rig-side flows (Scenarios), one case each: rig.NAME. *)
val rig_flow_cases : Case.t list

(** The asynchronous-exception cases (Async_cases): async.FLOW. *)
val async_cases : Case.t list

(** The model's cases (harness/model): model.driver, model.rig. *)
val model_cases : Case.t list

(** [needs_fake name]: whether the case needs the fake driver's knobs, so
    that it is n/a for another driver (an async case as its flow does). *)
val needs_fake : string -> bool
