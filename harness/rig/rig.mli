(** The reference rig: what rig does to a driver according to the document,
    and nothing more.  It opens devices through openers, counts the calls in
    flight on each device that is not lost, loses devices when the document
    says, stops them once, frees and unloads after stop once the word reads
    the last value, falls back from Mapped memory, runs the rounds of
    reclamation, bounds hangs, and refuses calls made inside a lock.

    Each of its decisions on the document's open points is in
    spec/decisions.md.  How it calls a driver (counting, masks, losses, the
    word) is {!Rig_calls}.  Its mutants ({!Rig_mutant}) each break one
    rig-side clause, to prove that the validation layer catches it: each is
    a variant of one step, installed by {!Rig_mutant.set}, so that the
    conforming paths test no mutant. *)

(** The device is lost: the reason (a Fault's text, an exception's text, a
    failed submit or commit, the hang bound, a close). *)
exception Device_lost of string

(** No memory after the last round of reclamation: the bytes asked. *)
exception Out_of_memory of int

module Make (D : Rig_edge.Driver) : sig
  type device
  type buffer
  type image

  (** [set_hang_ms ms]: how long the word may stand still under pending
      work before rig loses the device with [fault = Some] (GUAR-7).
      Default 2000. *)
  val set_hang_ms : int -> unit

  (** [open_ o] opens the device [o] names, stopping first the device of the
      same name if one is still open (STOP-1). *)
  val open_ : D.t Rig_edge.opener -> device

  (** [close d] stops [d] once no counted call is in flight, then frees its
      memory and unloads its images once its word reads the last value. *)
  val close : device -> unit

  val name : device -> string

  (** [lost d] is [Some why] once [d] is lost. *)
  val lost : device -> string option

  (** [drained d]: [d] is stopped and its word read the last value, so
      that rig gave its memory back (or will, as mappings over it go). *)
  val drained : device -> bool

  (** [alloc d m n]: [n] bytes rounded up to a whole Rig.word. *)
  val alloc : device -> Rig_edge.memory -> int -> buffer

  (** [free b]: given back once no work uses it and no mapping over it lives. *)
  val free : buffer -> unit

  (** [map_peer d b]: [b]'s memory (of another device) mapped for [d]. *)
  val map_peer : device -> buffer -> buffer

  (** [map_host d p n]; Invalid_argument where [d] does not declare maps_host. *)
  val map_host : device -> nativeint -> int -> buffer

  val dma : buffer -> fn:string -> (Rig_edge.bus, string) result
  val write : buffer -> int -> string -> unit
  val read : buffer -> int -> int -> string
  val size : buffer -> int

  val load : device -> string -> (image, string) result
  val unload : image -> unit

  (** [entry i f]: the launch handle, None if [i] has no [f]; Out_of_memory
      after the last round of reclamation. *)
  val entry : image -> string -> int64 option

  val prepare : image -> string -> unit

  (** What a part of a submission names. *)
  type arg = Buf of buffer | Int of int

  type part =
    | Fill of buffer * int * int * int  (** buffer, offset, length, byte *)
    | Copy of buffer * int * buffer * int * int  (** src, offset, dst, offset, length *)
    | Launch of int64 * arg list

  (** [submit d parts] puts the work on [d] and answers its timeline value. *)
  val submit : device -> part list -> int

  (** [wait d v] returns once [d]'s word reads at least [v]; Device_lost on a
      Fault or after the hang bound. *)
  val wait : device -> int -> unit
end
