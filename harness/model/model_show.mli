(** What a person and a timeline viewer read of a model run: the
    counterexample as a table with one column per thread (each command with
    its answer, the violating step marked), the program as a scenario file
    that replays it (scenario language, [drives driver]), and the run as a
    Chrome/Perfetto trace (JSON trace events). *)

(** [table ~title outcome]. *)
val table : title:string -> Model_exec.outcome -> string

(** [statement step]: the command as a line of the scenario language. *)
val statement : Model.step -> string

(** [scenario ~name ~clause program events]: a [.scn] that replays the
    program; a read's bytes are those the run read (their length is the
    read's; what must be read comes from the model). *)
val scenario : name:string -> clause:string -> Model.program -> Model_exec.event list -> string

(** [chrome_trace outcome]: the trace events JSON (one track per column). *)
val chrome_trace : Model_exec.outcome -> string

(** [program_of_scenario stmts]: the program a [drives driver] scenario
    states, or why it cannot be one. *)
val program_of_scenario : Scenario_syntax.stmt list -> (Model.program, string) result
