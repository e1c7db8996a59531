(** A case: one self-contained run that checks some clauses of the catalog
    against a driver (a driver-side probe) or against a rig (a rig-side
    scenario through the validation layer).  The certifier runs each case in
    a child process, per seed, and turns the findings into verdicts. *)

(** A violation of one clause, with the evidence that shows it. *)
type finding = { clause : string; detail : string }

type result =
  | Ran of finding list          (** no finding: the case's clauses held in this run *)
  | Not_applicable of string     (** the driver lacks what the case needs (the reason) *)

type t = {
  name : string;             (** unique, stable: names the case in replay lines *)
  clauses : string list;     (** the clause IDs it checks; findings name only these *)
  run : (module Rig_edge.Package) -> seed:int -> result;
}

(** [finding clause fmt] builds a finding with a formatted detail. *)
val finding : string -> ('a, unit, string, finding) format4 -> 'a

(** [expect acc clause cond fmt]: when [cond] is false, adds the finding to
    [acc]. *)
val expect : finding list ref -> string -> bool -> ('a, unit, string, unit) format4 -> 'a
