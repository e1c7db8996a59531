(** The OCaml edge between rig and its drivers: the types the document names
    but does not define, and [module type Driver].  Each type's decision is
    argued in spec/decisions.md. *)

(** Rig.word: alloc sizes are positive multiples of it (MEM-1). *)
val word : int

(** The kinds of device memory. *)
type memory =
  | Device  (** the device's own memory *)
  | Mapped  (** host memory the device reaches, and the host too, coherently *)
  | Pinned  (** host memory pinned for the device; rig's fallback for Mapped (GUAR-6) *)

(** One part of a submission, as the driver's C functions receive it
    ([struct rig_part] of rig_edge.h).  Handles are the driver's own: a
    region's from {!place}, an entry's from {!entry_answer}. *)
type part =
  | Fill of { dst : int64; off : int; len : int; byte : int }
  | Copy of { src : int64; src_off : int; dst : int64; dst_off : int; len : int }
  | Launch of { entry : int64; args : int64 list  (** at most 5 *) }

(** A submission encoded for the C functions: its parts in C memory. *)
type submission

(** [encode parts] lays the parts out as a [struct rig_submission].
    Raises Invalid_argument on a Launch with more than 5 arguments. *)
val encode : part list -> submission

val parts : submission -> part list

(** room's answer (RIG_ROOM / RIG_GROW). *)
type room = Room | Grow

(** A device's C functions (struct rig_queue_fns and its device pointer),
    wrapped so that rig calls them from OCaml.  A record of closures so that
    a validation layer can wrap them like any driver function.
    [submit] and [commit] answer [false] for a failed call. *)
type queue = {
  room : submission -> room;
  submit : submission -> value:int -> bool;
  commit : unit -> bool;
}

(** [c_queue ~fns ~dev] is the queue of the C table at address [fns]
    ([const struct rig_queue_fns *]) for the device pointer [dev].  The
    calls run without the OCaml runtime lock when [may_block]. *)
val c_queue : fns:nativeint -> dev:nativeint -> may_block:bool -> queue

(** What a device declares, the driver's own word (Rig_edge.facts). *)
type 'region facts = {
  may_block : bool;       (** its C functions may block: rig counts their calls (CNT-3) *)
  host_addresses : bool;  (** its Device memory has host addresses: rig may use it
                              where alloc of Mapped returns None (GUAR-6) *)
  maps_host : bool;       (** it maps host memory (map_host) (MEM-6) *)
  own_word : 'region option;  (** its timeline word, when the driver keeps it:
                                  rig reads it with signaled, frees it last *)
  queue : queue;          (** its C functions *)
}

(** Host access to a region's bytes. *)
type access =
  | Read of { off : int; into : bytes }    (** copy [Bytes.length into] bytes out *)
  | Write of { off : int; from : string }  (** copy [from] in *)

(** What locate answers: where a region is, for the C functions and the host. *)
type place = {
  handle : int64;   (** names the region in the parts of a submission *)
  size : int;       (** its bytes *)
  reach : (access -> unit) option;
      (** "the function of a Place": host copies in and out, None when the host
          cannot reach the region.  A counted call that may raise Fault and so
          lose the device (EXC-1). *)
}

(** What entry answers. *)
type entry_answer =
  | Entry of int64     (** the handle a Launch part names *)
  | Absent             (** the image has no such function *)
  | No_memory of int   (** no memory for the n bytes its launches need (CODE-3) *)

(** What grow answers. *)
type grow_answer = Grown | Short of int

(** How a PCI function reaches a region by DMA: the bus address of its first
    byte, the rest following contiguously. *)
type bus = Bus of int64

(** An opener names one device of a driver's hardware and makes it. *)
type 'device opener = {
  name : string;             (** stable across opens: rig stops the old device of a name
                                 at an open of that name (STOP-1) *)
  make : unit -> 'device;    (** may take a lock: checks rig_holds first (LOCK-4) *)
}

(** The signature every driver implements. *)
module type Driver = sig
  type t
  type region
  type image

  exception Fault of string

  val key : string
  val facts : t -> region facts
  val locate : t -> region -> place
  val peer : t -> t -> bool
  val alloc : t -> memory -> int -> region option
  val free : t -> region -> unit
  val map_peer : t -> t -> region -> region
  val map_host : t -> nativeint -> int -> region
  val dma : t -> region -> fn:string -> (bus, string) result
  val image : t -> string -> (image, string) result
  val entry : image -> string -> entry_answer
  val prepare : image -> string -> unit
  val grow : t -> grow_answer
  val signaled : t -> int
  val sleep : t -> seen:int -> still_ms:int -> unit
  val stop : t -> fault:string option -> unit
  val unload : image -> unit
end

(** The PCI function at a bus address of the machine, as the certifier plays
    it: what that function reads and writes by DMA at the addresses dma
    answered.  It stands for the machine's hardware, not for the driver: no
    Driver function is called through it, and the driver must keep its
    answers true (MEM-10, MEM-11) without knowing when it is used.  A
    package whose machine offers no such access (a real bus is not
    observable from the process) leaves [kit.bus_agent] None, and MEM-9 to
    MEM-11 come out n/a.

    - [read ~fn (Bus a) n] is the [n] bytes at [a] on [fn]'s bus, as [fn]
      reads them by DMA;
    - [write ~fn (Bus a) s] writes [s] there by DMA.
    Both raise Invalid_argument, having moved nothing, when the bytes are
    not all within memory that a dma of [fn] answered.  They may be called
    at any time, from any thread that holds no lock. *)
type bus_agent = {
  read : fn:string -> bus -> int -> string;
  write : fn:string -> bus -> string -> unit;
}

(** Certification material: what the certifier needs, beyond the Driver, to
    make work on a driver's devices.  An absent item makes the clauses that
    need it n/a, with the item named as the reason. *)
type kit = {
  binary : string;                  (** an image the devices take *)
  refused_binary : string option;   (** an image they refuse with Error (CODE-1) *)
  spin : string option;   (** a function of [binary]: busy for arg 0 milliseconds, then done *)
  fault : string option;  (** a function of [binary]: makes the device fault *)
  hang : string option;   (** a function of [binary]: never ends *)
  scratch : (int -> string * string) option;
      (** [scratch n] is a binary and one of its functions whose launches need
          n bytes of device memory (CODE-2..CODE-5) *)
  bus_function : string option;
      (** a bus address of this machine that reaches all of a small Device
          region by DMA (MEM-8) *)
  bus_agent : bus_agent option;
      (** the PCI function at [bus_function], played by the certifier
          (MEM-9..MEM-11); None where the harness cannot act on the bus *)
}

(** Certification material added after {!kit}'s first version.  It is
    abstract and made by {!kit_more}, so that each later item is one more
    optional argument and a package written before it still builds; a
    package gives it when it registers ([Rig_edge_registry.register
    ~more]).  An absent item makes the clauses that need it n/a, as for
    {!kit}. *)
type kit_more

(** [kit_more ?refused_launch ?scratch_functions ()]:
    - [refused_launch]: a binary the devices take and one of its
      functions whose launch the device's submit refuses: a submit whose
      submission launches it (after a RIG_ROOM for it) fails, which loses
      the device (STOP-3's "also when that submit failed").
    - [scratch_functions sizes]: a binary with one function per size, in
      that order, each one's launches needing that many bytes of device
      memory, and the functions' names, in the same order: what
      [kit.scratch] is for one function, for several in one image (CODE-7's
      "changed nothing" for the image's other functions). *)
val kit_more :
  ?refused_launch:string * string -> ?scratch_functions:(int list -> string * string list) -> unit -> kit_more

val refused_launch : kit_more -> (string * string) option
val scratch_functions : kit_more -> (int list -> string * string list) option

(** What a driver library offers besides its Driver: its capability (the
    devices of this machine, as openers) and the material the certifier
    needs to make work on it.  Both functions may take a lock and check
    rig_holds first (LOCK-4). *)
module type Package = sig
  module D : Driver

  val name : string
  val openers : unit -> D.t opener list

  val kit : kit
end
