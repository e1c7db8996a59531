(** The model's programs run through the reference rig, over the validated
    driver (Scenarios.Env): case [model.rig].  What the driver answers only
    decides which later steps still apply; the findings are the validation
    layer's, under the rig-side clauses it checks.  rig makes no call of
    sleep, signaled or peer on the program's behalf, and commits every
    submission: those steps are left out, and so are fault launches (a rig
    mutant that mishandles one call would break a second clause through
    the Fault). *)

(** The rig-side clauses the validation layer checks at the call
    (spec/decisions.md: all but EXC-2, EXC-3, LOCK-2 and CNT-5). *)
val clauses : string list

(** [rig_program p]: [p] as a program asks the rig (steps rig does not
    offer left out, every submission committed, every close a close). *)
val rig_program : Model.program -> Model.program

val case : Case.t
