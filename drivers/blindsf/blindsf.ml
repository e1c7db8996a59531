(* blindsf: ten sf-* drivers about STOP-3 for a failed submit.

   Each is hostmem (drivers/hostmem), its OCaml side copied here as a
   functor and its C side copied into blindsf_stubs.c (names hm_ -> sf_),
   with one variant chosen at open.  Every driver registers a refused_launch
   (Rig_edge.kit_more): a function of its kit's binary whose launch its
   submit refuses, which loses the device.

   The sentence involved, for all ten (Stopping, STOP-3):
     "The driver must write the last value given to its submit into the word,
      with release order, also when that submit failed, and only once no work
      of d runs, since rig then frees the memory that work uses.  If no work
      runs when stop is called, the driver writes it before stop returns."

   driver              | what it does                                           | clause broken | the sentence involved
   --------------------+--------------------------------------------------------+---------------+-----------------------------------------
   sf-late-record      | submit records the value only after the parts passed   | STOP-3        | "... also when that submit failed"
                       | its checks, the refused-launch check among them: a      |               |
                       | refused submit leaves the previous value for stop      |               |
   sf-thread-slot      | submit stages the value in the calling thread's slot   | STOP-3        | "... also when that submit failed"
                       | and moves it to the device only when it encodes; stop  |               |
                       | reads the device's, never the threads' slots           |               |
   sf-accepted         | records every value (as hostmem), but stop writes the  | STOP-3        | "the last value given to its submit
                       | last value the queue *accepted* (a good submit's)      |               |  ... also when that submit failed"
   sf-idle-worker      | a failed submit leaves its value to the worker, which  | STOP-3        | "... also when that submit failed";
                       | writes it once the queue drains; the worker only wakes |               | "If no work runs when stop is called,
                       | for committed work, so with none queued it never lands;|               |  the driver writes it before stop
                       | stop writes the last good value                        |               |  returns."
   sf-late-reset       | stop leaves a failed submit's value to the worker,     | STOP-3        | "If no work runs when stop is called,
                       | which "resets the device" (50 ms) and only then writes |               |  the driver writes it before stop
                       | it: it lands, but after stop returned                  |               |  returns."
   sf-needs-history    | a failed submit records its value only if a submit     | STOP-3        | "... also when that submit failed"
                       | succeeded before ("with none, the word's 0 already     |               |  (the first submit of a device)
                       | says nothing ran"): wrong when the first submit fails  |               |
   sf-entry-flag       | refusal decided by a flag in the entry object, set by  | conforming    | "... also when that submit failed"
                       | entry from the image (4th column "refused" on a nop    |               |
                       | function); value recorded first, as hostmem            |               |
   sf-allowlist        | refusal decided by the device's allowlist of function  | conforming    | "... also when that submit failed"
                       | kinds (the refuse kind is not on it); the value is     |               |
                       | recorded as submit leaves, on the good and failed path |               |
   sf-stop-helper      | stop does not write the word itself: with no work      | conforming    | "If no work runs when stop is called,
                       | running it wakes the idle worker, which writes the     |               |  the driver writes it before stop
                       | last value as it leaves, and waits (a wait, Prim.wait) |               |  returns.  Otherwise ... the driver
                       | for that write; with work running it returns at once   |               |  does once that work runs no more."
   sf-alone-only       | refuses a launch of the refuse function only when the  | conforming    | "... also when that submit failed"
                       | launch is the submission's only part (it runs it as a  |               |
                       | nop otherwise); value recorded first, as hostmem       |               |

   Everything else (memory, images, entries, queues, sleep, the rest of
   stop) is hostmem's, unchanged.

   AMBIGUITIES the author met, and how they were read:
   - refused_launch promises that a submit "whose submission launches it"
     fails; sf-alone-only keeps that promise only for a lone launch.
   - "If no work runs when stop is called": committed work not yet started,
     which stop drops, counts as none running.
   - "the driver writes it before stop returns": a thread of the driver's
     may write it, as long as stop waits for that write (sf-stop-helper).
   - a device whose only submit failed: that value is the last one
     (sf-needs-history bets otherwise).
   - "last" with several threads: the latest call, which is the largest
     value. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev

external c_open : int -> int -> cdev = "sf_open"
external c_ptr : cdev -> nativeint = "sf_dev_ptr"
external c_fns : unit -> nativeint = "sf_fns"
external c_alloc : cdev -> bool -> int -> int = "sf_alloc"
external c_map : cdev -> nativeint -> int -> int = "sf_map"
external c_map_peer : cdev -> cdev -> int -> int = "sf_map_peer"
external c_free : cdev -> int -> bool = "sf_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "sf_access_byte" "sf_access"

external c_entry : cdev -> int -> int -> bool -> int = "sf_entry"
external c_grow : cdev -> int = "sf_grow"
external c_signaled : cdev -> int = "sf_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "sf_wait"
external c_fault : cdev -> string option = "sf_fault"
external c_stop : cdev -> bool -> bool = "sf_stop"
external c_stop_wait : cdev -> unit = "sf_stop_wait"

(* ---------------------------------------------------------- variants *)

(* The same order as enum variant in blindsf_stubs.c. *)
type variant =
  | Late_record
  | Thread_slot
  | Accepted
  | Idle_worker
  | Late_reset
  | Needs_history
  | Entry_flag
  | Allowlist
  | Stop_helper
  | Alone

let variant_code = function
  | Late_record -> 0
  | Thread_slot -> 1
  | Accepted -> 2
  | Idle_worker -> 3
  | Late_reset -> 4
  | Needs_history -> 5
  | Entry_flag -> 6
  | Allowlist -> 7
  | Stop_helper -> 8
  | Alone -> 9

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format, with an optional fourth column "refused" (the
   entry object's flag, which only sf-entry-flag's device reads):

     hostmem-image 1
     <function name> <kind> <scratch bytes> [refused]
*)

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

type fn = { kind : kind; scratch : int; flagged : bool }

let parse b =
  match String.split_on_char '\n' b with
  | h :: lines when String.trim h = header ->
      let rec go acc = function
        | [] -> Ok (List.rev acc)
        | l :: rest -> (
            let line name k n flagged =
              match (kind_of_string k, int_of_string_opt n) with
              | None, _ -> Error (Printf.sprintf "blindsf: function %S has unknown kind %S" name k)
              | _, None -> Error (Printf.sprintf "blindsf: function %S has a bad scratch size %S" name n)
              | _, Some n when n < 0 -> Error (Printf.sprintf "blindsf: function %S has a negative scratch size" name)
              | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindsf: function %S appears twice" name)
              | Some kind, Some scratch -> go ((name, { kind; scratch; flagged }) :: acc) rest
            in
            match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
            | [] -> go acc rest
            | [ name; k; n ] -> line name k n false
            | [ name; k; n; "refused" ] -> line name k n true
            | _ -> Error (Printf.sprintf "blindsf: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindsf: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------------- driver *)

module type VARIANT = sig
  val name : string
  val variant : variant
  val binary : string
end

module Make (V : VARIANT) : Package = struct
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
      fns : (string * fn) list;
      lock : Prim.Lock.t;  (* guards entries *)
      entries : (string, int) Hashtbl.t;  (* f -> handle *)
    }

    exception Fault of string

    let key = V.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindsf: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindsf: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindsf: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindsf: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    (* Every device maps every other's memory: all of it is host memory.
       Known at open, whatever happens after (MEM-4). *)
    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindsf: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> () (* the word lives in the device, which lives as long as it is reachable *)
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindsf: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindsf: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindsf: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    (* The whole pages that hold the n bytes (MEM-7). *)
    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindsf: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create (V.name ^ ".image"); entries = Hashtbl.create 8 }

    (* CODE-5: more scratch than the device has in all. *)
    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindsf: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* As hostmem's entry: the table's slot is made before the scratch is
       charged and filled in place after, so that no allocation comes
       between the charge and its record. *)
    let entry i f =
      Prim.Lock.protect i.lock (fun () ->
          match Hashtbl.find_opt i.entries f with
          | Some h when h <> 0 -> Entry (Int64.of_int h)
          | _ -> (
              match List.assoc_opt f i.fns with
              | None -> Absent
              | Some { kind; scratch = n; flagged } ->
                  fits f n;
                  let code = kind_code kind and bytes = round_up n word in
                  Hashtbl.replace i.entries f 0;
                  let h = c_entry i.dev.c code bytes flagged in
                  Hashtbl.replace i.entries f h;
                  if h = 0 then begin
                    Hashtbl.remove i.entries f;
                    No_memory (max n word)
                  end
                  else Entry (Int64.of_int h)))

    (* Doing nothing is a valid prepare (CODE-6, CODE-7). *)
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

    (* c_stop answers true only for sf-stop-helper with no work running: the
       idle worker writes the last value, and stop waits for it, as a wait. *)
    let stop d ~fault:_ = if c_stop d.c true then Prim.wait (fun () -> c_stop_wait d.c)
  end

  let name = V.name
  let next_id = Atomic.make 0

  let make name () =
    Prim.check_unheld (V.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity (variant_code V.variant) in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let d = { D.c; id = Atomic.fetch_and_add next_id 1; name; queue; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let device_names = [ V.name ^ "-0"; V.name ^ "-1" ]

  let openers () =
    Prim.check_unheld (V.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = { Hostmem.kit with binary = V.binary }
end

(* ------------------------------------------------------------ the ten *)

(* hostmem's kit binary: spin, fault, hang, nop, and "refuse refuse 0". *)
let hostmem_binary = Hostmem.kit.binary ^ "refuse refuse 0\n"

(* sf-entry-flag's: no refuse kind; "guarded" is a nop whose entry carries
   the refused flag. *)
let flagged_binary =
  String.concat "\n" [ header; "spin spin 0"; "fault fault 0"; "hang hang 0"; "nop nop 64"; "guarded nop 16 refused"; "" ]

let table =
  [
    ("sf-late-record", Late_record, hostmem_binary, "refuse", Some "STOP-3");
    ("sf-thread-slot", Thread_slot, hostmem_binary, "refuse", Some "STOP-3");
    ("sf-accepted", Accepted, hostmem_binary, "refuse", Some "STOP-3");
    ("sf-idle-worker", Idle_worker, hostmem_binary, "refuse", Some "STOP-3");
    ("sf-late-reset", Late_reset, hostmem_binary, "refuse", Some "STOP-3");
    ("sf-needs-history", Needs_history, hostmem_binary, "refuse", Some "STOP-3");
    ("sf-entry-flag", Entry_flag, flagged_binary, "guarded", None);
    ("sf-allowlist", Allowlist, hostmem_binary, "refuse", None);
    ("sf-stop-helper", Stop_helper, hostmem_binary, "refuse", None);
    ("sf-alone-only", Alone, hostmem_binary, "refuse", None);
  ]

let package (name, variant, binary, _, _) =
  let module P = Make (struct
    let name = name
    let variant = variant
    let binary = binary
  end) in
  (name, (module P : Package))

let drivers = List.map package table

let find name = List.find (fun (n, _, _, _, _) -> n = name) table

let kit_more name =
  let _, _, binary, refused, _ = find name in
  Rig_edge.kit_more ~refused_launch:(binary, refused) ()

let breaks name =
  let _, _, _, _, clause = find name in
  clause
