(* Types of the edge and the Driver signature; see rig_edge.mli. *)

let word = 4

type memory = Device | Mapped | Pinned

type part =
  | Fill of { dst : int64; off : int; len : int; byte : int }
  | Copy of { src : int64; src_off : int; dst : int64; dst_off : int; len : int }
  | Launch of { entry : int64; args : int64 list }

type c_submission

type submission = { parts : part list; c : c_submission }

external c_encode : (int * int64 array) array -> c_submission = "caml_rig_encode"

(* The op codes of enum rig_op in rig_edge.h. *)
let op_fill = 1
let op_copy = 2
let op_launch = 3

let lay_out = function
  | Fill { dst; off; len; byte } ->
      (op_fill, [| dst; Int64.of_int off; Int64.of_int len; Int64.of_int byte |])
  | Copy { src; src_off; dst; dst_off; len } ->
      ( op_copy,
        [| src; Int64.of_int src_off; dst; Int64.of_int dst_off; Int64.of_int len |] )
  | Launch { entry; args } ->
      if List.length args > 5 then invalid_arg "Rig_edge.encode: a Launch takes at most 5 arguments";
      (op_launch, Array.of_list (entry :: args))

let encode parts =
  let laid = Array.of_list (List.map lay_out parts) in
  { parts; c = c_encode laid }

let parts s = s.parts

type room = Room | Grow

type queue = {
  room : submission -> room;
  submit : submission -> value:int -> bool;
  commit : unit -> bool;
}

external c_room : nativeint -> nativeint -> c_submission -> bool -> int = "caml_rig_queue_room"
external c_submit : nativeint -> nativeint -> c_submission -> int -> bool -> int
  = "caml_rig_queue_submit"
external c_commit : nativeint -> nativeint -> bool -> int = "caml_rig_queue_commit"

(* RIG_ROOM and RIG_GROW of rig_edge.h. *)
let rig_grow = 1

let c_queue ~fns ~dev ~may_block =
  {
    room = (fun s -> if c_room fns dev s.c may_block = rig_grow then Grow else Room);
    submit = (fun s ~value -> c_submit fns dev s.c value may_block = 0);
    commit = (fun () -> c_commit fns dev may_block = 0);
  }

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

(** What a driver library offers besides its Driver: its capability (the
    devices of this machine, as openers) and the material the certifier
    needs to make work on it.  Both functions may take a lock and check
    rig_holds first (LOCK-4). *)
type kit_more = {
  refused_launch : (string * string) option;
  scratch_functions : (int list -> string * string list) option;
}

let kit_more ?refused_launch ?scratch_functions () = { refused_launch; scratch_functions }
let refused_launch m = m.refused_launch
let scratch_functions m = m.scratch_functions

module type Package = sig
  module D : Driver

  val name : string
  val openers : unit -> D.t opener list

  val kit : kit
end
