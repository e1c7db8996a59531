(** The command line's options, shared by every subcommand: parsing, the
    checks that refuse bad input before anything runs (exit 2, a clear
    message), and the help text. *)

(** The name the user typed: rig-cert is the same program (make install). *)
val me : string

(** [usage_error fmt ...]: prints "me: ..." and a hint, exits 2. *)
val usage_error : ('a, unit, string, 'b) format4 -> 'a

val help : string

type opts = {
  mutable driver : string;
  mutable only : string list;
  mutable seeds : int list;
  mutable jobs_given : int option;  (** -j, when given *)
  mutable timeout : float option;  (** None: each case's own limit (Case_limits) *)
  mutable report : string option;  (** absolute *)
  mutable case : string option;
  mutable mutant : string option;
  mutable plugins : string list;   (** absolute, each a regular file *)
  mutable injects : Injection.t list;  (** in the order given *)
  mutable shard : (int * int) option;  (** i of n, from 1 *)
  mutable sweep : bool;
  mutable random : int option;
  mutable batch : int option;
  mutable list : bool;
  mutable junit : string option;   (** absolute *)
  mutable markdown : string option;  (** absolute *)
  mutable color : bool;
  mutable out : string option;     (** calibrate's output *)
  mutable sequences : int option;  (** the model cases' programs per run (also put in RIG_CONFORM_SEQUENCES) *)
  mutable scenario : string option;  (** run's scenario file, absolute *)
  mutable census : bool;  (** run --census: a sweep's census run (Case.counting) *)
}

(** [parse_opts args ~allowed]: the options of a subcommand; any other is a
    usage error.  Paths are made absolute here, before any driver code runs
    (a driver that changes the directory moves nothing). *)
val parse_opts : string list -> allowed:string list -> opts

(** [writable_or_exit path]: the directory of [path] exists or is made, and
    a file can be written there, or a usage error naming [path] (before any
    case runs, not after the whole certification). *)
val writable_or_exit : what:string -> string -> unit

(** [temp_dir_or_exit ()]: a usage error when the temporary directory
    (TMPDIR) cannot hold a file, rather than a verdict blaming the driver. *)
val temp_dir_or_exit : unit -> unit

(** The number of cores. *)
val cores : unit -> int

(** [-j]'s value: the one given, or the number of cores. *)
val jobs : opts -> int

(** [positive name s]: [s] as a positive integer, or a usage error. *)
val positive : string -> string -> int
