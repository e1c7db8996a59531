(** The reference fake driver: a rig driver (Rig_edge.Package) whose
    devices are host memory and a worker thread, for certifying the
    conformance harness itself.  Its mutants each break one clause of
    spec/clauses.tsv, so the certifier can show it catches that clause.

    Devices: three openers, "fake0".."fake2"; each make opens a new device
    with the configuration and mutant current at that time.  The binary
    format of images is text: the line [rigfake 1], then lines
    [fn NAME SCRATCH OP], with OP one of spin, fault, hang, fill, nop.

    The machine has two PCI functions, 0000:41:00.0 (a 1 MiB BAR) and
    0000:42:00.0 (4 KiB).  dma of Device memory opens a window of the
    function's bus addresses over the region's memory, kept until the
    process exits, and the first open whose dma answered Ok keeps that
    function; [kit.bus_agent] reads and writes through those windows. *)

module D : Rig_edge.Driver

val name : string
val openers : unit -> D.t Rig_edge.opener list
val kit : Rig_edge.kit

(** Its [refused_launch] is [refuse] of kit.binary with that function added;
    [scratch_functions] names its functions scratch0, scratch1, ... *)
val kit_more : Rig_edge.kit_more

(** {1 Configuration} *)

(** [configure ()] sets the configuration of the devices opened from now
    on; each argument omitted takes its default: 1 MiB of each memory kind
    (0 means the device has none of it), a queue of 64 parts (64 bytes of
    Device memory each), may_block false, host_addresses false, maps_host
    true; [commit_hold_ms] (default 0): each commit, once it has committed,
    holds its caller until the device stops or that many milliseconds pass
    (a slow C call to count, CNT-3).  Raises Invalid_argument on a negative
    size. *)
val configure :
  ?device_bytes:int ->
  ?mapped_bytes:int ->
  ?pinned_bytes:int ->
  ?queue_slots:int ->
  ?may_block:bool ->
  ?host_addresses:bool ->
  ?maps_host:bool ->
  ?commit_hold_ms:int ->
  unit ->
  unit

(** [reset ()] is the default configuration and no mutant. *)
val reset : unit -> unit

(** {1 Mutants} *)

(** Each mutant as (name, the clause ID it breaks, what it does). *)
val mutants : (string * string * string) list

(** The C mutants only the sanitizers find (mk/sanitize.mk), as
    (name, clause ID, what it does, code of enum fake_mutant); not in {!mutants}, so
    neither selftest nor {!set_mutant} sees them. *)
val fuzz_mutant_table : (string * string * string * int) list

(** [set_mutant m] makes the devices opened from now on the mutant [m]
    ([None]: the correct driver).  Raises Invalid_argument on an unknown
    name. *)
val set_mutant : string option -> unit

(** {1 Fault injection} *)

(** [inject ~fn ~nth what]: the [nth] call (from 1, counted across the
    process from now) of the driver function [fn] ("alloc", "free",
    "map_peer", "map_host", "dma", "image", "entry", "prepare", "grow",
    "signaled", "sleep", "unload", "reach", "room", "submit", "commit",
    "peer", "locate", "stop")
    answers [what] instead of running: [`Fault why] raises [D.Fault why],
    [`Raise e] raises [e], [`Fail] raises Failure, and [`Answer] answers the
    failure the document allows as an answer: None from alloc, Error from
    dma and image, No_memory 64 from entry, Short 64 from grow (having made
    nothing), an early return from sleep (waiting for nothing), RIG_GROW
    from room.  For "submit" and "commit", C functions, the call returns
    non-zero instead; a [`Fault why] there also faults the device with
    [why], and [`Raise _] acts as [`Fail]; room answers RIG_GROW for any
    [what].  stop raises once the device is marked stopped, before its
    work is ended: that work runs on and writes the word as it ends, as
    after a stop an asynchronous exception ended early.  Raises
    Invalid_argument on another [fn], an [nth] below 1, or
    [`Answer] for a function without such an answer. *)
val inject : fn:string -> nth:int -> [ `Fault of string | `Raise of exn | `Fail | `Answer ] -> unit

(** [pending_injections ()]: the functions, among those injected on the
    OCaml side (not submit, commit or room), whose injection has not fired. *)
val pending_injections : unit -> string list

(** [clear_injections ()] drops every injection not yet fired. *)
val clear_injections : unit -> unit

(** {1 Introspection, for tests} *)

(** [usage d m] is the bytes of [d]'s memory [m] in use: regions, entries'
    scratch and, for Device, queue slots. *)
val usage : D.t -> Rig_edge.memory -> int

(** The devices ("fake0#3") a finaliser found dropped without a stop. *)
val unstopped : unit -> string list
