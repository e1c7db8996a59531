(** The reference rig's mutants: each breaks exactly one rig-side clause, so
    that the self-test proves the validation layer (or the scenario's own
    check) catches that clause.  At most one is active in a process. *)

(** [(name, clause, what it breaks)], every mutant of the reference rig. *)
val all : (string * string * string) list

(** [(name, case, injection)]: the mutants that show only under a failure
    the driver answers, with the certifier's case and the injection
    (FN:NTH:KIND) that shows it; the others show in a plain run. *)
val under_fault : (string * string * string) list

(** [set (Some name)] activates a mutant: every step goes back to its
    conforming function, then that mutant's variants are installed (in each
    instance of the reference rig, also one made later; an instance is kept
    here no longer than it lives); [set None] leaves the conforming steps
    alone.  Invalid_argument for an unknown name. *)
val set : string option -> unit

(** {1 For the reference rig's modules} *)

(** [step conforming]: a step a mutant may replace, holding [conforming]
    until a variant is installed; {!set} puts [conforming] back. *)
val step : 'a -> 'a ref

(** [register [(name, install); ...]]: [install ()] puts that mutant's
    variant in place of the conforming steps, whenever {!set} names it (at
    once if it is already set). *)
val register : (string * (unit -> unit)) list -> unit
