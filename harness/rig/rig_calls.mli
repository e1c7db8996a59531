(** How the reference rig calls a driver (the part of {!Rig} below the
    program's calls): rig's own lock and the count of calls in flight on
    each device, the masks, what a call's Fault or other exception does to
    its device, the word (signaled, and waiting for a value under the hang
    bound).  The mutants of these steps (CNT-2, CNT-3, CNT-5, CNT-6, EXC-1,
    EXC-2, EXC-3, GUAR-7, LOCK-2, ASYNC-1) are in [Mutants]. *)

(** The functions whose exceptions other than Fault lose the device (EXC-1). *)
val losing_fns : string list

val now_ms : unit -> float

(** The reference rig's exceptions (defined by {!Rig}). *)
module type Losses = sig
  exception Device_lost of string
  exception Out_of_memory of int
end

module Make (D : Rig_edge.Driver) (L : Losses) : sig
  type device = (D.t, D.region, D.image) Rig_types.device

  (** rig's own lock, and the condition its records' changes signal. *)
  val rig_lock : Rig_edge_primitives.Lock.t

  val changed : Condition.t
  val with_rig : (unit -> 'a) -> 'a

  (** The hang bound in ms (GUAR-7). *)
  val hang_ms : int ref

  (** [start fn]: Invalid_argument when called inside a lock (LOCK-2). *)
  val start : string -> unit

  (** [lose d ?fault why]: [d] is lost, [fault] kept for its stop. *)
  val lose : device -> ?fault:string -> string -> unit

  (** [counted d fn f]: [f ()], the driver's [fn], counted in flight on [d]
      (unless [~count:false]) and masked (unless [~mask:false]); a Fault
      loses [d] and raises Device_lost; another exception loses it where
      EXC-1 says, and is raised again. *)
  val counted : ?mask:bool -> ?count:bool -> device -> string -> (unit -> 'a) -> 'a

  (** [c_call d fn f]: a C function's call, counted where [d] declares
      may_block (CNT-3). *)
  val c_call : device -> string -> (unit -> 'a) -> 'a

  val uncounted_masked : (unit -> 'a) -> 'a

  (** [!dropping_faults f]: [f] masked and uncounted, any exception
      dropped (false): free and unload after stop (STOP-7). *)
  val dropping_faults : ((unit -> unit) -> bool) ref

  (** [!let_go d ~upto]: rig lets go of the values the submissions up to
      [upto] keep alive (CNT-5). *)
  val let_go : (device -> upto:int -> unit) ref

  (** [signaled d]: the word, read (counted, unmasked) and noted. *)
  val signaled : device -> int

  (** [wait_word d v] returns once the word reads [v], sleeping counted;
      Device_lost when [d] is lost or the word stands still for the hang
      bound. *)
  val wait_word : device -> int -> unit

  module Mutants : sig
    (** [(name, install)] for {!Rig_mutant.register}. *)
    val variants : (string * (unit -> unit)) list
  end
end
