(** The edge primitives a driver's OCaml code (and rig) uses to count its
    locks and to block signals (SIG-9): the OCaml side of rig_edge.h.

    The lock count is per system thread and shared with C ([rig_holds ()]
    of rig_edge.h reads the same counter). *)

(** {1 The lock count} *)

(** [holds ()] is the number of counted locks the calling thread holds. *)
val holds : unit -> int

(** [hold ()] counts a lock the thread is about to take; [give ()] uncounts
    one it just gave back (LOCK-3). *)
val hold : unit -> unit
val give : unit -> unit

(** [check_unheld fn] raises [Invalid_argument (fn ^ ": called inside a lock")]
    when [holds () <> 0].  The first thing of every driver function that may
    take a lock and that rig calls without its own check (LOCK-4), and of
    every rig call (LOCK-2). *)
val check_unheld : string -> unit

(** {1 Counted locks} *)

module Lock : sig
  type t

  (** [create ~rig name]: [rig] marks a lock of rig's own, which no thread
      holding any counted lock may take (LOCK-7). *)
  val create : ?rig:bool -> string -> t

  val name : t -> string

  (** [protect l f] takes [l] immediately before the handler that gives it
      back, runs [f], and gives [l] back first on both the return and the
      raise (ASYNC-2), counting it from before the take to after the give.
      Raises Invalid_argument, having taken nothing, if the thread already
      holds [l], or if [l] is rig's and the thread holds any lock (LOCK-7). *)
  val protect : t -> (unit -> 'a) -> 'a

  (** [order_inversions ()]: pairs of locks (by name) that threads of this
      process have taken in both orders — the one order of driver locks
      broken (LOCK-8), seen before any deadlock happens.  Every [protect]
      records the order it takes its lock in, inside the locks the thread
      holds. *)
  val order_inversions : unit -> (string * string) list

  (** [await l c] inside [protect l]: waits on [c], giving [l] back while it
      blocks, as a wait (see {!wait}); [l] is held again when it returns or
      raises. *)
  val await : t -> Condition.t -> unit
end

(** {1 Signals} *)

(** A thread's signal mask, as saved by {!mask}. *)
type mask

(** [mask ()] blocks all the calling thread's signals but those a fault
    raises (rig_mask) and returns the mask it had.  rig calls it before every
    driver call but locate, peer and signaled (SIG-1). *)
val mask : unit -> mask

(** [restore m] gives the thread back the mask [m]. *)
val restore : mask -> unit

(** [masked f] is [f ()] between [mask] and [restore], on both paths. *)
val masked : (unit -> 'a) -> 'a

(** [wait step] runs a wait's blocking step: it unblocks the signals rig_mask
    blocked right before [step], and right after it, whether [step] returns
    or raises, runs the handlers of the signals that came meanwhile and
    blocks them again (SIG-2, SIG-4).  [step] must release the OCaml runtime
    while it blocks (SIG-3).  An exception a handler raises ends the wait. *)
val wait : (unit -> 'a) -> 'a

(** [in_wait ()] is whether the calling thread is inside a wait: between
    the unblock right before a wait's blocking step (rig_unblock) and the
    block right after it (rig_block), the handlers that step's end runs
    included.  For the certifier's signal probes (SIG-2): a handler that
    runs inside a driver call must see it true.  Not for drivers. *)
val in_wait : unit -> bool

(** [shield f] runs a finaliser's or an exit handler's body with all signals
    blocked, its waits included (SIG-7). *)
val shield : (unit -> 'a) -> 'a

(** [spawn f] starts a driver thread whose signals stay blocked for its life
    (SIG-8), from its first instruction, whatever the caller's mask. *)
val spawn : (unit -> unit) -> Thread.t

(** The signals rig_mask leaves unblocked because a fault raises them. *)
val fault_signals : int list

(** {1 What the certifier observes}

    Not for drivers: the certifier's probes read these at allocation points
    inside a driver's calls. *)

(** Whether the calling thread's mask is the one the primitives last left
    it with (true where none has set one yet): false once code changed it
    by other means (SIG-9). *)
val mask_as_left : unit -> bool

(** Whether the calling thread blocks every signal rig_mask blocks (SIG-6,
    SIG-7). *)
val blocks_rig_set : unit -> bool

(** How many counted locks the calling thread has taken and waits it has
    entered so far (LOCK-6: locate and peer do neither). *)
val activity : unit -> int

(** How many times the calling thread has blocked signals through {!mask}
    (rig_mask) or {!shield} (rig_shield_begin) so far (SIG-6, SIG-7). *)
val masks : unit -> int

(** How many waits the calling thread has entered so far. *)
val waits : unit -> int

(** [account_queued_in_waits true]: from now on, the calling thread's
    waits note how long it was runnable but waited for a CPU inside them
    (two reads of /proc/thread-self/schedstat per wait), until [false].
    For the certifier's SIG-3 probe, which must not blame on a wait the
    time its thread waited for a CPU outside it, holding the runtime as of
    right.  Not for drivers. *)
val account_queued_in_waits : bool -> unit

(** The total noted so far on the calling thread, in ms. *)
val queued_in_waits : unit -> float

(** [time_in_waits ()]: with the same accounting on, the wall time the
    calling thread has spent inside waits so far and, of it, the time it
    held the OCaml runtime (outside the blocking sections its steps
    entered; a step that let it go before its rig_unblock holds nothing),
    both in ms.  The second overstates, never understates: a runtime let
    go other than through a blocking section (Thread.yield) counts as
    held.  For the SIG-3 probe.  Not for drivers. *)
val time_in_waits : unit -> float * float

(** Whether the runtime's blocking-section hooks still note held time: a
    library that set its own after this module started drops them, and
    then [time_in_waits] gives the whole time in waits as held. *)
val runtime_hooks_chained : unit -> bool

(** [signal_at_wait n] (n >= 1): the [n]-th wait the calling thread enters
    from now sends it SIGUSR2 as it unblocks signals, so that the signal's
    OCaml handler runs as the wait ends (ASYNC-1, ASYNC-2 at every wait);
    [signal_at_wait 0] disarms. *)
val signal_at_wait : int -> unit

(** {1 The self-test's edge mutants}

    Not for drivers: knobs that each break one edge clause (LOCK-7, SIG-4,
    SIG-5), so that the certifier's edge checks are proven to fail.  None is
    active unless the self-test sets one. *)
module Mutant : sig
  (** [(name, clause, what it breaks)] *)
  val all : (string * string * string) list

  (** Invalid_argument for an unknown name. *)
  val set : string option -> unit
end
