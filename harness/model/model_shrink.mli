(** Shrinking a failing program (delta debugging, then simpler arguments):
    each candidate is a smaller program, kept if it still fails with the
    same clause.  Candidates need not meet the model's preconditions: the
    executor skips a step whose precondition does not hold, so dropping a
    command also drops, in effect, those that named what it made. *)

(** [shrink ~fails ~budget p]: the smallest program found that [fails], and
    how many candidates were run.  [budget]: at most that many runs. *)
val shrink : fails:(Model.program -> bool) -> budget:int -> Model.program -> Model.program * int

(** The number of steps of a program. *)
val size : Model.program -> int
