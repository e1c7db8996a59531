(** A case: one self-contained run that checks some clauses of the catalog
    against a driver (a driver-side probe) or against a rig (a rig-side
    scenario through the validation layer).  The certifier runs each case in
    a child process, per seed, and turns the findings into verdicts. *)

(** A violation of one clause, with the evidence that shows it.  [timing]:
    whether the finding may rest on how long something took (a bound, a
    deadline, a poll that gave up); a run starved of its CPU by the runner's
    own crowd may show such a finding on a conforming driver, so the
    runner runs it again alone and that run decides.  A finding that is
    not a timing (a value read, a lock count, a mask) stands as found. *)
type finding = { clause : string; detail : string; timing : bool }

type result =
  | Ran of finding list          (** no finding: the case's clauses held in this run *)
  | Not_applicable of string     (** the driver lacks what the case needs (the reason) *)

type t = {
  name : string;             (** unique, stable: names the case in replay lines *)
  clauses : string list;     (** the clause IDs it checks; findings name only these *)
  run : (module Rig_edge.Package) -> seed:int -> result;
}

(** [finding clause fmt] builds a finding with a formatted detail: a
    timing, unless shown otherwise (see [value_finding]). *)
val finding : string -> ('a, unit, string, finding) format4 -> 'a

(** [value_finding clause fmt]: a finding that no load can make a conforming
    driver show (a value it wrote or answered, read with no deadline in
    play), which a crowded run keeps (see [finding]'s [timing]). *)
val value_finding : string -> ('a, unit, string, finding) format4 -> 'a

(** [expect acc clause cond fmt]: when [cond] is false, adds the finding to
    [acc]. *)
val expect : finding list ref -> string -> bool -> ('a, unit, string, unit) format4 -> 'a

(** {1 Systematic fault injection}

    A sweep first runs a case cleanly and learns how many calls of each
    driver function it makes, then runs it once per call and failure kind
    with just that call failed.  Under an injection a case's own
    expectations no longer hold: only what the validation layer sees
    counts, and the case cleans up whatever the failure left open. *)

(** Set in the child before the case runs, when a failure is injected. *)
val injecting : bool ref

(** Set in the child before the case runs when the run is a sweep's census
    (run --census): the case counts its calls and may leave out what the
    sweep's points will try one by one (the async cases' in-process points). *)
val counting : bool ref

(** [report_calls tally]: a case tells how many calls of each driver
    function it made (the child prints them for the sweep). *)
val report_calls : (string * int) list -> unit

val reported_calls : unit -> (string * int) list

(** [report_unjudged [(clause, why)]]: a case that ran says which of its
    clauses it found nothing to judge in this run (a model program that
    never got a map_host to succeed judges no MEM-7): those clauses take
    no pass from the run. *)
val report_unjudged : (string * string) list -> unit

val reported_unjudged : unit -> (string * string) list
