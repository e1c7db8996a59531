(* blindfx: fx-* drivers (unusual allocators, where the word lives and how
   signaled reads it, logging in locate/peer/signaled/sleep), written from
   spec/rig_edge_driver.txt (with clauses.tsv and decisions.md),
   harness/edge/*.mli and include/rig_edge.h only, on the design of
   drivers/hostmem.  Each driver is hostmem's device (a copy of its C stubs,
   blindfx_stubs.c, prefix fx_, with the knobs amode, wmode and its extra
   stubs) and hostmem's OCaml driver (copied below as the functor Make) with
   ONE behaviour changed.  Most are UNUSUAL BUT CONFORMING designs a real
   driver author might ship; six are broken look-alikes next to them.  Kits
   are hostmem's own (Hostmem.kit, Hostmem.kit_more): the images are
   hostmem's format.  drivers/blindfx/check/fxcheck.exe shows each broken
   driver's bug and each conforming driver behaving.

   TABLE

   | driver                 | what it does                                                     | clause     | the sentence it breaks / the words that allow it |
   |------------------------|------------------------------------------------------------------|------------|--------------------------------------------------|
   | fx-ok-buddy            | Device memory from a buddy allocator over an arena of the        | conforming | "alloc d m n is n bytes of d's memory m, or None if d has none": the region is n bytes (locate says n), its own; freed blocks coalesce at once, so what free gave back comes back whole |
   |                        | budget's size: 2^k blocks (k >= 6), the budget charged 2^k,      |            |                                                  |
   |                        | coalescing on free                                               |            |                                                  |
   | fx-ok-slab             | Device regions <= 16 KiB are objects of 64 KiB slabs of one      | conforming | same sentence: a None comes only after the cache is given back ("or None if d has none") |
   |                        | power-of-two class; empty slabs stay cached (charged), trimmed   |            |                                                  |
   |                        | before any budget (alloc, grow, entry) answers no                |            |                                                  |
   | fx-ok-shared-budget    | Device and Mapped draw on one budget; free gives each back to it | conforming | "or None if d has none" (Mapped None is allowed: "it allocates Pinned memory where alloc of Mapped returns None", GUAR-6) and "free d r gives back r" |
   | fx-ok-free-queued      | free only queues the block (its handle dies, its bytes stay      | conforming | "free d r gives back r" with "or None if d has none": no call answers None (alloc), Short (grow) or No_memory (entry) while the queue holds bytes |
   |                        | charged); any budget that runs short drains the queue first      |            |                                                  |
   | fx-ok-word-offset      | the word is 8 bytes at offset 2048 of a page of Mapped memory of | conforming | "A word of the driver's own, and what signaled needs to read it, must stay until rig frees the word." with free's "or d's word of the driver's own" |
   |                        | the driver's own; own_word is that page; rig's free of the word  |            |                                                  |
   |                        | gives the page back                                              |            |                                                  |
   | fx-ok-signaled-fence   | signaled reads the word with a volatile 64-bit load, then an     | conforming | "signaled d is the value in d's word, read with acquire order." (a load followed by an acquire fence orders as an acquire load) |
   |                        | explicit acquire fence                                           |            |                                                  |
   | fx-ok-signaled-max     | the worker (a C thread) writes the word with one 64-bit release  | conforming | "the value in d's word, read with acquire order": the word only grows ("Values ... increase per device"), so max(word, an earlier read of it) is the word; the cache is release/acquire itself |
   |                        | store; signaled answers max(word, cache), the cache holding only |            |                                                  |
   |                        | values read from the word                                        |            |                                                  |
   | fx-ok-log-ring         | locate, peer, signaled and sleep log into an in-memory ring (one | conforming | "Driver.locate, Driver.peer and Driver.signaled check nothing and must take no lock" and "they must call nothing that may block or fault": an atomic add and stores |
   |                        | atomic add, relaxed stores; no lock, no allocation, no syscall)  |            |                                                  |
   | fx-ok-log-nonblock     | locate, peer and sleep write a line to stderr with one           | conforming | "must call nothing that may block or fault": a write on a non-blocking description of the driver's own returns at once; SIGPIPE is held back and taken, not delivered |
   |                        | non-blocking write on a description of their own (send with      |            |                                                  |
   |                        | MSG_DONTWAIT for a socket), dropped on EAGAIN                    |            |                                                  |
   | fx-ok-log-thread       | locate, peer and sleep put a line into a slot (one CAS, dropped  | conforming | same sentences: the blocking write is the driver's thread's ("A thread the driver starts blocks them for its life", SIG-8, done), not locate's |
   |                        | when taken); a thread of the driver's writes them to stderr      |            |                                                  |
   | fx-slab-hoard          | fx-ok-slab whose alloc never trims the empty slabs (grow and      | MEM-2      | "alloc d m n is n bytes of d's memory m, or None if d has none." (64 B objects filled and all freed: 1000 B, 4 KiB, 1 MiB, 2 MiB all answer None at once, a fresh device gives them) |
   |                        | entry do): the cache is never released for alloc                 |            |                                                  |
   | fx-free-swapped-kind   | Device and Mapped have budgets of their own; free credits a      | MEM-2      | "alloc d m n is n bytes of d's memory m, or None if d has none." with "free d r gives back r" (Device 64 KiB x63 all freed: x0 at once) |
   |                        | region's bytes to the other kind's budget                        |            |                                                  |
   | fx-signaled-idle       | signaled is computed from the queue state: while the worker runs | TIME-1     | "signaled d is the value in d's word, read with acquire order." (a value committed, not yet run: shown before its Fill, and during its last part) |
   |                        | no part, the value of the last signal committed; else the word   |            |                                                  |
   | fx-word-early          | the worker writes a submission's value into the word as the      | TIME-1     | "signaled d is the value in d's word" with rig_edge.h's "the value the work writes into the word once done" (decisions: "a word written before its work ends ... is judged the same") |
   |                        | last part starts, not once it ran                                |            |                                                  |
   | fx-locate-blocking-log | locate writes a log line to stderr with a blocking write(2)      | LOCK-6     | "rig calls locate and peer at any time, and they must call nothing that may block or fault." (stderr a full pipe: locate never returns) |
   |                        | (Unix.write)                                                     |            |                                                  |
   | fx-peer-table-lock     | peer answers from a table (device -> fabric) that make writes,   | LOCK-5     | "Driver.locate, Driver.peer and Driver.signaled check nothing and must take no lock" (a counted take per call; peer waits while another thread holds the table) |
   |                        | read under the table's lock (Prim.Lock, counted)                 |            |                                                  |

   AMBIGUITIES MET, AND HOW I READ THEM

   1. "n bytes of d's memory m" and rounding (fx-ok-buddy, fx-ok-slab): the
      buddy charges 2^k for n, so at the budget's edge (or on a fresh
      device, 3 MiB of 4 MiB) alloc answers None while n bytes of budget are
      unused.  I read "d's memory" as what the device's allocator can hand
      out, its granules included (a GPU's pages, a buddy's orders): None is
      then "d has none".  decisions.md judges only memory the same allocs got
      before ("fragmentation across other sizes is the driver's"), which the
      buddy gives back whole at once, coalesced.  Conforming.
   2. What a cache may keep (fx-ok-slab vs fx-slab-hoard): bytes free put in
      a cache are still "d's memory"; a None while the cache holds them
      denies memory d has.  So the cache must go back before any None, and
      before grow's Short and entry's No_memory too (QUEUE-3, CODE-3: "if d
      has no memory").  fx-slab-hoard trims for grow and entry only, so that
      its bug is alloc's alone: MEM-2.
   3. "free d r gives back r" has no driver clause of its own (MEM-3 is
      rig's).  I read it as: once free returns, no call may answer short for
      want of r's bytes, not that the bytes must leave the driver's hands at
      once.  So a free that only queues (fx-ok-free-queued) conforms as long
      as every short answer drains the queue first; the region's handle dies
      at free (work that names it faults the device, as hostmem's does).
   4. One budget for Device and Mapped (fx-ok-shared-budget): nothing says
      the kinds are separate.  A Mapped None sends rig to Pinned (GUAR-6);
      what free gives back returns to the one budget.  Conforming.  A free
      that credits the other kind (fx-free-swapped-kind) leaves the kind it
      took from short for good, and overcommits the other: I class it by the
      first call that meets it, alloc (MEM-2); grow and entry, charged to the
      Device budget, run short later too (QUEUE-3, CODE-3), which
      decisions.md's premise rule leaves unjudged.
   5. Where the word may live (fx-ok-word-offset): the document never says
      the word is a region of its own size.  own_word is "a region" and
      rig frees it "last"; I made it the page (locate: its handle, 4096
      bytes, reach None), the word 8 bytes inside it.  The page stays through
      stop ("what signaled needs to read it, must stay until rig frees the
      word") and goes back at rig's free of the word, after which rig reads
      it no more (TIME-2: "until it frees that word").  Conforming.
   6. "read with acquire order" (fx-ok-signaled-fence): I read the order,
      not the C11 spelling.  A volatile aligned 64-bit load is single-copy
      atomic on every 64-bit target, and a load followed by
      atomic_thread_fence(acquire) synchronises with the release store as an
      acquire load does (C11 7.17.4's fence rules take an atomic load; the
      volatile load is the kernel's READ_ONCE + smp_rmb).  Conforming.
   7. max(word, cache) (fx-ok-signaled-max): "the value in d's word" at the
      read, and the word only grows, so the max is the word or a value it
      held later than the read began: both are values of d's word.  The
      acquire order needs care: a value answered from the cache must carry
      the order of the read that put it there, so the cache is written with
      acq_rel CAS and read with acquire (a relaxed cache would answer a
      value without ordering the work's writes).  After stop the word gets
      the last value given to submit, which is the largest: still monotone.
   8. Logging into memory (fx-ok-log-ring): "check nothing and must take no
      lock": an atomic add is no lock; allocation I read as allowed
      (hostmem's locate allocates its place), but the ring allocates none.
      A record overwritten while read is the reader's problem (seq).
   9. A non-blocking write (fx-ok-log-nonblock): "must call nothing that may
      block or fault".  I read "may block" of the call as made, not of the
      system call's name: write(2) on an O_NONBLOCK description returns at
      once, EAGAIN dropped.  fcntl(O_NONBLOCK) on fd 2 would change the
      process's stderr (the description is shared), so the driver opens
      /proc/self/fd/2 anew (a pipe or tty) or uses send(MSG_DONTWAIT |
      MSG_NOSIGNAL) (a socket); a regular file it does not log to (its
      write may wait for the disk: O_NONBLOCK does not apply).  "or fault":
      a pipe with no reader raises SIGPIPE; the driver blocks SIGPIPE on the
      thread for the write and takes the signal it raised (sigtimedwait, no
      wait), restoring the mask before any OCaml code runs (SIG-9 judges
      masks at allocation points).  Descriptions of an older fd 2 stay open
      (closing one another thread writes to could hand its number to a new
      file).  Conforming.
   10. A background logger thread (fx-ok-log-thread): the blocking write is
      the thread's, not locate's; locate's own step is a CAS and a
      snprintf.  The thread is started by make (masked) with rig_mask for
      its life (SIG-8) and runs no OCaml.  Conforming.
   11. Side effects in sleep: sleep is counted and may block, so logging
      there is unconstrained beyond TIME-4's bound; the three log drivers
      log in sleep with the same non-blocking means anyway.
   12. A value from the queue state (fx-signaled-idle): it agrees with the
      word whenever the device is really idle, and differs only while
      committed work waits for the worker (or between two parts).  "is the
      value in d's word" admits no other source: TIME-1.  A word written as
      the last part starts (fx-word-early) is a word read right, written
      wrong; decisions.md judges "a word written before its work ends" as
      TIME-1, the clause rig_edge.h's "once done" meets.  TIME-1.
   13. locate logging with a blocking write (fx-locate-blocking-log): no
      lock is taken (Unix.write takes no channel lock), so LOCK-5 is not it;
      the write "may block" (a full pipe): LOCK-6.
   14. peer under a lock (fx-peer-table-lock): the table is written only by
      make and never cleared, so the answer is "from what d and d' learned
      when they opened" (MEM-4 holds); the take is what breaks "must take no
      lock": LOCK-5 (decisions.md: LOCK-6 keeps "every other raise, block or
      wait"; a lock is LOCK-5's, as a check is).  The lock is a counted
      Prim.Lock, so LOCK-3 and ASYNC-2 hold.
*)
(* ------------------------------------------------------------ the C side *)

open Rig_edge
module Prim = Rig_edge_primitives

type cdev

external c_open : int -> int -> int -> cdev = "fx_open"
external c_ptr : cdev -> nativeint = "fx_dev_ptr"
external c_fns : unit -> nativeint = "fx_fns"
external c_alloc : cdev -> int -> int -> int = "fx_alloc"
external c_map : cdev -> nativeint -> int -> int = "fx_map"
external c_map_peer : cdev -> cdev -> int -> int = "fx_map_peer"
external c_free : cdev -> int -> bool = "fx_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "fx_access_byte" "fx_access"

external c_entry : cdev -> int -> int -> int = "fx_entry"
external c_grow : cdev -> int = "fx_grow"
external c_signaled : cdev -> int = "fx_signaled" [@@noalloc]
external c_signaled_fence : cdev -> int = "fx_signaled_fence" [@@noalloc]
external c_signaled_max : cdev -> int = "fx_signaled_max" [@@noalloc]
external c_signaled_idle : cdev -> int = "fx_signaled_idle" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "fx_wait"
external c_fault : cdev -> string option = "fx_fault"
external c_stop : cdev -> bool -> unit = "fx_stop"
external c_busy : cdev -> bool = "fx_busy"
external c_free_word : cdev -> unit = "fx_free_word"
external c_word_handle : cdev -> int = "fx_word_handle"
external c_used : cdev -> int = "fx_used"
external c_mused : cdev -> int = "fx_mused"
external c_ring_log : int -> int -> unit = "fx_ring_log" [@@noalloc]
external c_ring_count : unit -> int = "fx_ring_count"
external c_nb_setup : unit -> unit = "fx_nb_setup"
external c_nb_log : int -> int -> unit = "fx_nb_log" [@@noalloc]
external c_nb_stats : unit -> int * int = "fx_nb_stats"
external c_bt_start : unit -> unit = "fx_bt_start"
external c_bt_log : int -> int -> unit = "fx_bt_log" [@@noalloc]
external c_bt_stats : unit -> int * int = "fx_bt_stats"

let ring_count = c_ring_count
let nonblock_stats = c_nb_stats
let thread_stats = c_bt_stats

(* ---------------------------------------------------------- constants *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format (Hostmem.kit's binaries), parsed as hostmem does. *)

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
                | None, _ -> Error (Printf.sprintf "blindfx: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindfx: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindfx: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindfx: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindfx: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindfx: not a hostmem image (no %S header)" header)

(* ----------------------------------------------------------- variants *)

type variant =
  | Ok_buddy | Ok_slab | Ok_shared_budget | Ok_free_queued
  | Ok_word_offset | Ok_signaled_fence | Ok_signaled_max
  | Ok_log_ring | Ok_log_nonblock | Ok_log_thread
  | Slab_hoard | Free_swapped_kind | Signaled_idle | Word_early
  | Locate_blocking_log | Peer_table_lock

(* The device's knobs (blindfx_stubs.c: enum amode, enum wmode). *)
let amode = function
  | Ok_buddy -> 1 | Ok_slab -> 2 | Slab_hoard -> 3 | Ok_shared_budget -> 4 | Ok_free_queued -> 5
  | Free_swapped_kind -> 6 | _ -> 0

let wmode = function Ok_word_offset -> 1 | Word_early -> 2 | _ -> 0

(* What the check needs beyond the Package. *)
module type FX = sig
  include Rig_edge.Package

  val variant : variant
  val busy : D.t -> bool
  val used : D.t -> int          (* the Device budget's bytes in use *)
  val mapped_used : D.t -> int   (* the Mapped window's (Free_swapped_kind) *)
  val hold_peer_table : float -> unit  (* Peer_table_lock: holds the table's lock that long *)
end

module Make (V : sig
  val name : string
  val variant : variant
end) : FX = struct
  let variant = V.variant

  (* Peer_table_lock: device id -> fabric, written by make, read by peer. *)
  let peer_lock = Prim.Lock.create (V.name ^ ".peer-table")
  let peer_table : (int, string) Hashtbl.t = Hashtbl.create 8

  (* The log of locate (0), peer (1), signaled (2), sleep (3). *)
  let log what arg =
    match V.variant with
    | Ok_log_ring -> c_ring_log what arg
    | Ok_log_nonblock -> if what <> 2 then c_nb_log what arg
    | Ok_log_thread -> if what <> 2 then c_bt_log what arg
    | _ -> ()

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
          if off < 0 || off + len > r.size then invalid_arg "blindfx: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindfx: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindfx: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindfx: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6); a log line where the
       variant logs. *)
    let locate _ r =
      log 0 r.h;
      (match V.variant with
      | Locate_blocking_log ->
          (* the bug: a blocking write(2) to stderr, in locate itself *)
          let line = Printf.sprintf "blindfx: locate 0x%x (%d bytes)\n" r.h r.size in
          ignore (Unix.write_substring Unix.stderr line 0 (String.length line))
      | _ -> ());
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    (* Every device maps every other's memory: all of it is host memory.
       Known at open (MEM-4). *)
    let peer d d' =
      log 1 d'.id;
      match V.variant with
      | Peer_table_lock ->
          (* the bug: the table is read under its lock *)
          Prim.Lock.protect peer_lock (fun () ->
              match (Hashtbl.find_opt peer_table d.id, Hashtbl.find_opt peer_table d'.id) with
              | Some a, Some b -> String.equal a b
              | _ -> false)
      | _ -> true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindfx: alloc of a non-positive size";
      let h = c_alloc d.c (match m with Device -> 0 | Mapped -> 1 | Pinned -> 2) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> c_free_word r.owner.c (* the page, where the word has one (Ok_word_offset) *)
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindfx: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindfx: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindfx: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindfx: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "blindfx.image"; entries = Hashtbl.create 8 }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindfx: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

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

    (* No lock, no wait (TIME-1, LOCK-5). *)
    let signaled d =
      match V.variant with
      | Ok_signaled_fence -> c_signaled_fence d.c
      | Ok_signaled_max -> c_signaled_max d.c
      | Signaled_idle -> c_signaled_idle d.c
      | Ok_log_ring ->
          let w = c_signaled d.c in
          c_ring_log 2 w;
          w
      | _ -> c_signaled d.c

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      log 3 seen;
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> c_wait d.c seen still_ms);
        check_fault d
      end

    let stop d ~fault:_ = c_stop d.c true
  end

  let name = V.name
  let next_id = Atomic.make 0

  let make name () =
    Prim.check_unheld (V.name ^ ".make");
    Prim.masked (fun () ->
        (match V.variant with Ok_log_nonblock -> c_nb_setup () | Ok_log_thread -> c_bt_start () | _ -> ());
        let c = c_open capacity (amode V.variant) (wmode V.variant) in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let d = { D.c; id = Atomic.fetch_and_add next_id 1; name; queue; word = None } in
        (match V.variant with
        | Ok_word_offset -> d.word <- Some { D.owner = d; h = c_word_handle c; size = page; kind = D.Word }
        | _ -> d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word });
        (match V.variant with
        | Peer_table_lock -> Prim.Lock.protect peer_lock (fun () -> Hashtbl.replace peer_table d.id "host")
        | _ -> ());
        d)

  let openers () =
    Prim.check_unheld (V.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ V.name ^ "-0"; V.name ^ "-1" ])

  let kit = Hostmem.kit
  let busy (d : D.t) = c_busy d.c
  let used (d : D.t) = c_used d.c
  let mapped_used (d : D.t) = c_mused d.c

  let hold_peer_table s =
    Prim.Lock.protect peer_lock (fun () -> Prim.wait (fun () -> Unix.sleepf s))
end

(* ------------------------------------------------------------ the set *)

let all =
  [
    ("fx-ok-buddy", "conforming", Ok_buddy);
    ("fx-ok-slab", "conforming", Ok_slab);
    ("fx-ok-shared-budget", "conforming", Ok_shared_budget);
    ("fx-ok-free-queued", "conforming", Ok_free_queued);
    ("fx-ok-word-offset", "conforming", Ok_word_offset);
    ("fx-ok-signaled-fence", "conforming", Ok_signaled_fence);
    ("fx-ok-signaled-max", "conforming", Ok_signaled_max);
    ("fx-ok-log-ring", "conforming", Ok_log_ring);
    ("fx-ok-log-nonblock", "conforming", Ok_log_nonblock);
    ("fx-ok-log-thread", "conforming", Ok_log_thread);
    ("fx-slab-hoard", "MEM-2", Slab_hoard);
    ("fx-free-swapped-kind", "MEM-2", Free_swapped_kind);
    ("fx-signaled-idle", "TIME-1", Signaled_idle);
    ("fx-word-early", "TIME-1", Word_early);
    ("fx-locate-blocking-log", "LOCK-6", Locate_blocking_log);
    ("fx-peer-table-lock", "LOCK-5", Peer_table_lock);
  ]

let fx : (string * string * (module FX)) list =
  List.map
    (fun (name, clause, variant) ->
      let module M = Make (struct
        let name = name
        let variant = variant
      end) in
      (name, clause, (module M : FX)))
    all

let packages : (string * string * (module Rig_edge.Package)) list =
  List.map (fun (name, clause, (module M : FX)) -> (name, clause, (module M : Rig_edge.Package))) fx
