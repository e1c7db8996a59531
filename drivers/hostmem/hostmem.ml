(* hostmem: a rig driver whose device is the host.  See hostmem.mli and
   hostmem_stubs.c (the device). *)

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
   milliseconds), fault (makes the device fault), hang (never ends),
   refuse (a submit of its launch fails).  Names
   are non-empty and without blanks; each appears once. *)

type kind = Nop | Spin | Fault_fn | Hang | Refuse

let kind_code = function Nop -> 0 | Spin -> 1 | Fault_fn -> 2 | Hang -> 3 | Refuse -> 4

let kind_of_string = function
  | "nop" -> Some Nop
  | "spin" -> Some Spin
  | "fault" -> Some Fault_fn
  | "hang" -> Some Hang
  | "refuse" -> Some Refuse
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
    mutable word : region option;  (* set once at open *)
  }

  and region = { owner : t; h : int; size : int; kind : rkind }
  and rkind = Mem | Mapping | Word

  type image = {
    dev : t;
    fns : (string * (kind * int)) list;
    lock : Prim.Lock.t;  (* guards entries *)
    entries : (string, int) Hashtbl.t;  (* f -> handle *)
  }

  exception Fault of string

  let key = "hostmem"

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
    if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

  let free _ r =
    match r.kind with
    | Word -> () (* the word lives in the device, which lives as long as it is reachable *)
    | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "hostmem: free of a region that is not live"

  let map_peer d _ r =
    let h = c_map_peer d.c r.owner.c r.h in
    if h = 0 then raise (Fault "hostmem: map_peer of a region that is not live");
    { owner = d; h; size = r.size; kind = Mapping }

  let map d p n =
    let h = c_map d.c p n in
    if h = 0 then raise (Fault "hostmem: no host memory for the mapping");
    { owner = d; h; size = n; kind = Mapping }

  (* The whole pages that hold the n bytes (MEM-7). *)
  let map_host d p n = map d p (round_up n page)

  let dma _ _ ~fn =
    Error (Printf.sprintf "hostmem: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

  let image d b =
    match parse b with
    | Error e -> Error e
    | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "hostmem.image"; entries = Hashtbl.create 8 }

  (* CODE-5: more scratch than the device has in all. *)
  let fits f n =
    if n > capacity then
      invalid_arg (Printf.sprintf "hostmem: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

  (* Makes the entry of f, whatever the image made before: the scratch memory
     its launches use, charged to the device. *)
  let compile i f =
    match List.assoc_opt f i.fns with
    | None -> Absent
    | Some (k, n) ->
        fits f n;
        let h = c_entry i.dev.c (kind_code k) (round_up n word) in
        if h = 0 then No_memory (max n word) else Entry (Int64.of_int h)

  (* The table's slot is made before the scratch is charged and filled in
     place after (Hashtbl.replace of a key it holds allocates nothing): no
     allocation comes between the charge and its record, where an
     asynchronous exception would leave the scratch charged for good.  A
     slot of 0 is one such an exception left empty. *)
  let entry i f =
    Prim.Lock.protect i.lock (fun () ->
        match Hashtbl.find_opt i.entries f with
        | Some h when h <> 0 -> Entry (Int64.of_int h)
        | _ -> (
            match List.assoc_opt f i.fns with
            | None -> Absent
            | Some (k, n) ->
                fits f n;
                let code = kind_code k and bytes = round_up n word in
                Hashtbl.replace i.entries f 0;
                let h = c_entry i.dev.c code bytes in
                Hashtbl.replace i.entries f h;
                if h = 0 then begin
                  Hashtbl.remove i.entries f;
                  No_memory (max n word)
                end
                else Entry (Int64.of_int h)))

  (* Making an entry is quick here: doing nothing is a valid prepare (CODE-6,
     CODE-7); the next entry makes it. *)
  let prepare _ _ = ()

  let unload i =
    Prim.Lock.protect i.lock (fun () ->
        Hashtbl.iter (fun _ h -> if h <> 0 then ignore (c_free i.dev.c h)) i.entries;
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

  let stop d ~fault:_ = c_stop d.c true
end

(* ------------------------------------------------------------ package *)

let name = "hostmem"
let next_id = Atomic.make 0

let make name () =
  Prim.check_unheld "Hostmem.make";
  Prim.masked (fun () ->
      let c = c_open capacity in
      let ptr = c_ptr c in
      let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
      let d = { D.c; id = Atomic.fetch_and_add next_id 1; name; queue; word = None } in
      d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
      d)

let device_names = [ "hostmem0"; "hostmem1" ]

let openers () =
  Prim.check_unheld "Hostmem.openers";
  Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

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

let kit_more =
  let scratch_functions sizes =
    let names = List.mapi (fun k _ -> Printf.sprintf "work%d" k) sizes in
    (String.concat "\n" (header :: List.map2 (Printf.sprintf "%s nop %d") names sizes) ^ "\n", names)
  in
  (* kit.binary stays as it was: packages that parse hostmem's images
     with a parser of their own take it *)
  Rig_edge.kit_more ~refused_launch:(binary ^ "refuse refuse 0\n", "refuse") ~scratch_functions ()

(* ------------------------------------------------- the library's own *)

let id (d : D.t) = d.id
let device_name (d : D.t) = d.name
let busy (d : D.t) = c_busy d.c
let stopped (d : D.t) = c_stopped d.c
let abort (d : D.t) = c_stop d.c false
let map = D.map
let compile = D.compile
