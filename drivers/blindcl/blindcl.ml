(* blindcl: cl-* drivers ("cl": C locks, and what Driver.locate, Driver.peer
   and Driver.signaled may do in their C code: LOCK-5, LOCK-6), written from
   spec/rig_edge_driver.txt and clauses.tsv, harness/edge/*.mli and
   include/rig_edge.h only, on the design of drivers/hostmem.  Each driver
   is hostmem's device (a copy of its C stubs, blindcl_stubs.c, prefix cl_,
   with a per-device mode fixed at open, enum cl_mode) and hostmem's OCaml
   driver (copied below, in the functor Make) with ONE twist, in C.  Kits are
   hostmem's (copied: images in hostmem's format).  Every driver has its own
   key and two devices, "<name>0" and "<name>1".
   drivers/blindcl/check/cl_check.exe loads the plugin and runs each driver
   a little; it judges nothing.

   TABLE  (the words quoted are the document's)

   | driver                | what it does (C)                              | clause     | the sentence it breaks / that allows it                        | why it breaks nothing else |
   |-----------------------|-----------------------------------------------|------------|----------------------------------------------------------------|----------------------------|
   | cl-locate-mutex       | cl_locate reads the region's size from the    | LOCK-5     | "Driver.locate, Driver.peer and Driver.signaled check nothing   | same answer as hostmem (the table's size is the region's); mu is   |
   |                       | object table under the device's pthread mutex |            | and must take no lock"                                          | held only by C code doing bounded work (cond waits release it),   |
   |                       |                                               |            |                                                                 | never while OCaml runs: no wait on an event, no self-deadlock     |
   | cl-locate-spinlock    | alloc/free mirror sizes into a side table     | LOCK-5     | "... must take no lock" (a spin lock is a lock)                  | the spinlock guards one store or load; its only other takers are  |
   |                       | under a pthread_spin_lock; locate reads it    |            |                                                                 | alloc/free/map/entry under mu                                     |
   |                       | under that spinlock                           |            |                                                                 |                                                                   |
   | cl-locate-slowpath    | locate probes a lock-free cache, takes mu on  | LOCK-5     | "... must take no lock": the "rare" slow path runs on every     | as cl-locate-mutex; the answer is the same on both paths          |
   |                       | a miss; the cache fills only for objects with |            | call, since nothing sets OBJ_CACHEABLE                           |                                                                   |
   |                       | OBJ_CACHEABLE, which nothing sets             |            |                                                                 |                                                                   |
   | cl-peer-trylock       | peer reads both devices' fabric from the      | LOCK-5     | "... must take no lock" (a try is a take)                        | never waits; when the try fails it answers the fabric's default,  |
   |                       | global registry (filled at make) under        |            |                                                                 | true, as do the entries: MEM-4 holds, also once lost (entries go  |
   |                       | pthread_mutex_trylock                         |            |                                                                 | only when the device itself dies)                                 |
   | cl-peer-c11-mtx       | the same with a C11 registry and mtx_lock     | LOCK-5     | "... must take no lock"                                          | the mtx is held by make and the device's release for a scan of a  |
   |                       |                                               |            |                                                                 | fixed table; answer always true (MEM-4)                           |
   | cl-signaled-rwlock    | the word's stores take a pthread rwlock for   | LOCK-5     | "... must take no lock, since rig calls signaled while it holds | writers hold it for one release store, in C; the value and its    |
   |                       | writing; signaled reads under rdlock          |            | a lock of its own"                                              | acquire order unchanged (TIME-1); sleep reads the word without it |
   | cl-signaled-barrier   | signaled locks and unlocks mu, nothing        | LOCK-5     | "... must take no lock" (a take given back at once is a take)   | as cl-locate-mutex; then hostmem's acquire load                   |
   |                       | between ("a full barrier"), then loads        |            |                                                                 |                                                                   |
   | cl-ok-atomics         | alloc/free/map/entry (under mu, as hostmem)   | conforming | "must take no lock" / "call nothing that may block or fault":  | locate: one acquire load, generation-checked, else the OCaml size |
   |                       | mirror (gen, size) into a fixed array of C11  |            | an atomic load takes nothing and waits for nothing               | (same number); peer: the fabric stored at open ("what d and d'    |
   |                       | atomics; locate and peer read atomics only    |            |                                                                 | learned when they opened")                                        |
   | cl-ok-seqlock         | the same mirror, and the fabric, under a      | conforming | "must take no lock": a seqlock reader takes nothing; nobody     | readers retry at most 64 times then fall back to the size the     |
   |                       | seqlock (writers under mu); locate and peer   |            | waits on it, and it gives nothing back                           | OCaml region records: bounded, never waits on a stalled writer    |
   |                       | are retrying readers                          |            |                                                                 |                                                                   |
   | cl-ok-helper-locks    | a helper pthread takes mu, a spinlock and an  | conforming | "Driver.locate ... must take no lock": the locks are the        | helper starts under rig_mask (SIG-8), runs no OCaml, writes no    |
   |                       | rwlock every 0.5 ms for the device's life,    |            | helper's, on its own thread; locate is hostmem's OCaml          | word, leaves at stop (STOP-5/6) or when the device is collected   |
   |                       | also while rig calls locate                   |            |                                                                 |                                                                   |
   | cl-ok-finaliser-mutex | make registers the device in a global         | conforming | "A function that takes no lock may be called from a callback at | finaliser shielded (SIG-7); the mutexes are held in C only, so a  |
   |                       | registry; free and the device's OCaml         |            | any point": the finaliser may run at locate's allocation, but   | finaliser run at any allocation cannot meet its own lock; make    |
   |                       | finaliser (Gc.finalise) take its pthread      |            | the lock is the finaliser's, not locate's                       | checks rig_holds and masks as hostmem (LOCK-4, SIG-6)             |
   |                       | mutex (and mu)                                |            |                                                                 |                                                                   |
   | cl-ok-snapshot        | make takes the registry mutex to publish an   | conforming | "must take no lock" and peer's "from what d and d' learned when | old tables are kept until the device dies (no reclamation race);  |
   |                       | immutable fabric snapshot; alloc/free publish |            | they opened": the snapshot is exactly that, read lock-free      | a size not mirrored falls back to the OCaml size                  |
   |                       | into a growable table swapped by atomic       |            |                                                                 |                                                                   |
   |                       | pointer; locate and peer read them            |            |                                                                 |                                                                   |
   | cl-ok-locate-ring     | locate writes its handle into a wait-free     | conforming | "must take no lock": fetch_add and a store are no lock; nothing | the ring only feeds a count commit keeps (under mu); locate's     |
   |                       | telemetry ring (fetch_add on the head);       |            | waits, nothing is released                                       | answer is hostmem's                                               |
   |                       | commit drains it under mu                     |            |                                                                 |                                                                   |
   | cl-ok-signaled-fence  | signaled: relaxed load + acquire fence        | conforming | "the value in d's word, read with acquire order": a fence gives | no lock, no allocation, same value                                |
   |                       |                                               |            | the load acquire order                                           |                                                                   |

   AMBIGUITIES MET, AND HOW I READ THEM

   1. "Take no lock" and C locks: LOCK-3 makes a driver count only the locks
      it holds while OCaml code runs (or a stub runs pending signal
      handlers); none of the C locks here is counted.  I read LOCK-5 as
      covering every lock, counted or not: its reasons (rig's own lock held
      around signaled, locate and peer "at any time") hold for any lock.
   2. A try-lock, and a take given back with nothing between, are takes:
      LOCK-5 broken, although neither can deadlock with the locks here.
   3. LOCK-6 ("call nothing that may block") and TIME-1 ("must not block")
      against a lock: I read "block" as waiting on an event (I/O, a
      condition, a sleep, a peer's progress).  Every lock here is held only
      across bounded C work by threads that never wait while holding it, so
      the seven broken drivers break LOCK-5 only.  Had the document meant
      every take that can spin or park, LOCK-6/TIME-1 would flag them too.
   4. A seqlock reader is no lock (it takes nothing, nobody waits on it);
      its retry loop is bounded, so a writer stalled mid-write cannot make
      it wait: it falls back to the size the OCaml region records.
   5. Locks taken by other threads while locate runs (the helper) and by a
      finaliser that the GC runs at one of locate's allocations are not
      locate's: hostmem's own locate allocates, so any finaliser (a custom
      block's free(), malloc's arena lock) may already run inside it.
   6. Atomic read-modify-writes (the ring's fetch_add) are no lock.
   7. peer's "what d and d' learned when they opened": a registry or a
      snapshot filled at make is such knowledge; a registry miss or a failed
      try answers the fabric's default, so the answer never depends on
      timing.
   8. One twist per driver: the conforming mirrors add stores to alloc and
      free (under the mutex hostmem already takes there), and the
      finaliser driver's free adds a registry counter; nothing that rig
      observes changes.
*)
open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev

external c_open : int -> int -> cdev = "cl_open"
external c_ptr : cdev -> nativeint = "cl_dev_ptr"
external c_fns : unit -> nativeint = "cl_fns"
external c_alloc : cdev -> bool -> int -> int = "cl_alloc"
external c_map : cdev -> nativeint -> int -> int = "cl_map"
external c_map_peer : cdev -> cdev -> int -> int = "cl_map_peer"
external c_free : cdev -> int -> bool = "cl_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "cl_access_byte" "cl_access"

external c_entry : cdev -> int -> int -> int = "cl_entry"
external c_grow : cdev -> int = "cl_grow"
external c_signaled : cdev -> int = "cl_signaled" [@@noalloc]
external c_word : cdev -> int = "cl_word" [@@noalloc]
external c_locate : cdev -> int -> int -> int = "cl_locate" [@@noalloc]
external c_peer : cdev -> cdev -> bool = "cl_peer" [@@noalloc]
external c_retire : cdev -> unit = "cl_retire"
external c_wait : cdev -> int -> int -> unit = "cl_wait"
external c_fault : cdev -> string option = "cl_fault"
external c_stop : cdev -> bool -> unit = "cl_stop"

(* ---------------------------------------------------------- constants *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------- images (hostmem's) *)

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
                | None, _ -> Error (Printf.sprintf "blindcl: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindcl: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindcl: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindcl: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindcl: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindcl: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------ kit (hostmem's) *)

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
  Rig_edge.kit_more ~refused_launch:(binary ^ "refuse refuse 0\n", "refuse") ~scratch_functions ()

(* ------------------------------------------------------------- driver *)

(* A driver's twist: the C mode its devices open with (enum cl_mode of
   blindcl_stubs.c), whether locate and peer go through C (cl_locate,
   cl_peer), and whether the device has an OCaml finaliser (cl_retire). *)
module type CONF = sig
  val name : string
  val mode : int
  val c_locate : bool
  val c_peer : bool
  val finaliser : bool
end

let next_id = Atomic.make 0

module Make (C : CONF) : Package = struct
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

    let key = C.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindcl: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindcl: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindcl: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindcl: write of a freed region")

    (* hostmem's locate, the size asked of the C side where the twist is
       there (cl_locate: the same number, found its mode's way). *)
    let locate _ r =
      let size = if C.c_locate then c_locate r.owner.c r.h r.size else r.size in
      { handle = Int64.of_int r.h; size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    (* Every device maps every other's memory; where the twist is in C,
       cl_peer finds it out its mode's way (always true). *)
    let peer d d' = if C.c_peer then c_peer d.c d'.c else true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindcl: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindcl: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindcl: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindcl: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindcl: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create (C.name ^ ".image"); entries = Hashtbl.create 8 }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindcl: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* hostmem's entry: the slot is made before the scratch is charged and
       filled in place after. *)
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

    let prepare _ _ = ()

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          Hashtbl.iter (fun _ h -> if h <> 0 then ignore (c_free i.dev.c h)) i.entries;
          Hashtbl.reset i.entries)

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n

    (* The word with acquire order; the C side carries the twist, if any. *)
    let signaled d = c_signaled d.c

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_word d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> c_wait d.c seen still_ms);
        check_fault d
      end

    let stop d ~fault:_ = c_stop d.c true
  end

  let name = C.name

  (* The finaliser of CL_OK_FINALISER: cl_retire takes the registry's and
     the device's C mutexes, shielded as finalisers are (SIG-7). *)
  let retire (d : D.t) = Prim.shield (fun () -> c_retire d.c)

  let make oname () =
    Prim.check_unheld (C.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity C.mode in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let d = { D.c; id = Atomic.fetch_and_add next_id 1; name = oname; queue; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        if C.finaliser then Gc.finalise retire d;
        d)

  let openers () =
    Prim.check_unheld (C.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ C.name ^ "0"; C.name ^ "1" ])

  let kit = kit
end

let driver ?(c_locate = false) ?(c_peer = false) ?(finaliser = false) name mode clause what =
  let module C = struct
    let name = name
    let mode = mode
    let c_locate = c_locate
    let c_peer = c_peer
    let finaliser = finaliser
  end in
  (name, clause, what, (module Make (C) : Package))

(* (name, clause, twist, package), in the order of the table above. *)
let packages =
  [
    driver ~c_locate:true "cl-locate-mutex" 1 "LOCK-5" "locate reads the region table under the device's pthread mutex";
    driver ~c_locate:true "cl-locate-spinlock" 2 "LOCK-5" "locate reads a size mirror under a pthread spinlock";
    driver ~c_locate:true "cl-locate-slowpath" 3 "LOCK-5"
      "locate's cache is never filled: its locked slow path runs every call";
    driver ~c_peer:true "cl-peer-trylock" 4 "LOCK-5" "peer reads the registry under pthread_mutex_trylock";
    driver ~c_peer:true "cl-peer-c11-mtx" 5 "LOCK-5" "peer reads a registry under a C11 mtx_lock";
    driver "cl-signaled-rwlock" 6 "LOCK-5" "signaled reads the word under a pthread rwlock read lock";
    driver "cl-signaled-barrier" 7 "LOCK-5" "signaled locks and unlocks the device mutex as a barrier";
    driver ~c_locate:true ~c_peer:true "cl-ok-atomics" 8 "conforming"
      "locate and peer read C11 atomics mirrored under the mutex";
    driver ~c_locate:true ~c_peer:true "cl-ok-seqlock" 9 "conforming"
      "locate and peer read seqlocked mirrors, bounded retries";
    driver "cl-ok-helper-locks" 10 "conforming" "a helper thread takes mutex, spinlock, rwlock in a loop";
    driver ~finaliser:true "cl-ok-finaliser-mutex" 11 "conforming"
      "make, free and the device's finaliser take a C mutex";
    driver ~c_locate:true ~c_peer:true "cl-ok-snapshot" 12 "conforming"
      "locate and peer read snapshots published by atomic pointer";
    driver ~c_locate:true "cl-ok-locate-ring" 13 "conforming" "locate writes a wait-free telemetry ring";
    driver "cl-ok-signaled-fence" 14 "conforming" "signaled is a relaxed load and an acquire fence";
  ]
