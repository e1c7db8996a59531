(** The room/grow fuzzer's schedule interpreter (fuzz/room_grow_schedule.c),
    linked into the certifier: it runs one fuzz input against its own copy of
    the fake driver's C core, as the fuzzer does, and hands back the
    violation the fuzzer would abort on.  Used by the scenario statement
    [schedule] (docs/scenario-language.md). *)

(** What the fuzzer reports: ["rig-fuzz: VIOLATION <clause> at step <step>: <message>"].
    [clause] is a clause ID of spec/clauses.tsv, or ["DEC-QUEUE"] for
    spec/decisions.md's reading of the queue ABI. *)
type violation = { step : int; clause : string; message : string }

(** [run ~mutant input] runs the schedule [input] (the fuzz input's bytes) on
    the fake's mutant [mutant] (0: the conforming fake; see {!mutant_code}).
    [trace] prints each step on stderr, as RIG_FUZZ_TRACE=1 does.  [Error] when
    the fake could not be set up.  After a violation the schedule's device is
    left as it was, unreleased: call it in a process of its own (the
    certifier's cases run in child processes). *)
val run : ?trace:bool -> mutant:int -> string -> (violation option, string) result

(** The code of a mutant the fuzzer knows by name (RIG_FUZZ_MUTANT), [Some 0]
    for ["none"]. *)
val mutant_code : string -> int option

(** The names {!mutant_code} knows. *)
val mutant_names : string list
