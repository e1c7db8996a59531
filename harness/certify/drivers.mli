(** The drivers the harness can certify by name: the bundled fake driver,
    with its mutant knobs, and any driver a plugin registered
    (Rig_edge_registry). *)

type t = {
  package : (module Rig_edge.Package);
  reset : unit -> unit;                     (** back to the default configuration, no mutant, nothing injected *)
  mutants : (string * string * string) list; (** name, clause, what it breaks *)
  set_mutant : string option -> unit;
  inject : (Injection.t -> unit) option;  (** fault injection, where the driver has it *)
}

val names : unit -> string list
val find : string -> t option

(** [load_plugin path] loads a driver plugin (.cmxs) that registers itself;
    [Error why] when it cannot be loaded. *)
val load_plugin : string -> (unit, string) result
