(** Rig-side scenarios written in OCaml: the reference rig, wrapped around
    the driver by the validation layer, driven through the flows in which
    each rig clause can be observed.  Each flow names its clauses; the
    validation layer's violations and the flow's own checks are its
    findings.  Scenario files (Scenario_run) use the same environment. *)

(** The scenarios' hang bound, in milliseconds, for the rig and the
    validation layer alike. *)
val hang_ms : int

(** The shorter bound of scenarios that launch nothing but the kit's hang
    function: they mostly wait for the bound itself. *)
val quick_hang_ms : int

(** What a flow needs to run: the reference rig over the validated driver,
    and the openers. *)
module Env (P : Rig_edge.Package) : sig
  module V : module type of Validate.Make (P.D)
  module R : module type of Rig.Make (V)

  (** [open_ i] opens the device of the driver's i-th opener, as the
      program's Open; raises Exit when the driver has no i-th opener. *)
  val open_ : int -> R.device

  val close : R.device -> unit

  (** [entry im f] asks the rig for f's entry, as a request of its own
      (Validate.Request), so that the validation layer counts its asks. *)
  val entry : R.image -> string -> int64 option

  (** Closes every device opened, ignoring what that raises. *)
  val close_all : unit -> unit

  (** [bound_hangs ms] sets the hang bound of the rig and the validation
      layer (both start at {!hang_ms}). *)
  val bound_hangs : int -> unit
end

(** Raised by a flow that needs a kit item or a device the driver lacks. *)
exception Needs of string

(** A violation of the validation layer as a finding, with its events. *)
val of_violation : Validate.violation -> Case.finding

(** One case per flow (rig.NAME): the flows are one list of records, each
    with its name, clauses, needs and body (scenarios.ml). *)
val cases : Case.t list

(** {1 Flows over another package}

    For the asynchronous-exception cases (Async_cases), which put a wrapper
    between the validation layer and the driver. *)

(** Whether the flow (rig.NAME) needs the fake driver's knobs, so that it is
    n/a for another driver. *)
val needs_fake : string -> bool

type flow_outcome = {
  raised : exn option;      (** what ended the flow early; every device was then closed *)
  own : Case.finding list;  (** the flow's own checks *)
  violations : Validate.violation list;  (** the validation layer's *)
  calls : (string * int) list;
  make_raised : bool;       (** a make of the driver's raised (a device busy, say) *)
}

(** [make_raised events]: what the last make of the driver's that raised
    raised (its short text), if one did. *)
val make_raised : Validate.event list -> string option

(** [run_flow package name ~seed] runs the flow [name] once, over a fresh
    reference rig and validation layer wrapped around [package]'s driver.
    Raises {!Needs} when the driver lacks what the flow needs. *)
val run_flow : (module Rig_edge.Package) -> string -> seed:int -> flow_outcome
