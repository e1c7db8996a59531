(** The validation layer: wraps any Driver and checks, at every call a rig
    makes, that the rig keeps its side of the document (the [rig] clauses of
    spec/clauses.tsv).  It depends on nothing of the reference rig: put it
    between any rig and any driver.

    Every call is recorded (thread, device, function, counted or not,
    outcome).  A broken guarantee is recorded as a violation naming its
    clause and the events that show it; the call then goes on unchanged,
    so that the rig's behaviour is observed, not altered — except after a
    GUAR-7 violation (a rig that does not bound hangs), where the wrapper's
    sleep raises {!Abandoned} to end a run that would never end.

    What a wrapper cannot see, the program that drives the rig tells it:
    when it asks the rig to open or close a device ({!user}), and the rig's
    hang bound ([hang_ms]).  What only rig's answers show is the program's
    to check: that an exception lost nothing (EXC-2, EXC-3), that a
    buffer only a submission kept can be collected after stop (CNT-5), and
    what a round of reclamation gave back (CODE-4, QUEUE-4: the wrapper
    counts the asks; a round that frees nothing shows no call). *)

type phase = Start | Return of string | Raise of string

type event = {
  seq : int;          (** order of the event in the run *)
  thread : int;       (** Thread.id of the caller *)
  device : string;    (** the device's name and open number, e.g. "fake0#2" *)
  fn : string;        (** the driver function, or "room"/"submit"/"commit" *)
  counted : bool;     (** whether the document counts this call *)
  phase : phase;
}

type violation = { clause : string; detail : string; events : event list }

(** Raised by the wrapped sleep once the rig kept sleeping past its hang
    bound (GUAR-7), to end the run. *)
exception Abandoned of string

(** What the driving program is asking the rig to do: stop is due only
    inside an Open or a Close (STOP-1); a [Request what] is any other
    request (e.g. "entry"), which starts the count of the asks it makes
    (CODE-4) afresh on its thread. *)
type user_act = Open of string | Close of string | Request of string

module Make (D : Rig_edge.Driver) : sig
  include Rig_edge.Driver

  (** [opener o] is the opener rig should use: it records the device's name. *)
  val opener : D.t Rig_edge.opener -> t Rig_edge.opener

  (** [user act f] runs [f ()], the program's request to the rig, as [act].
      Asked on a thread that holds a counted lock, [f] must raise
      Invalid_argument before any driver call, or it breaks LOCK-2. *)
  val user : user_act -> (unit -> 'a) -> 'a

  (** [set_hang_ms ms]: the rig's hang bound, for GUAR-7 and STOP-1. *)
  val set_hang_ms : int -> unit

  (** [lost_for_hang name]: the program saw a wait on the open device of
      [name], whose only work hangs, end in Device_lost: rig lost it for
      its hang bound (or a Fault), so its stop must carry Some (STOP-1). *)
  val lost_for_hang : string -> unit

  (** [await_in_flight ~unless fn] blocks until some thread is inside a
      call of [fn] (a driver function name), or [unless ()] holds once
      {!poke} or a call wakes it: lets a scenario act at that moment. *)
  val await_in_flight : ?unless:(unit -> bool) -> string -> unit

  (** [poke ()] wakes the threads in {!await_in_flight} to look again. *)
  val poke : unit -> unit

  (** [on_raise f]: from now on, [f fn e] runs when a driver call of [fn]
      raises [e], on the calling thread, before [e] goes back to rig (so
      still under the mask rig set for the call): lets a scenario act at
      that moment.  [on_raise (fun _ _ -> ())] ends it. *)
  val on_raise : (string -> exn -> unit) -> unit

  (** The calls made so far, per function: what a systematic sweep fails
      one by one. *)
  val calls : unit -> (string * int) list

  (** [finish ()] closes the run's checks that need its end (CODE-4,
      QUEUE-6) and answers the violations, in order. *)
  val finish : unit -> violation list

  val events : unit -> event list
end
