(** hostmem: a rig driver whose device is the host.

    Memory is host memory; Device memory is charged to a budget of
    {!capacity} bytes per device.  Work runs on a thread of the device's own.
    The timeline word is a host 64-bit atomic inside the device.  Two devices
    ("hostmem0", "hostmem1"), which map each other's memory.

    Images are text:
    {v
    hostmem-image 1
    <function> <kind> <scratch bytes>
    v}
    with kind one of [nop] (touches its scratch), [spin] (busy for argument 0
    milliseconds), [fault] (makes the device fault), [hang] (never ends),
    [refuse] (a submit of its launch fails). *)

include Rig_edge.Package

(** What it registers beyond its kit: [refused_launch] is [refuse] of
    kit.binary with that function added;
    [scratch_functions] names its functions work0, work1, ... *)
val kit_more : Rig_edge.kit_more

(** Device memory per device, in bytes. *)
val capacity : int

(** An image with no function. *)
val empty_image : string

(** {1 The library's own functions}

    Beyond [Rig_edge.Driver]: what a program that drives a hostmem device
    directly (a tool, a test) may use.  None takes a lock. *)

(** A number that identifies the device among those of this process. *)
val id : D.t -> int

(** The name of the opener that made the device. *)
val device_name : D.t -> string

(** Whether committed work of the device has not finished yet (false once
    stopped or faulted). *)
val busy : D.t -> bool

(** Whether the device was stopped (by [D.stop] or {!abort}). *)
val stopped : D.t -> bool

(** [abort d] ends the device's work at once, as a watchdog would: the
    queues drop everything and the word keeps the value it reads.  Not
    [D.stop]: it does not write the last value given to submit. *)
val abort : D.t -> unit

(** [map d p n] maps exactly the [n] bytes of host memory at [p] for [d]'s
    work ([D.map_host] maps the whole pages that hold them). *)
val map : D.t -> nativeint -> int -> D.region

(** [compile i f] makes an entry of [f] as [D.entry] does, but without
    looking for one [i] already has: each call makes new scratch memory and
    a new handle.  [D.entry] calls it once per function and keeps what it
    made. *)
val compile : D.image -> string -> Rig_edge.entry_answer
