(** Programs for the model (Model), drawn from a seed: opens and closes,
    every Driver function the model knows, submissions of fills and
    launches (sometimes many parts, so that room asks for growths), waits,
    sleeps, and phases of two or three commands at once.  Each program
    meets [Model.phase_ok] at every phase, in the state the model presumes
    (each call succeeding); the executor checks [precond] again against
    what the driver really answered. *)

(** [program rng ~phases] draws a program of at most [phases] phases. *)
val program : Random.State.t -> phases:int -> Model.program
