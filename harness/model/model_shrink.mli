(** Shrinking a failing program (delta debugging, then simpler arguments):
    each candidate is a smaller program, kept if it still fails with the
    same clause.  Candidates need not meet the model's preconditions: the
    executor skips a step whose precondition does not hold, so dropping a
    command also drops, in effect, those that named what it made. *)

(** [shrink ~fails ~budget p]: the smallest program found that [fails], and
    how many candidates were run.  [budget]: at most that many runs. *)
val shrink : fails:(Model.program -> bool) -> budget:int -> seconds:float -> Model.program -> Model.program * int
(** [seconds]: and at most that long. *)

(** [renumber p]: ids 1, 2, 3... in program order (a step that names an
    id no step makes keeps it: drop such steps first). *)
val renumber : Model.program -> Model.program

(** The number of steps of a program. *)
val size : Model.program -> int
