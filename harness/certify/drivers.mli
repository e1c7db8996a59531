(** The drivers the harness can certify by name, with their mutant knobs. *)

type t = {
  package : (module Rig_edge.Package);
  reset : unit -> unit;                     (** back to the default configuration *)
  mutants : (string * string * string) list; (** name, clause, what it breaks *)
  set_mutant : string option -> unit;
}

val names : string list
val find : string -> t option
