(* blindfw: fw-* drivers ("fw": free, the word, and what locate, peer and
   signaled may do), written from spec/rig_edge_driver.txt (with
   clauses.tsv and decisions.md), harness/edge/*.mli and include/rig_edge.h
   only, on the design of drivers/hostmem.  Each driver is hostmem's device
   (a copy of its C stubs, blindfw_stubs.c, prefix fw_, with its FW_ knobs)
   and hostmem's OCaml driver (copied below) with ONE behaviour changed.
   Kits are hostmem's own (Hostmem.kit, Hostmem.kit_more): the images are
   hostmem's format.  drivers/blindfw/check/fwcheck.exe shows each broken
   driver's bug (and none on a control, hostmem's driver) and each
   conforming driver behaving.

   TABLE

   | driver                     | what it does                                                   | clause     | the sentence it breaks / the words that allow it |
   |----------------------------|----------------------------------------------------------------|------------|--------------------------------------------------|
   | fw-free-leaks-mapped       | Mapped memory is carved from the Device budget (a BAR window); | MEM-2      | "alloc d m n is n bytes of d's memory m, or None if d has none." with free's "free d r gives back r" (3 x alloc/free of 1 MiB Mapped, nothing live: alloc Device 1 MiB answers None) |
   |                            | free uncharges Device memory only, so freed Mapped bytes stay  |            |                                                  |
   |                            | charged for good                                               |            |                                                  |
   | fw-free-size-bins          | free keeps charged blocks on per-size free lists that only an  | MEM-2      | "alloc d m n is n bytes of d's memory m, or None if d has none." (64 KiB blocks to None, all freed: alloc 128 KiB answers None) |
   |                            | alloc of exactly that size takes; other sizes answer None      |            |                                                  |
   | fw-free-deferred           | free hands blocks to a reaper thread that gives them back      | MEM-2      | "alloc d m n is n bytes of d's memory m, or None if d has none." with "free d r gives back r" (free returned; alloc right after answers None) |
   |                            | 20 ms later; alloc meanwhile answers None                      |            |                                                  |
   | fw-signaled-completions    | signaled answers the driver's count of completed submissions   | TIME-1     | "signaled d is the value in d's word, read with acquire order." (value 5 done: answers 1; behind wherever values skip) |
   | fw-signaled-last-submitted | signaled answers the last value given to submit                | TIME-1     | "signaled d is the value in d's word, read with acquire order." (ahead of the work: 1 while a 300 ms spin runs and the word reads 0) |
   | fw-signaled-torn           | the device writes the word in two 32-bit halves under a        | TIME-1     | "signaled d is the value in d's word, read with acquire order." (a read mid-write answers a value the word never held whole: it goes back) |
   |                            | seqlock; signaled reads the halves without it                  |            |                                                  |
   | fw-signaled-raises-stopped | signaled raises Fault once the device is stopped               | TIME-1     | "signaled d is the value in d's word" with "rig calls it ... also after stop, until it frees that word" (TIME-2) |
   | fw-signaled-checks-holds   | signaled starts with check_unheld, as the public functions do  | LOCK-5     | "Driver.locate, Driver.peer and Driver.signaled check nothing and must take no lock, since rig calls signaled while it holds a lock of its own" |
   | fw-locate-validates-locked | locate checks the region is live in the device's table, under  | LOCK-5     | "Driver.locate, Driver.peer and Driver.signaled check nothing and must take no lock" (it blocks for as long as another thread holds that mutex) |
   |                            | the device's mutex, and raises Invalid_argument if not         |            |                                                  |
   | fw-peer-trylock            | peer reads the device registry (what opens record) under its   | LOCK-5     | "... must take no lock" (a try-lock is a take; its symptom: false while an open holds the registry) |
   |                            | mutex taken with a try, and answers false when it is busy      |            |                                                  |
   | fw-locate-logs             | locate writes a log line to stderr and flushes it              | LOCK-6     | "rig calls locate and peer at any time, and they must call nothing that may block or fault." (stderr a full pipe: locate blocks) |
   | fw-ok-pool-classes         | charged allocations <= 64 KiB come from power-of-two classes   | conforming | "alloc d m n is n bytes of d's memory m, or None if d has none": locate says n, the bytes are the region's own, and nothing is cached while alloc says None |
   |                            | (>= 256 B); freed blocks cached per class and reused; the      |            |                                                  |
   |                            | cache is trimmed before alloc (or grow, entry) says no memory  |            |                                                  |
   | fw-ok-free-deferred-drain  | free hands blocks to the reaper as fw-free-deferred, but alloc | conforming | "free d r gives back r" / "or None if d has none": a None comes only once what free handed over is back; alloc is counted and may wait (Prim.wait) |
   |                            | waits for the reaper (a wait) before it answers None           |            |                                                  |
   | fw-ok-word-mapping         | the word is a page of its own (mmap), unmapped only when rig   | conforming | "A word of the driver's own, and what signaled needs to read it, must stay until rig frees the word." and free's "d's word of the driver's own" |
   |                            | frees the word                                                 |            |                                                  |
   | fw-ok-signaled-cached-ptr  | signaled reads the word (acquire) through its address, cached  | conforming | "signaled d is the value in d's word, read with acquire order." (no lock, no allocation, the word lives as long as the device) |
   |                            | in the driver's record at open                                 |            |                                                  |
   | fw-ok-signaled-seqlock     | the device writes the word in halves under a seqlock; signaled | conforming | "the value in d's word, read with acquire order" and "must not block or call rig": a seqlock read takes no lock and retries only while a write of two stores is under way |
   |                            | retries while a write is under way (fw-signaled-torn's device) |            |                                                  |
   | fw-ok-locate-stats         | locate counts its calls in an Atomic; peer compares the two    | conforming | "must take no lock" (an atomic is none) and peer's "It must return its result from what d and d' learned when they opened, also once either is lost." |
   |                            | devices' fabric, an immutable field set at open                |            |                                                  |

   AMBIGUITIES MET, AND HOW I READ THEM

   1. "free d r gives back r" has no clause of the driver's own in
      clauses.tsv (MEM-3 keeps rig's side of free).  I read it as done when
      free returns: the memory is d's again, so a later alloc must not answer
      None for want of it.  Every memory bug of free shows at alloc, so I
      class the three under MEM-2 ("or None if d has none"): d has that
      memory again, by free's sentence.
   2. Deferred frees (fw-free-deferred): rig "frees r once no work of d that
      uses it can run", so a driver has no fence to wait for; a reaper that
      gives memory back later makes alloc answer None with memory that free
      already gave back.  rig's rounds of reclamation (decisions.md) do not
      wait for a driver's reaper, so nothing promises a later ask succeeds.
      I read it as breaking MEM-2; the same reaper with an alloc that waits
      for it before None (fw-ok-free-deferred-drain) conforms: alloc is
      counted, may block, and waits through Prim.wait (SIG-2, SIG-3).
   3. A pool (fw-ok-pool-classes): "n bytes of d's memory" does not say
      exactly n behind the scenes, nor fresh bytes.  Region size n, its
      own bytes, reuse of freed blocks: conforming.  The rounding charges
      more than n: at the budget's last bytes an alloc of n can answer None
      with fewer than its class but n or more bytes free.  I read "d's
      memory" as what the device's allocator can hand out, its granules
      included (as a GPU's pages), so that None is "d has none"; the pool
      trims its cache before any None.  A cache that is never trimmed for
      another size (fw-free-size-bins) answers None with memory free: MEM-2.
   4. One behaviour, one clause: the charged blocks fw-free-size-bins and
      fw-free-deferred keep are given back to grow and entry when they run
      short (reclaim in blindfw_stubs.c), so that their bug is alloc's
      alone.  fw-free-leaks-mapped's leaked charge is gone for good: once
      the leaks fill the budget, grow and entry run short too (QUEUE-3,
      CODE-3); I class it by the first call that meets it, alloc (MEM-2).
   5. signaled "is the value in d's word": I read it as the word's value at
      the read, not a value the driver keeps beside it, even one that agrees
      with the word when rig's values are 1, 2, 3... (a count of
      completions), and not one that runs ahead of the work (the last value
      submitted).  Both break TIME-1.  A value cached by sleep (blindmc's
      mc-signaled-shadow) is left out here as already covered.
   6. "read with acquire order": a relaxed load is what the sentence forbids,
      but on x86-64 (this machine) a relaxed and an acquire load are the
      same instruction and no test can tell them apart.  I built the
      non-atomic read instead (fw-signaled-torn: two half reads without the
      seqlock), which answers values the word never held whole and shows.
   7. A word written in halves: what is "the value in d's word" while a
      write is half done?  I read it as the last value written whole; a
      seqlock read that retries while a write is under way answers exactly
      that.  "must not block": the reader takes no lock and waits for no
      event; it spins for at most the two stores of the device's write
      (5 us here), which I read as not blocking, as an atomic read of a
      64-bit word on a 32-bit bus is not.  So fw-ok-signaled-seqlock
      conforms.  A writer that could stop between its halves for good (a
      device that dies mid-write) would make the retry a hang: my device
      cannot.
   8. signaled after stop: "After it, rig drops its faults" could be read as
      allowing a Fault from signaled once the device is stopped.  I read it
      as rig tolerating one, not as signaled being excused from answering:
      rig calls signaled after stop because it frees the memory and the word
      only "once the word reads that last value", and a signaled that always
      raises never lets it read it.  fw-signaled-raises-stopped breaks
      TIME-1 (with TIME-2's "also after stop, until it frees that word").
   9. "check nothing": I read it as the rig_holds check above it (and any
      validation of the arguments that can raise): a signaled that checks
      rig_holds raises each time rig calls it under its own lock.  LOCK-5.
      fw-locate-validates-locked breaks the same sentence twice (it checks
      and it takes the device's mutex); the mutex is what shows (locate
      waits on it), so LOCK-5, not LOCK-6, though a lock's take may block.
   10. A try-lock: it never blocks, so LOCK-6 is not it; but it takes a lock
      when it succeeds ("must take no lock"), and when it fails the answer
      depends on the lock, not on "what d and d' learned when they opened"
      (MEM-4).  I class fw-peer-trylock under LOCK-5, its cause; MEM-4 is
      the symptom.
   11. Logging: the write to stderr takes the channel's lock (an io
      library's lock: LOCK-5) and may block while the pipe is full (LOCK-6).
      I class fw-locate-logs under LOCK-6, the one a test can show without
      the driver's help; allocation alone (a log line in memory) I read as
      allowed (hostmem's locate allocates its place).
   12. Atomics and immutable data (fw-ok-locate-stats): an atomic counter is
      no lock, and a field set at open and never written again is "what d
      and d' learned when they opened".  Conforming.
   13. A word in a mapping of its own (fw-ok-word-mapping): "what signaled
      needs to read it, must stay until rig frees the word" - the page
      stays through stop and is unmapped at rig's free of own_word, the
      last free rig makes of it.  A cached pointer to the word
      (fw-ok-signaled-cached-ptr) is fine for the same reason: the word
      lives as long as the device, which the driver's record keeps alive.
*)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev

external c_open : int -> int -> cdev = "fw_open"
external c_ptr : cdev -> nativeint = "fw_dev_ptr"
external c_fns : unit -> nativeint = "fw_fns"
external c_alloc : cdev -> int -> int -> int = "fw_alloc"
external c_map : cdev -> nativeint -> int -> int = "fw_map"
external c_map_peer : cdev -> cdev -> int -> int = "fw_map_peer"
external c_free : cdev -> int -> bool = "fw_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "fw_access_byte" "fw_access"

external c_entry : cdev -> int -> int -> int = "fw_entry"
external c_grow : cdev -> int = "fw_grow"
external c_signaled : cdev -> int = "fw_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "fw_wait"
external c_fault : cdev -> string option = "fw_fault"
external c_stop : cdev -> bool -> unit = "fw_stop"

(* blindfw's *)
external c_word_addr : cdev -> nativeint = "fw_word_addr"
external c_signaled_at : nativeint -> int = "fw_signaled_at" [@@noalloc]
external c_signaled_halves : cdev -> int = "fw_signaled_halves" [@@noalloc]
external c_completions : cdev -> int = "fw_completions" [@@noalloc]
external c_submitted : cdev -> int = "fw_submitted" [@@noalloc]
external c_serial : cdev -> int = "fw_serial" [@@noalloc]
external c_peer_trylock : int -> int -> bool = "fw_peer_trylock" [@@noalloc]
external c_live : cdev -> int -> bool = "fw_live" [@@noalloc]
external c_word_free : cdev -> unit = "fw_word_free"
external c_word_mapped : cdev -> bool = "fw_word_mapped" [@@noalloc]
external c_drain : cdev -> bool = "fw_drain"
external c_used : cdev -> int = "fw_used"
external c_debug_hold_mu : cdev -> int -> unit = "fw_debug_hold_mu"
external c_debug_await_mu : cdev -> unit = "fw_debug_await_mu"
external c_debug_hold_registry : int -> unit = "fw_debug_hold_registry"
external c_debug_await_registry : unit -> unit = "fw_debug_await_registry"

(* ------------------------------------------------------- the behaviours *)

type behaviour =
  | Free_leaks_mapped
  | Free_size_bins
  | Free_deferred
  | Signaled_completions
  | Signaled_last_submitted
  | Signaled_torn
  | Signaled_raises_stopped
  | Signaled_checks_holds
  | Locate_validates_locked
  | Peer_trylock
  | Locate_logs
  | Ok_pool_classes
  | Ok_free_deferred_drain
  | Ok_word_mapping
  | Ok_signaled_cached_ptr
  | Ok_signaled_seqlock
  | Ok_locate_stats
  | Control  (* hostmem's, with Mapped charged to the budget: the check's control, not registered *)

(* The device's knobs (FW_* of blindfw_stubs.c). *)
let flags_of = function
  | Free_leaks_mapped -> 1 lor 2 (* FW_CHARGE_MAPPED | FW_LEAK_MAPPED *)
  | Control -> 1
  | Free_size_bins -> 4
  | Ok_pool_classes -> 8
  | Free_deferred | Ok_free_deferred_drain -> 16
  | Signaled_torn | Ok_signaled_seqlock -> 32
  | Ok_word_mapping -> 64
  | _ -> 0

(* (driver name, behaviour, clause it breaks or "conforming", one line) *)
let drivers =
  [
    ("fw-free-leaks-mapped", Free_leaks_mapped, "MEM-2", "free uncharges Device memory only: freed Mapped bytes stay charged");
    ("fw-free-size-bins", Free_size_bins, "MEM-2", "freed blocks wait on per-size bins only that size takes; alloc says None");
    ("fw-free-deferred", Free_deferred, "MEM-2", "free hands blocks to a reaper that gives them back 20 ms later");
    ("fw-signaled-completions", Signaled_completions, "TIME-1", "signaled answers the driver's count of completed submissions");
    ("fw-signaled-last-submitted", Signaled_last_submitted, "TIME-1", "signaled answers the last value given to submit");
    ("fw-signaled-torn", Signaled_torn, "TIME-1", "signaled reads the word's two 32-bit halves without the seqlock");
    ("fw-signaled-raises-stopped", Signaled_raises_stopped, "TIME-1", "signaled raises Fault once the device is stopped");
    ("fw-signaled-checks-holds", Signaled_checks_holds, "LOCK-5", "signaled starts with check_unheld, as public functions do");
    ("fw-locate-validates-locked", Locate_validates_locked, "LOCK-5", "locate checks the region is live under the device's mutex");
    ("fw-peer-trylock", Peer_trylock, "LOCK-5", "peer try-locks the device registry, answers false when it is busy");
    ("fw-locate-logs", Locate_logs, "LOCK-6", "locate logs each call to stderr (a write that may block)");
    ("fw-ok-pool-classes", Ok_pool_classes, "conforming", "Device memory <= 64 KiB from size classes, freed blocks cached, trimmed before None");
    ("fw-ok-free-deferred-drain", Ok_free_deferred_drain, "conforming", "deferred free, but alloc waits for the reaper before None");
    ("fw-ok-word-mapping", Ok_word_mapping, "conforming", "the word is a page of its own, unmapped when rig frees the word");
    ("fw-ok-signaled-cached-ptr", Ok_signaled_cached_ptr, "conforming", "signaled reads the word through an address cached at open");
    ("fw-ok-signaled-seqlock", Ok_signaled_seqlock, "conforming", "word written in halves under a seqlock; signaled retries");
    ("fw-ok-locate-stats", Ok_locate_stats, "conforming", "locate counts calls in an Atomic; peer compares immutable open-time facts");
  ]

(* ---------------------------------------------------------- constants *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format and parser (see hostmem.mli), unchanged. *)

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
                | None, _ -> Error (Printf.sprintf "blindfw: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindfw: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindfw: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindfw: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindfw: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindfw: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------------- driver *)

(* What the check (drivers/blindfw/check) sees of a driver beyond its
   Package: the device's own word and state, read without the driver's
   functions, and the debug holds of its locks. *)
module type S = sig
  include Rig_edge.Package

  val behaviour : behaviour
  val raw_word : D.t -> int  (* the word itself (the device's read) *)
  val wait_word : D.t -> seen:int -> ms:int -> unit  (* the device's wait, without Prim.wait *)
  val used : D.t -> int  (* Device budget in use, bytes *)
  val word_mapped : D.t -> bool
  val locates : D.t -> int  (* fw-ok-locate-stats' count *)
  val hold_mu : D.t -> ms:int -> unit  (* holds the device's mutex for ms *)
  val await_mu : D.t -> unit  (* until hold_mu holds it *)
end

let hold_registry ~ms = c_debug_hold_registry ms
let await_registry () = c_debug_await_registry ()

module Make (B : sig
  val name : string
  val behaviour : behaviour
end) : S = struct
  let behaviour = B.behaviour

  module D = struct
    type t = {
      c : cdev;
      id : int;
      name : string;
      queue : queue;
      mutable word : region option;  (* set once at open *)
      serial : int;  (* its number in the device registry (fw-peer-trylock) *)
      wptr : nativeint;  (* the word's address (fw-ok-signaled-cached-ptr) *)
      fabric : string;  (* what it learned at open (fw-ok-locate-stats) *)
      stopped : bool Atomic.t;  (* fw-signaled-raises-stopped *)
      locates : int Atomic.t;  (* fw-ok-locate-stats *)
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

    let key = B.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindfw: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindfw: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindfw: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindfw: write of a freed region")

    let locate d r =
      (match behaviour with
      | Locate_validates_locked ->
          (* the bug: the check takes the device's mutex *)
          if r.kind <> Word && not (c_live r.owner.c r.h) then invalid_arg "blindfw: locate of a region that is not live"
      | Locate_logs ->
          (* the bug: a write to stderr, which blocks while the pipe is full *)
          Printf.eprintf "fw-locate-logs: locate of region %d (%d bytes)\n%!" r.h r.size
      | Ok_locate_stats -> Atomic.incr d.locates (* an atomic: no lock *)
      | _ -> ());
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer d d' =
      match behaviour with
      | Peer_trylock -> c_peer_trylock d.serial d'.serial (* the bug: a try-lock *)
      | Ok_locate_stats -> String.equal d.fabric d'.fabric (* immutable, learned at open *)
      | _ -> true

    let mem_code = function Device -> 0 | Mapped -> 1 | Pinned -> 2

    let alloc d m n =
      if n <= 0 then invalid_arg "blindfw: alloc of a non-positive size";
      let h = c_alloc d.c (mem_code m) n in
      let h =
        (* fw-ok-free-deferred-drain: before None, wait until the reaper gave
           back what free handed it, and try again *)
        if h = 0 && behaviour = Ok_free_deferred_drain && Prim.wait (fun () -> c_drain d.c) then
          c_alloc d.c (mem_code m) n
        else h
      in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> if behaviour = Ok_word_mapping then c_word_free r.owner.c
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindfw: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindfw: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindfw: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindfw: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "blindfw.image"; entries = Hashtbl.create 8 }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindfw: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* hostmem's entry, unchanged (see hostmem.ml for the slot's order). *)
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

    let signaled d =
      match behaviour with
      | Signaled_completions -> c_completions d.c (* the bug: a count, not the word *)
      | Signaled_last_submitted -> c_submitted d.c (* the bug: ahead of the work *)
      | Signaled_torn -> c_signaled_halves d.c (* the bug: no seqlock *)
      | Signaled_raises_stopped ->
          if Atomic.get d.stopped then raise (Fault "blindfw: signaled of a stopped device") else c_signaled d.c
      | Signaled_checks_holds ->
          Prim.check_unheld "Blindfw.signaled";
          c_signaled d.c
      | Ok_signaled_cached_ptr -> c_signaled_at d.wptr
      | _ -> c_signaled d.c (* the seqlock's read where the word is in halves *)

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> c_wait d.c seen still_ms);
        check_fault d
      end

    let stop d ~fault:_ =
      Atomic.set d.stopped true;
      c_stop d.c true
  end

  let name = B.name
  let next_id = Atomic.make 0

  let make name () =
    Prim.check_unheld "Blindfw.make";
    Prim.masked (fun () ->
        let c = c_open capacity (flags_of behaviour) in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let d =
          {
            D.c;
            id = Atomic.fetch_and_add next_id 1;
            name;
            queue;
            word = None;
            serial = c_serial c;
            wptr = c_word_addr c;
            fabric = B.name ^ "/host";
            stopped = Atomic.make false;
            locates = Atomic.make 0;
          }
        in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let device_names = [ B.name ^ "-0"; B.name ^ "-1" ]

  let openers () =
    Prim.check_unheld "Blindfw.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = Hostmem.kit

  let raw_word (d : D.t) = c_signaled d.c
  let wait_word (d : D.t) ~seen ~ms = c_wait d.c seen ms
  let used (d : D.t) = c_used d.c
  let word_mapped (d : D.t) = c_word_mapped d.c
  let locates (d : D.t) = Atomic.get d.locates
  let hold_mu (d : D.t) ~ms = c_debug_hold_mu d.c ms
  let await_mu (d : D.t) = c_debug_await_mu d.c
end

let module_of name behaviour =
  (module Make (struct
    let name = name
    let behaviour = behaviour
  end) : S)

(* (name, clause or "conforming", what it does, the module) for the check *)
let modules = List.map (fun (n, b, clause, what) -> (n, clause, what, module_of n b)) drivers

(* (name, clause or "conforming", what it does, the package) *)
let packages =
  List.map
    (fun (n, clause, what, m) ->
      let module M = (val m : S) in
      (n, clause, what, (module M : Rig_edge.Package)))
    modules

let kit_more = Hostmem.kit_more

(* The check's control: every scenario that shows a broken driver's bug
   must show none on it. *)
let control = module_of "fw-control" Control
