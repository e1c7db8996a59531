(** The certifier's model cases: [model.driver] draws programs from the
    seed (Model_gen), runs each on the driver (Model_exec) and, at the
    first violation, shrinks the program (Model_shrink) and reports the
    counterexample under the model's clause, with the counterexample
    written beside the report (Model_show: a table, a [.scn] that replays
    it, a Chrome trace).

    [RIG_CONFORM_SEQUENCES] (rig-conform's [--sequences N]) sets how many
    programs a run draws (default {!default_sequences});
    [RIG_CONFORM_COUNTEREXAMPLES] where the counterexamples go (default
    out/counterexamples; certify puts them beside its report);
    [RIG_CONFORM_SHRINK_SECONDS] how long shrinking may take (default 30;
    0 reports the sequence as drawn); [RIG_CONFORM_MODEL_TRACE] prints
    every program run. *)

val default_sequences : int

(** The programs a run draws: [RIG_CONFORM_SEQUENCES], or the default. *)
val sequences : unit -> int

(** Without [RIG_CONFORM_SEQUENCES], a run draws no new program once this
    many seconds have gone by (a slow driver runs fewer programs), and
    shrinking stops in time for the run to end within 95 s. *)
val drawing_seconds : float

(** Phases per program. *)
val phases : int

val cases : Case.t list

(** [replay_scenario (module P) ~file ~clauses stmts]: the result of a
    [drives driver] scenario, run as the model runs a program: its
    violation under its clause (the scenario's first clause if the clause
    is not among [clauses]). *)
val replay_scenario :
  (module Rig_edge.Package) -> file:string -> clauses:string list -> Scenario_syntax.stmt list -> Case.result
