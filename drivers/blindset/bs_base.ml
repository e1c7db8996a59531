(* Bs_base: hostmem (drivers/hostmem/hostmem.ml) as it is, over hostmem's own
   C stubs, with its internals open to the blindset drivers, which each
   change one thing.  What differs from hostmem.ml: regions have a mutable
   handle and a bus pin; a device has the address of its queue wrapper
   (bs_stubs.c) and a few fields of the drivers' own; make takes options;
   a simulated PCI bus (dma, kit.bus_agent) for the MEM-8..MEM-11 drivers. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev

external c_open : int -> cdev = "hm_open"
external c_ptr : cdev -> nativeint = "hm_dev_ptr"
external c_fns : unit -> nativeint = "hm_fns"
external c_alloc : cdev -> bool -> int -> int = "hm_alloc"
external c_map : cdev -> nativeint -> int -> int = "hm_map"
external c_map_peer : cdev -> cdev -> int -> int = "hm_map_peer"
external c_free : cdev -> int -> bool = "hm_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "hm_access_byte" "hm_access"

external c_entry : cdev -> int -> int -> int = "hm_entry"
external c_grow : cdev -> int = "hm_grow"
external c_signaled : cdev -> int = "hm_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "hm_wait"
external c_fault : cdev -> string option = "hm_fault"
external c_stop : cdev -> bool -> unit = "hm_stop"
external c_busy : cdev -> bool = "hm_busy"
external c_stopped : cdev -> bool = "hm_stopped"

(* ---------------------------------------------------------- constants *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* The image format, a text of lines:

     hostmem-image 1
     <function name> <kind> <scratch bytes>
     ...

   kind is one of nop (touches its scratch), spin (busy for argument 0
   milliseconds), fault (makes the device fault), hang (never ends).  Names
   are non-empty and without blanks; each appears once. *)

type kind = Nop | Spin | Fault_fn | Hang

let kind_code = function Nop -> 0 | Spin -> 1 | Fault_fn -> 2 | Hang -> 3

let kind_of_string = function
  | "nop" -> Some Nop
  | "spin" -> Some Spin
  | "fault" -> Some Fault_fn
  | "hang" -> Some Hang
  | _ -> None

let header = "hostmem-image 1"

let parse b =
  match String.split_on_char '\n' b with
  | h :: lines when String.trim h = header ->
      let rec go acc = function
        | [] -> Ok (List.rev acc)
        | l :: rest -> (
            match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
            | [] -> go acc rest
            | [ name; k; n ] -> (
                match (kind_of_string k, int_of_string_opt n) with
                | None, _ -> Error (Printf.sprintf "hostmem: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "hostmem: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "hostmem: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "hostmem: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "hostmem: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "hostmem: not a hostmem image (no %S header)" header)

let empty_image = header ^ "\n"

(* ------------------------------------------------------------- driver *)

module D = struct
  type t = {
    c : cdev;
    id : int;
    name : string;
    queue : queue;
    q : nativeint;  (* the queue wrapper, 0n when hostmem's table is used *)
    mutable word : region option;  (* set once at open *)
    mutable fault_told : bool;  (* for bs-sleep-consumes-fault *)
    mutable window : region option;  (* for bs-peer-window-reused *)
    mutable stopped : bool;  (* stop ran *)
  }

  and region = { owner : t; mutable h : int; size : int; kind : rkind; mutable pinned : bool }
  and rkind = Mem | Mapping | Word

  type image = {
    dev : t;
    fns : (string * (kind * int)) list;
    lock : Prim.Lock.t;  (* guards entries *)
    entries : (string, int) Hashtbl.t;  (* f -> handle *)
  }

  exception Fault of string

  let key = "blindset"

  let facts d =
    { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

  let access r = function
    | Read { off; into } ->
        let len = Bytes.length into in
        if off < 0 || off + len > r.size then invalid_arg "hostmem: read out of the region";
        if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "hostmem: read of a freed region")
    | Write { off; from } ->
        let len = String.length from in
        if off < 0 || off + len > r.size then invalid_arg "hostmem: write out of the region";
        if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
          raise (Fault "hostmem: write of a freed region")

  (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
  let locate _ r =
    { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

  (* Every hostmem device maps every other's memory: all of it is host
     memory.  Known at open, whatever happens after (MEM-4). *)
  let peer _ _ = true

  let alloc d m n =
    if n <= 0 then invalid_arg "hostmem: alloc of a non-positive size";
    let h = c_alloc d.c (m = Device) n in
    if h = 0 then None else Some { owner = d; h; size = n; kind = Mem; pinned = false }

  let free _ r =
    match r.kind with
    | Word -> () (* the word lives in the device, which lives as long as it is reachable *)
    | Mem when r.pinned -> () (* held for its PCI function until the process exits (MEM-11) *)
    | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "hostmem: free of a region that is not live"

  let map_peer d _ r =
    let h = c_map_peer d.c r.owner.c r.h in
    if h = 0 then raise (Fault "hostmem: map_peer of a region that is not live");
    { owner = d; h; size = r.size; kind = Mapping; pinned = false }

  let map d p n =
    let h = c_map d.c p n in
    if h = 0 then raise (Fault "hostmem: no host memory for the mapping");
    { owner = d; h; size = n; kind = Mapping; pinned = false }

  (* The whole pages that hold the n bytes (MEM-7). *)
  let map_host d p n = map d p (round_up n page)

  let dma _ _ ~fn =
    Error (Printf.sprintf "hostmem: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

  let image d b =
    match parse b with
    | Error e -> Error e
    | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "hostmem.image"; entries = Hashtbl.create 8 }

  (* Makes the entry of f, whatever the image made before: the scratch memory
     its launches use, charged to the device. *)
  let compile i f =
    match List.assoc_opt f i.fns with
    | None -> Absent
    | Some (k, n) ->
        let cap = capacity in
        if n > cap then
          invalid_arg (Printf.sprintf "hostmem: %s needs %d bytes of scratch, the device has %d in all" f n cap);
        let h = c_entry i.dev.c (kind_code k) (round_up n word) in
        if h = 0 then No_memory (max n word) else Entry (Int64.of_int h)

  let entry i f =
    Prim.Lock.protect i.lock (fun () ->
        match Hashtbl.find_opt i.entries f with
        | Some h -> Entry (Int64.of_int h)
        | None -> (
            match compile i f with
            | Entry h as e ->
                Hashtbl.replace i.entries f (Int64.to_int h);
                e
            | a -> a))

  (* Making an entry is quick here: doing nothing is a valid prepare (CODE-6,
     CODE-7); the next entry makes it. *)
  let prepare _ _ = ()

  let unload i =
    Prim.Lock.protect i.lock (fun () ->
        Hashtbl.iter (fun _ h -> ignore (c_free i.dev.c h)) i.entries;
        Hashtbl.reset i.entries)

  let grow d = match c_grow d.c with 0 -> Grown | n -> Short n

  (* No lock, no wait (TIME-1, LOCK-5). *)
  let signaled d = c_signaled d.c

  let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

  let sleep d ~seen ~still_ms =
    check_fault d;
    if c_signaled d.c = seen && still_ms > 0 then begin
      Prim.wait (fun () -> c_wait d.c seen still_ms);
      check_fault d
    end

  let stop d ~fault:_ =
    d.stopped <- true;
    c_stop d.c true
end

(* ------------------------------------------------------------ package *)

let next_id = Atomic.make 0

external bs_fns : unit -> nativeint = "bs_fns"
external bs_wrap : nativeint -> nativeint -> int -> nativeint = "bs_wrap"

(* The queue wrapper's modes (bs_stubs.c). *)
type qmode = Q_none | Q_plain | Q_grow_once | Q_regrow | Q_submit_lock | Q_early_reject | Q_grow_once_first

let qmode_code = function
  | Q_none | Q_plain -> 0 | Q_grow_once -> 1 | Q_regrow -> 2 | Q_submit_lock -> 3 | Q_early_reject -> 4
  | Q_grow_once_first -> 5

(* make's body, without the check or the mask. *)
let open_device ?(qmode = Q_none) ?(may_block = true) name =
  let c = c_open capacity in
  let ptr = c_ptr c in
  let q = match qmode with Q_none -> 0n | m -> bs_wrap (c_fns ()) ptr (qmode_code m) in
  let queue =
    if q = 0n then c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block else c_queue ~fns:(bs_fns ()) ~dev:q ~may_block
  in
  let d =
    { D.c; id = Atomic.fetch_and_add next_id 1; name; queue; q; word = None; fault_told = false; window = None; stopped = false }
  in
  d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word; pinned = false };
  d

let make ?qmode ?may_block ?(after = fun _ -> ()) name () =
  Prim.check_unheld "Bs_base.make";
  Prim.masked (fun () ->
      let d = open_device ?qmode ?may_block name in
      after d;
      d)

let device_names = [ "hostmem0"; "hostmem1" ]

let openers_with ?qmode ?may_block ?after () =
  Prim.check_unheld "Bs_base.openers";
  Prim.masked (fun () -> List.map (fun n -> { name = n; make = make ?qmode ?may_block ?after n }) device_names)

let openers () = openers_with ()

let binary =
  String.concat "\n" [ header; "spin spin 0"; "fault fault 0"; "hang hang 0"; "nop nop 64"; "" ]

let kit =
  {
    binary;
    refused_binary = Some "\x7fELF not a hostmem image";
    spin = Some "spin";
    fault = Some "fault";
    hang = Some "hang";
    scratch = Some (fun n -> (Printf.sprintf "%s\nwork nop %d\n" header n, "work"));
    bus_function = None;
    bus_agent = None;
  }

(* ------------------------------------------------- the library's own *)

let id (d : D.t) = d.id
let device_name (d : D.t) = d.name
let busy (d : D.t) = c_busy d.c
let stopped (d : D.t) = c_stopped d.c
let abort (d : D.t) = c_stop d.c false
let map = D.map
let compile = D.compile

(* ---------------------------------------------------------------- bus *)

(* A simulated PCI function of the machine, [bus_fn], whose memory BAR
   reaches [bar] bytes of a device's memory by DMA.  dma gives a region a
   window of bus addresses of its own; the window and the region's memory
   stay for the life of the process, whatever rig frees or stops (MEM-11),
   and fn belongs to the first device that got a window (no other open gets
   one).  The bus agent reads and writes the region's live memory. *)

let bus_fn = "0000:41:00.0"
let bar = 1 lsl 16

type window = { base : int64; len : int; region : D.region; fn : string }

(* A lock-free stack whose push allocates nothing in its retry loop (so that
   a callback at an allocation cannot starve it); entries are removed by
   marking them gone. *)
module Stack = struct
  type 'a node = { v : 'a; mutable next : 'a node option; mutable gone : bool }
  type 'a t = 'a node option Atomic.t

  let create () : 'a t = Atomic.make None

  let push (st : 'a t) v =
    let node = { v; next = None; gone = false } in
    let s = Some node in
    let rec loop () =
      let h = Atomic.get st in
      node.next <- h;
      if not (Atomic.compare_and_set st h s) then loop ()
    in
    loop ()

  let rec iter_nodes f = function None -> () | Some n -> if not n.gone then f n; iter_nodes f n.next
  let iter f st = iter_nodes (fun n -> f n.v) (Atomic.get st)

  let find p st =
    let rec go = function None -> None | Some n -> if (not n.gone) && p n.v then Some n.v else go n.next in
    go (Atomic.get st)

  let remove p st = iter_nodes (fun n -> if p n.v then n.gone <- true) (Atomic.get st)
end

let windows : window Stack.t = Stack.create ()
let fn_owner : int option Atomic.t = Atomic.make None
let bus_cursor = Atomic.make 0

let is_hex c = match c with '0' .. '9' | 'a' .. 'f' | 'A' .. 'F' -> true | _ -> false

(* DDDD:BB:DD.F *)
let is_bus_address s =
  String.length s = 12
  && s.[4] = ':' && s.[7] = ':' && s.[10] = '.'
  && List.for_all (fun i -> is_hex s.[i]) [ 0; 1; 2; 3; 5; 6; 8; 9; 11 ]

let add_window w = Stack.push windows w
let window_of (r : D.region) = Stack.find (fun w -> w.region == r) windows

let new_base len = Int64.add 0x8000_0000L (Int64.of_int (Atomic.fetch_and_add bus_cursor (round_up len page)))

(* Checks fn; None when the region may get a window. *)
let dma_refusal (d : D.t) (r : D.region) ~fn =
  if not (is_bus_address fn) then Some (Printf.sprintf "blindset: %S is not a PCI bus address" fn)
  else if fn <> bus_fn then Some (Printf.sprintf "blindset: no PCI function %s on this machine" fn)
  else if r.D.kind <> D.Mem then Some (Printf.sprintf "blindset: %s reaches only allocated memory" fn)
  else if r.D.size > bar then
    Some (Printf.sprintf "blindset: the memory BAR of %s is %d bytes, smaller than the region's %d" fn bar r.D.size)
  else
    match Atomic.get fn_owner with
    | Some id when id <> d.D.id -> Some (Printf.sprintf "blindset: %s is held by another open device" fn)
    | Some _ -> None
    | None -> if Atomic.compare_and_set fn_owner None (Some d.D.id) then None else Some (Printf.sprintf "blindset: %s is held by another open device" fn)

let bus_dma ?(refusal = dma_refusal) (d : D.t) (r : D.region) ~fn =
  match refusal d r ~fn with
  | Some why -> Error why
  | None -> (
      match window_of r with
      | Some w -> Ok (Bus w.base)
      | None ->
          r.D.pinned <- true;
          let w = { base = new_base r.D.size; len = r.D.size; region = r; fn } in
          add_window w;
          Ok (Bus w.base))

let find_window ~fn (Bus a) n =
  match
    Stack.find
      (fun w -> w.fn = fn && Int64.compare a w.base >= 0 && Int64.compare (Int64.add a (Int64.of_int n)) (Int64.add w.base (Int64.of_int w.len)) <= 0)
      windows
  with
  | Some w -> (w, Int64.to_int (Int64.sub a w.base))
  | None -> invalid_arg (Printf.sprintf "blindset bus: no dma of %s reaches 0x%Lx+%d" fn a n)

let live_read (r : D.region) off n =
  let b = Bytes.create n in
  if not (c_access r.D.owner.D.c r.D.h off b 0 n false) then invalid_arg "blindset bus: the region is gone";
  Bytes.to_string b

let live_write (r : D.region) off s =
  if not (c_access r.D.owner.D.c r.D.h off (Bytes.of_string s) 0 (String.length s) true) then
    invalid_arg "blindset bus: the region is gone"

let bus_agent =
  {
    read = (fun ~fn a n -> let w, off = find_window ~fn a n in live_read w.region off n);
    write = (fun ~fn a s -> let w, off = find_window ~fn a (String.length s) in live_write w.region off s);
  }

let bus_kit = { kit with bus_function = Some bus_fn; bus_agent = Some bus_agent }
