(** Asynchronous exceptions at every allocation point, and calls from a
    callback at every allocation point, inside a driver's calls (ASYNC-1,
    ASYNC-2, LOCK-5, LOCK-9).

    The mechanism: a [Gc.Memprof] profile with sampling rate 1.0 sees every
    allocation; an exception its callback raises surfaces at that
    allocation, in the allocating thread.  {!Make} wraps a driver so that
    each call of its functions (and of the closures it hands out: a place's
    [reach], the queue's [room], [submit], [commit]) counts the allocations
    the calling thread makes inside it, and only those (the callback filters
    by [Thread.id]); tracking stops when the call returns or raises.

    Calls are numbered per function name, across threads, from 1, in the
    order they start; [facts] is never a target (rig has no device until it
    returns), nor [signaled] on a stopped device (rig polls it as often as
    the timing makes it, and drops what it raises).  Exactly one mode is active in a process at a time. *)

(** The asynchronous exception the harness raises: its text names the point. *)
exception Async_interrupt of string

(** Where in a call: at an allocation (Gc.Memprof's callback raises), or at
    a wait (the wait sends the thread SIGUSR2 as it opens the mask, and the
    signal's OCaml handler raises as the wait ends, as a program's handler
    would: Rig_edge_primitives.signal_at_wait). *)
type point = Allocation | Wait

(** An injection point: the [at]-th allocation (or wait) inside the [nth]
    call of [fn].  An allocation point that comes while the call holds more
    counted locks than it did as it started brings a second exception, at
    the call's next allocation if the thread still holds as many: a
    handler that gives a lock back must give it first (ASYNC-2), and one
    that allocates before leaves it taken. *)
type target = { fn : string; nth : int; at : int; on : point }

val target_to_string : target -> string

(** The target of this process's injected run, set by [rig-conform run
    --inject FN:NTH:async@N] before the case runs. *)
val target : target option ref

(** [reset ~inject ~probe ~counts ()] starts a run: call numbers and the
    census start again; [inject] arms one point; [probe] turns on the
    callback mode, in which, at each allocation inside a driver call, the
    wrapper calls the driver's [locate], [peer] and [signaled] on the
    devices in play (see {!Make}); [counts], asked in the Memprof callback,
    says whether an allocation is a point at all (default: every one is;
    a probe that wants only the driver's own code's allocations filters by
    the callstack).  Starts the Memprof profile on the first call. *)
val reset : ?inject:target -> ?probe:bool -> ?counts:(unit -> bool) -> unit -> unit

(** [off ()]: no counting, no injection, no probes from now on. *)
val off : unit -> unit

(** Where the armed exception was raised, if it was. *)
val fired : unit -> string option

(** The census of the run so far: [(fn, nth, allocations, waits)] for each
    call that allocated or waited, in the order the calls ended. *)
val census : unit -> (string * int * int * int) list

(** What the callback mode found: [(clause, detail)], at most one per
    function and clause. *)
val probe_findings : unit -> (string * string) list

(** The probe running now, if any (the watchdog names it when a probe
    hangs). *)
val probing : unit -> string option

(** [around fn f] runs [f ()] as a call of the driver function [fn]
    (numbered, counted, its armed point raised), as {!Make}'s wrappers do;
    for a caller that calls the driver itself. *)
val around : string -> ?probe:(unit -> unit) -> (unit -> 'a) -> 'a

module Make (D : Rig_edge.Driver) : sig
  include
    Rig_edge.Driver with type t = D.t and type region = D.region and type image = D.image

  (** What rig left behind, for ASYNC-1: each device opened through this
      wrapper that was never stopped, and, once its word read the last value
      given to submit, each region never freed and each image never
      unloaded.  Forgets the devices (a new run starts clean). *)
  val leftovers : unit -> string list
end
