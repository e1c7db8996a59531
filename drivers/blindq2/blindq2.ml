(* blindq2: hostmem (drivers/hostmem) with its queue functions changed per
   driver, about QUEUE-2, read with QUEUE-1, QUEUE-3 and the Queues section
   and the C functions of rig_edge.h.  Written from spec/rig_edge_driver.txt,
   the interface (rig_edge.h, Rig_edge, Rig_edge_primitives) and hostmem
   alone, before the certifier ran on any of them.

   How it is built: the change is in the C queue functions, which read the
   device's private state, and Hostmem's public interface hides its device,
   so hostmem is COPIED WHOLE, once: blindq2_stubs.c is hostmem_stubs.c
   (symbols renamed hm_ -> q2_) whose room, submit and grow switch on a
   variant fixed at open, and this file is hostmem.ml's OCaml side, made a
   functor (Make) over the variant and the driver's name.  Only room, grow
   and submit's release of a reservation differ from hostmem's; submit and
   commit are otherwise hostmem's.  q2-copy (variant 0) is the control: the
   copy with hostmem's queues.

   hostmem's queues, for the table: a submission of p parts needs p+1 slots
   (one per part, one for its signal); the device starts with 64 free slots
   (8 blocks of 8); room answers RIG_ROOM and reserves the slots for the
   calling thread when the free unreserved slots plus that thread's earmark
   cover the need, else RIG_GROW; grow makes blocks (Device memory, charged
   to the budget) into the calling thread's earmark until it covers the
   whole need, or answers Short with the bytes of the blocks still missing.

   The sentences quoted (Queues section, and rig_edge.h):
   [Q1] "grow d makes what d's queues need to hold the parts of the
         submission whose room last answered RIG_GROW on the calling thread
         (The C functions). It changes nothing the C functions read: a later
         room puts what it made into the queues."
   [Q2] "Once it has answered Grown, room must not answer RIG_GROW for those
         parts again, whatever other submissions' growths answer."
   [Q3] "It is Short n if d has no memory for n bytes the growth takes. What
         it made stays for a later room."
   [Q5] "rig calls it on the thread whose room answered RIG_GROW, after that
         answer and before that thread calls room again, while the C
         functions may run on other threads for other submissions."
   [Q6] "A driver whose room never answers RIG_GROW is never asked."
   [H]  rig_edge.h: "rig calls them ... from any thread, several at once for
         different submissions"; "room: RIG_ROOM or RIG_GROW for s on the
         calling thread."; "RIG_GROW ... rig calls the driver's grow, then
         room again, on this same thread".

   driver                  what it does                                    expected           sentence
   ----------------------  ----------------------------------------------  -----------------  --------
   q2-exact-missing        grow makes only the slots missing at the        QUEUE-2 fails      [Q2] broken: room counted on the free
                           room that answered RIG_GROW (need - free),      (only it)          slots it saw but held none; another
                           counting on the free slots that room saw but                       thread's room in between takes them
                           holding none of them                                               ([H], [Q5]), and the next room of the
                                                                                              grown thread answers RIG_GROW again.
                                                                                              [Q1]: what it made is not in the queues
                                                                                              till a room adopts it (kept)
   q2-shared-pool          grow puts its blocks in one pool of the device  QUEUE-2 fails      [Q2] broken: another thread's room
                           (and counts what others grew there); the first  (only it)          that does not fit takes the grown
                           room that does not fit in the free slots alone                     blocks first; the grown thread's next
                           takes the whole pool (first come first served)                     room answers RIG_GROW again.  [Q1]
                                                                                              kept: only a later room puts the pool
                                                                                              into the queues
   q2-device-stage         one growth per device, not per thread: grow     QUEUE-2 fails      [Q2] broken: after A's Grown, B's
                           makes it the calling thread's (with what it     (only it)          grow (its own submission, "other
                           already holds); room adopts it only on the                         submissions' growths") retargets the
                           thread that grew last                                              growth; A's next room answers RIG_GROW.
                                                                                              [Q3]: what A made stays in the device
                                                                                              for a later room (B's)
   q2-ok-big-blocks        grow rounds the growth up to 64 slots (8        same as hostmem    [Q1] it makes at least what the parts
                           blocks), best effort; Short only for the slots                     need; the surplus goes into the queues
                           the parts need, with their missing bytes                           at the next room.  [Q2] the earmark is
                                                                                              the thread's.  [Q3] Short n names the
                                                                                              bytes the needed part of the growth takes
   q2-ok-generous-reserve  room holds for the calling thread what it saw   same as hostmem    [Q2] kept: what the RIG_GROW room held
                           free, also when it answers RIG_GROW (grow then                     plus what grow made cover the parts,
                           makes only the rest), and up to twice the need                     and no other thread can take either.
                           when it fits; submit gives back the surplus                        [Q1] the earmark stays out of the queues
   q2-ok-formal-grow       room answers RIG_GROW to each submission new    same as hostmem    [Q5] [H] rig then calls grow and room on
                           to the thread even if it fits, reserving its    (caveat: a clause  the same thread; [Q2] kept: the reserved
                           slots then; grow makes nothing and answers      hostmem has n/a    slots cover the parts, the next room
                           Grown; the next room answers RIG_ROOM (when     for want of a      answers RIG_ROOM.  [Q1] grow has
                           it does not fit: hostmem's path)                growth might        nothing to make.  [Q6] is about rig
                                                                           apply here)
   q2-copy (control)       the copy, variant 0: hostmem's queues           same as hostmem    (checks the copy itself)

   Revisions, written after the first certification of the rows above (the
   rows are left as they were recorded in commit 848ae87):

   - q2-shared-pool: the certifier fails QUEUE-1 ("grow on one thread ...
     changed what room reads: another thread's room ... answered RIG_GROW
     before that grow and Room after it").  My [Q1] "kept" was wrong: the
     shared pool IS something the C functions read (every thread's room),
     so grow changed what they read; the only room [Q1] lets see a growth
     is the grown thread's ("the parts of the submission whose room last
     answered RIG_GROW on the calling thread").  Any pool that another
     thread's room can take from breaks [Q1] too, so the expectation is now
     QUEUE-1 and QUEUE-2 fail.  Its QUEUE-2 pass is a miss: the check
     (check/) shows the grown thread's room answering RIG_GROW again.
   - q2-ok-formal-grow: the certifier fails QUEUE-2 ("room answered
     RIG_GROW again for the same parts").  My expectation was wrong: the
     driver tells a new submission by its struct pointer, and [Q2] is about
     "those parts": nothing in the contract promises the same struct, and
     the check's "reenc" case (the same parts encoded anew) re-grows.  It
     is kept, as written, as a broken driver: QUEUE-2 fails.
   - added, expectation recorded before its certification:

   driver                     what it does                                 expected           sentence
   -------------------------  -------------------------------------------  -----------------  --------
   q2-ok-formal-grow-thread   q2-ok-formal-grow, where "new" means no      same as hostmem    as q2-ok-formal-grow's; [Q2] kept for
                              formal grow was asked on this thread since                      any struct: after a Grown the thread's
                              its last submit (a per-thread flag),                            rooms take hostmem's path until submit
                              whatever struct s is
*)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev

external c_open : int -> int -> cdev = "q2_open"
external c_ptr : cdev -> nativeint = "q2_dev_ptr"
external c_fns : unit -> nativeint = "q2_fns"
external c_alloc : cdev -> bool -> int -> int = "q2_alloc"
external c_map : cdev -> nativeint -> int -> int = "q2_map"
external c_map_peer : cdev -> cdev -> int -> int = "q2_map_peer"
external c_free : cdev -> int -> bool = "q2_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "q2_access_byte" "q2_access"

external c_entry : cdev -> int -> int -> int = "q2_entry"
external c_grow : cdev -> int = "q2_grow"
external c_signaled : cdev -> int = "q2_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "q2_wait"
external c_fault : cdev -> string option = "q2_fault"
external c_stop : cdev -> bool -> unit = "q2_stop"
external c_busy : cdev -> bool = "q2_busy"
external c_stopped : cdev -> bool = "q2_stopped"

(* The driver of one variant: hostmem.ml's OCaml side, whole, with its own
   key and name; its device is blindq2_stubs.c's with V.variant. *)
module Make (V : sig
  val name : string
  val variant : int
end) =
struct
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

    let key = V.name

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

    let stop d ~fault:_ = c_stop d.c true
  end

  (* ------------------------------------------------------------ package *)

  let name = V.name
  let next_id = Atomic.make 0

  let make name () =
    Prim.check_unheld "Hostmem.make";
    Prim.masked (fun () ->
        let c = c_open capacity V.variant in
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

  (* ------------------------------------------------- the library's own *)

  let id (d : D.t) = d.id
  let device_name (d : D.t) = d.name
  let busy (d : D.t) = c_busy d.c
  let stopped (d : D.t) = c_stopped d.c
  let abort (d : D.t) = c_stop d.c false
  let map = D.map
  let compile = D.compile
end

(* ----------------------------------------------------------- packages *)

let package name variant : (module Package) =
  (module Make (struct
    let name = name
    let variant = variant
  end))

let packages =
  [
    package "q2-exact-missing" 1;
    package "q2-shared-pool" 2;
    package "q2-device-stage" 3;
    package "q2-ok-big-blocks" 4;
    package "q2-ok-generous-reserve" 5;
    package "q2-ok-formal-grow" 6;
    package "q2-ok-formal-grow-thread" 7;
    package "q2-copy" 0;
  ]
