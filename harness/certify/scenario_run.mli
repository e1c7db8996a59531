(** The interpreter of scenario files (docs/scenario-language.md): each
    scenarios/*.scn becomes a rig-side case named "scn.<file name>", run by
    the reference rig over the validated driver, like the built-in flows of
    {!Scenarios}.  A statement whose outcome differs from its [=>] is a
    finding against the scenario's first clause, naming the file and line;
    what the validation layer sees is reported under its own clauses. *)

(** The directory scenarios are read from: $RIG_CONFORM_SCENARIOS, or the
    bundled scenarios found from the executable's place (installed under
    PREFIX/share/rig-conform/scenarios, or the checkout it was built in);
    Error says why there is none. *)
val directory : unit -> (string, string) result

(** [load dir] parses every *.scn of [dir], in name order: the cases, or
    the first file's error ("FILE:LINE:COL: ...", a clause ID not in
    spec/clauses.tsv and an unknown fuzzer mutant included).  It never
    blocks: a *.scn that is not a regular file once links are followed (a
    FIFO, /dev/zero, a directory) is "FILE: not a regular file (...)", one
    over {!Scenario_syntax.max_bytes} is "FILE: too large (...)".  FILE is
    shown with {!Safe_text.terminal}; a case keeps the file's name as it is. *)
val load : string -> (Case.t list, string) result

(** [load_file path]: one scenario file as a case (rig-conform run
    --scenario), or its error as {!load} gives it. *)
val load_file : string -> (Case.t, string) result

(** Whether a loaded scenario case (scn.NAME) needs the fake driver's
    knobs, so that it is n/a for another driver. *)
val needs_fake : string -> bool
