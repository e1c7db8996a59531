(** Runs a model program on a driver, the way the probes call one (Probes.Kit:
    masked calls, on threads that hold no lock, each region freed once,
    mappings first, free and unload only once the word reads the last
    value), and judges every answer with the model's postconditions.

    A phase of several steps runs them on threads of their own, started
    together; their answers are judged in the order they ended.  Submits of
    one device ask room and grow on their own threads and take turns to
    submit and commit (rig gives values in that order).  A step whose
    precondition no longer holds in the state the driver's real answers
    made (a region alloc refused, a device lost) is skipped. *)

(** One step as it ran: the phase it was in, its column (0 for a step
    alone), when it started and ended (ms since the program started), and
    the answer. *)
type event = { phase : int; column : int; step : Model.step; t0 : float; t1 : float; answer : Model.answer }

type violation = {
  clause : string;
  detail : string;
  at : Model.sym;  (** the step's id *)
  timing : bool;  (** it rests on a call's time ({!Model.rests_on_time}) *)
}

type outcome = {
  events : event list;  (** in the order they were judged *)
  violation : violation option;  (** the first *)
  extra : Case.finding list;  (** what the session itself flagged (a watchdog) *)
  applicable : string option;  (** Some why: the driver lacks what every program needs *)
  judged : string list;  (** the clauses some answer gave something to judge ({!Model.judged}) *)
}

(** The function name the model uses for a function no image has. *)
val absent_function : string

module Make (P : Rig_edge.Package) : sig
  val run : Model.program -> outcome
end
