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

(** {1 What the certifier knows of a driver without running its code}

    The certifier never loads a plugin itself (its code could take the
    certifier's signals, exit, or hang it): a child loads it and describes
    what it registered ({!describe}); the certifier reads that ({!read_description}). *)

type info = {
  name : string;
  kit : (string * bool) list;  (** each kit item (kit.spin, ...), offered or not *)
  fault_injection : bool;
  info_mutants : (string * string * string) list;
}

val info : t -> info

(** In a child: the records that describe [plugins] (loaded one by one, each
    naming the drivers it registered) and every driver known after them; or
    the one record that says why a plugin could not be loaded. *)
val describe : string list -> string list

(** In the certifier: the drivers a description names; [`Usage] for a file
    that is no plugin, or a plugin that registered no driver; [`Load_failed]
    when the plugin's own code raised as it loaded. *)
val read_description : string list -> [ `Ok of info list | `Usage of string | `Load_failed of string ]
