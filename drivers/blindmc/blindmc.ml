(* blindmc: mc-* drivers, written from spec/rig_edge_driver.txt (with
   clauses.tsv and decisions.md), harness/edge/*.mli and include/rig_edge.h
   only, on the design of drivers/hostmem.  Each driver is hostmem's device
   (a copy of its C stubs, blindmc_stubs.c, prefix mc_) and hostmem's OCaml
   driver (copied below) with ONE behaviour changed.  Kits are hostmem's own
   (Hostmem.kit, Hostmem.kit_more): the images are hostmem's format.

   TABLE

   | driver                    | what it does                                                    | clause     | the sentence it breaks / the words that allow it |
   |---------------------------|-----------------------------------------------------------------|------------|--------------------------------------------------|
   | mc-alloc-granule-down     | alloc sizes a region in 8-byte granules, rounding n DOWN        | MEM-2      | "alloc d m n is n bytes of d's memory m, or None if d has none." (alloc 12 gives 8 bytes; alloc 4 answers None with memory free) |
   | mc-alloc-cache-peek       | host (Mapped/Pinned) allocations reuse freed buffers of a size  | MEM-2      | "alloc d m n is n bytes of d's memory m" (two live regions share the same bytes) |
   |                           | class, but alloc takes the cached one with Queue.peek, not take |            |                                                  |
   | mc-peer-drops-when-lost   | peer answers false once either device was stopped               | MEM-4      | "It must return its result from what d and d' learned when they opened, also once either is lost." |
   | mc-maphost-exact          | map_host maps exactly the n bytes (the rounding to pages lost)  | MEM-7      | "The region must map the whole pages that hold the n bytes, so that work reaches through it each word of the allocation's last bytes" |
   | mc-image-scanf-header     | image reads the header with Scanf: a binary with no header      | CODE-1     | "image d b takes the binary b, or is Error why if d refuses it." (it raises Scanf.Scan_failure instead) |
   |                           | raises Scan_failure instead of answering Error                  |            |                                                  |
   | mc-prepare-sticky-nomem   | prepare compiles at once and caches what it got, No_memory too: | CODE-6     | "It must report nothing, failures included: the next entry i f must wait for what it started and answer as if it made the entry itself." |
   |                           | entry answers the cached No_memory after memory came free       |            |                                                  |
   | mc-grow-rollback          | grow that answers Short gives back the blocks it made           | QUEUE-3    | "It is Short n if d has no memory for n bytes the growth takes. What it made stays for a later room." |
   |                           | (all or nothing)                                                |            |                                                  |
   | mc-signaled-shadow        | signaled answers a shadow of the word that only sleep and stop  | TIME-1     | "signaled d is the value in d's word, read with acquire order." |
   |                           | refresh (the event path), to spare a device read per poll       |            |                                                  |
   | mc-sleep-from-now         | sleep waits for the word to move from what it reads NOW, not    | TIME-3     | "It must return immediately if the word already differs." |
   |                           | from seen ("wait for the next fence")                           |            |                                                  |
   | mc-fault-told-once        | sleep raises Fault for a fault only the first time; later       | TIME-5     | "The driver must record each event it consumes, such as a fault's report, before it consumes it, so that the next call of sleep still raises Fault for it." / "Raises Fault once the device has faulted." |
   |                           | sleeps of the faulted device return quietly                     |            |                                                  |
   | mc-stop-frees-memory      | the stopped device's worker frees the device's memory regions   | STOP-5     | "stop must release nothing rig made. rig frees each region and unloads each image itself, also after stop." |
   | mc-stop-recycles-word     | the word is a slot of a pool; the slot goes back to the pool    | STOP-5     | "A word of the driver's own, and what signaled needs to read it, must stay until rig frees the word." |
   |                           | once the last value is in it; the next open resets it to 0      |            |                                                  |
   | mc-ok-size-classes        | host allocations come from power-of-two size classes (>= 64 B)  | conforming | "alloc d m n is n bytes of d's memory m": nothing says the bytes are fresh, unused before, or exactly n behind the scenes; locate says n |
   |                           | and freed ones are reused (Queue.take); Device memory exact     |            |                                                  |
   | mc-ok-sleep-tick          | sleep waits at most 5 ms (a tick of its own) per call           | conforming | "It may return earlier, on an event of other work or a timer of the driver's own, since rig reads the word again after every return and sleeps again while it is unmoved." |
   | mc-ok-image-checks-scratch| image refuses with Error a binary one of whose functions needs  | conforming | "image d b takes the binary b, or is Error why if d refuses it." and entry's "Raises Invalid_argument ... if f needs more than the device offers, where the driver finds that only here." (this driver finds it earlier) |
   |                           | more scratch than the device has in all                         |            |                                                  |
   | mc-ok-word-pool           | the word is a slot of a pool, given back to the pool only when  | conforming | "A word of the driver's own, and what signaled needs to read it, must stay until rig frees the word." and free's "d's word of the driver's own" |
   |                           | rig frees the word (free of own_word)                           |            |                                                  |

   AMBIGUITIES MET, AND HOW I READ THEM

   1. "alloc d m n is n bytes": at least n, or exactly n?  I read it as a
      region that holds n bytes of its own, usable and not shared with any
      other live region; locate's size says n (mc-ok-size-classes keeps a
      larger class behind it, which nothing forbids).  A region that holds
      fewer than n bytes, or shares them, breaks it.
   2. Whether alloc's bytes are fresh (zeroed) is not said.  I read it as
      unspecified: mc-ok-size-classes hands out reused buffers with their old
      bytes.
   3. "None if d has none": a driver whose budget is spent answers None;
      one that answers None with its memory free (mc-alloc-granule-down,
      alloc 4) breaks it.  Whether a region made in granules smaller than
      asked is a MEM-2 or a later Fault's matter: I class it MEM-2 (root
      cause).
   4. map_host: "maps ... the n bytes" then "must map the whole pages".  I
      read locate's size of the mapping as the whole pages (round_up n page),
      as hostmem does; mapping only n bytes breaks MEM-7.
   5. prepare "must report nothing, failures included" against "a prepare
      that raises must have changed nothing" (CODE-7) and "one other than
      Fault from Driver.prepare ... loses nothing": a raise from prepare is
      tolerated by rig but is a report.  I kept every prepare here from
      raising on the driver's own failures (none of my drivers raise from
      prepare), and read "answer as if it made the entry itself" as: the
      answer entry would give NOW, memory freed since included.
   6. sleep: "must return immediately if the word already differs" and
      "Raises Fault once the device has faulted": which wins when both hold?
      I kept hostmem's order (fault first) and built no driver on that
      corner.
   7. "the next call of sleep still raises Fault for it": I read it as every
      later sleep of the faulted device raises, not only the next one.
   8. "Once the device has faulted": I read "the device" as the one sleep is
      asked of; a Fault raised only once per fault breaks TIME-5.
   9. peer: "from what d and d' learned when they opened": I read "also once
      either is lost" as "the same answer before and after a stop".  A peer
      that changes with the devices' state breaks MEM-4 even though map_peer
      is never asked of a lost device.
   10. STOP-5's "what signaled needs to read it, must stay until rig frees
      the word": the word must keep reading the last value after stop, also
      after a new device of the driver (same name or not) has opened; a
      word given to another device before rig's free of it breaks STOP-5.
      I read rig's free of own_word as the moment the driver may recycle it
      (mc-ok-word-pool).  STOP-6's "since the word then passes to a later
      device" suggests the word does pass on once it shows the last value
      and stop returned; I read that as said of a word rig keeps, and
      STOP-5's "until rig frees the word" as what governs a driver's own.
   11. "stop must release nothing rig made": regions and images are rig's;
      I read memory behind regions (not only the region records) as "what
      rig made", so a teardown that frees region memory breaks STOP-5, and
      rig's later free of such a region then meets nothing live.
   12. signaled "is the value in d's word": a value that lags the word
      (mc-signaled-shadow) I read as not the value in the word, even though
      rig, when it sleeps, sees the word move eventually; it breaks TIME-1
      where rig polls without sleeping (after stop, rig only polls).
   13. QUEUE-3's "What it made stays for a later room": I read "made" as the
      memory the growth took, observable as the device's budget: after
      Short n, n more bytes set free must be enough for the growth.
   14. image "Error why if d refuses it": no reason for a refusal is
      required; I read any Error as allowed, the kit's binary excepted (the
      kit promises devices take it).  entry's "where the driver finds that
      only here" I read as allowing the driver to find it at image.
   15. "rig calls it only at d's close or at an open of its name": whether
      at an open the new device is made before or after the old one's stop
      is not said; my check stops first, then opens (either way, free and
      unload of the old device may come after the new device exists, and
      the old word must keep reading its last value).
   16. "A word of the driver's own": decisions.md lets the word be any
      region the driver names in facts; hostmem's lives inside the device.
      I read "what signaled needs to read it" as everything signaled reads,
      including a pool slot outside the device.
*)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev

external c_open : int -> int -> cdev = "mc_open"
external c_ptr : cdev -> nativeint = "mc_dev_ptr"
external c_fns : unit -> nativeint = "mc_fns"
external c_alloc : cdev -> bool -> int -> int = "mc_alloc"
external c_map : cdev -> nativeint -> int -> int = "mc_map"
external c_map_peer : cdev -> cdev -> int -> int = "mc_map_peer"
external c_free : cdev -> int -> bool = "mc_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "mc_access_byte" "mc_access"

external c_entry : cdev -> int -> int -> int = "mc_entry"
external c_grow : cdev -> int = "mc_grow"
external c_signaled : cdev -> int = "mc_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "mc_wait"
external c_fault : cdev -> string option = "mc_fault"
external c_stop : cdev -> bool -> unit = "mc_stop"
external c_word_release : cdev -> unit = "mc_word_release"

(* ------------------------------------------------------- the behaviours *)

type behaviour =
  | Hostmem  (* hostmem's, unchanged *)
  | Alloc_granule_down
  | Alloc_cache_peek
  | Peer_drops_when_lost
  | Maphost_exact
  | Image_scanf_header
  | Prepare_sticky_nomem
  | Grow_rollback
  | Signaled_shadow
  | Sleep_from_now
  | Fault_told_once
  | Stop_frees_memory
  | Stop_recycles_word
  | Ok_size_classes
  | Ok_sleep_tick
  | Ok_image_checks_scratch
  | Ok_word_pool

(* The device's knobs (MC_* of blindmc_stubs.c). *)
let flags_of = function
  | Grow_rollback -> 1
  | Stop_frees_memory -> 2
  | Ok_word_pool -> 4
  | Stop_recycles_word -> 4 lor 8
  | _ -> 0

(* (driver name, behaviour, clause it breaks or "conforming", one line) *)
let drivers =
  [
    ("mc-alloc-granule-down", Alloc_granule_down, "MEM-2", "alloc rounds n down to 8-byte granules");
    ("mc-alloc-cache-peek", Alloc_cache_peek, "MEM-2", "host buffer cache: alloc peeks, never takes");
    ("mc-peer-drops-when-lost", Peer_drops_when_lost, "MEM-4", "peer false once a device is stopped");
    ("mc-maphost-exact", Maphost_exact, "MEM-7", "map_host maps n bytes, not the whole pages");
    ("mc-image-scanf-header", Image_scanf_header, "CODE-1", "image raises Scan_failure on a headerless binary");
    ("mc-prepare-sticky-nomem", Prepare_sticky_nomem, "CODE-6", "prepare caches a No_memory that entry answers");
    ("mc-grow-rollback", Grow_rollback, "QUEUE-3", "a Short grow gives back what it made");
    ("mc-signaled-shadow", Signaled_shadow, "TIME-1", "signaled answers a shadow only sleep refreshes");
    ("mc-sleep-from-now", Sleep_from_now, "TIME-3", "sleep waits for a move from the word it reads now");
    ("mc-fault-told-once", Fault_told_once, "TIME-5", "sleep raises a fault's Fault only once");
    ("mc-stop-frees-memory", Stop_frees_memory, "STOP-5", "the stopped device frees its regions' memory");
    ("mc-stop-recycles-word", Stop_recycles_word, "STOP-5", "the word's pool slot is recycled at the last value");
    ("mc-ok-size-classes", Ok_size_classes, "conforming", "host allocations from reused size classes");
    ("mc-ok-sleep-tick", Ok_sleep_tick, "conforming", "sleep returns on a 5 ms timer of its own");
    ("mc-ok-image-checks-scratch", Ok_image_checks_scratch, "conforming", "image refuses too-large scratch with Error");
    ("mc-ok-word-pool", Ok_word_pool, "conforming", "word from a pool, recycled at rig's free of it");
  ]

(* ---------------------------------------------------------- constants *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k
let tick_ms = 5

(* ------------------------------------------------------------- images *)

(* hostmem's image format (see hostmem.mli): the header line
   "hostmem-image 1", then "<function> <kind> <scratch bytes>" lines. *)

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

let parse_lines lines =
  let rec go acc = function
    | [] -> Ok (List.rev acc)
    | l :: rest -> (
        match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
        | [] -> go acc rest
        | [ name; k; n ] -> (
            match (kind_of_string k, int_of_string_opt n) with
            | None, _ -> Error (Printf.sprintf "blindmc: function %S has unknown kind %S" name k)
            | _, None -> Error (Printf.sprintf "blindmc: function %S has a bad scratch size %S" name n)
            | _, Some n when n < 0 -> Error (Printf.sprintf "blindmc: function %S has a negative scratch size" name)
            | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindmc: function %S appears twice" name)
            | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
        | _ -> Error (Printf.sprintf "blindmc: bad image line %S" l))
  in
  go [] lines

(* hostmem's parser. *)
let parse b =
  match String.split_on_char '\n' b with
  | h :: lines when String.trim h = header -> parse_lines lines
  | _ -> Error (Printf.sprintf "blindmc: not a hostmem image (no %S header)" header)

(* mc-image-scanf-header: reads the format's version, to refuse later
   versions with a clear reason.  Scanf raises Scan_failure on a first line
   that is not "hostmem-image <n>" at all. *)
let parse_versioned b =
  match String.split_on_char '\n' b with
  | [] -> Error "blindmc: empty image"
  | h :: lines ->
      let v = Scanf.sscanf (String.trim h) "hostmem-image %d%!" (fun v -> v) in
      if v <> 1 then Error (Printf.sprintf "blindmc: hostmem image version %d, this driver reads version 1" v)
      else parse_lines lines

(* A power of two, at least 64 bytes, that holds n. *)
let size_class n =
  let rec go c = if c >= n then c else go (2 * c) in
  go 64

(* ------------------------------------------------------------- driver *)

module Make (B : sig
  val name : string
  val behaviour : behaviour
end) : Rig_edge.Package = struct
  let behaviour = B.behaviour

  module D = struct
    type t = {
      c : cdev;
      id : int;
      name : string;
      queue : queue;
      mutable word : region option;  (* set once at open *)
      lost : bool Atomic.t;  (* stop was called *)
      shadow : int Atomic.t;  (* mc-signaled-shadow: the word as sleep last saw it *)
      fault_told : bool Atomic.t;  (* mc-fault-told-once *)
      cache_lock : Prim.Lock.t;  (* guards cache *)
      cache : (bool * int, region Queue.t) Hashtbl.t;  (* freed host buffers by (Mapped?, class) *)
    }

    and region = { owner : t; h : int; size : int; kind : rkind }

    and rkind =
      | Mem
      | Cached of (bool * int)  (* a host buffer of a size class: its key *)
      | Mapping
      | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;  (* guards entries *)
      entries : (string, int) Hashtbl.t;
          (* f -> handle; 0: a slot an asynchronous exception left empty;
             negative (mc-prepare-sticky-nomem only): No_memory of its opposite *)
    }

    exception Fault of string

    let key = B.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindmc: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindmc: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindmc: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindmc: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    (* Every device maps every other's memory: all of it is host memory. *)
    let peer d d' =
      match behaviour with
      | Peer_drops_when_lost ->
          (* a lost device's memory is gone from the bus: no peer access *)
          (not (Atomic.get d.lost)) && not (Atomic.get d'.lost)
      | _ -> true

    let cached_alloc d m n =
      let cls = size_class n in
      let k = (m = Mapped, cls) in
      Prim.Lock.protect d.cache_lock (fun () ->
          let q =
            match Hashtbl.find_opt d.cache k with
            | Some q -> q
            | None ->
                let q = Queue.create () in
                Hashtbl.replace d.cache k q;
                q
          in
          if not (Queue.is_empty q) then
            let r = if behaviour = Alloc_cache_peek then Queue.peek q else Queue.take q in
            Some { r with size = n }
          else
            let h = c_alloc d.c false cls in
            if h = 0 then None else Some { owner = d; h; size = n; kind = Cached k })

    let alloc d m n =
      if n <= 0 then invalid_arg "blindmc: alloc of a non-positive size";
      match behaviour with
      | Alloc_granule_down ->
          (* the device hands out memory in 8-byte granules *)
          let bytes = n land lnot 7 in
          let h = c_alloc d.c (m = Device) bytes in
          if h = 0 then None else Some { owner = d; h; size = bytes; kind = Mem }
      | (Alloc_cache_peek | Ok_size_classes) when m <> Device -> cached_alloc d m n
      | _ ->
          let h = c_alloc d.c (m = Device) n in
          if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free d r =
      match r.kind with
      | Word -> c_word_release d.c
      | Cached k ->
          Prim.Lock.protect r.owner.cache_lock (fun () ->
              match Hashtbl.find_opt r.owner.cache k with
              | Some q -> Queue.push r q
              | None ->
                  let q = Queue.create () in
                  Queue.push r q;
                  Hashtbl.replace r.owner.cache k q)
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindmc: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindmc: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindmc: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n =
      match behaviour with
      | Maphost_exact -> map d p n
      | _ -> map d p (round_up n page) (* the whole pages that hold the n bytes (MEM-7) *)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindmc: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      let parsed = match behaviour with Image_scanf_header -> parse_versioned b | _ -> parse b in
      match parsed with
      | Error e -> Error e
      | Ok fns -> (
          let too_big = List.filter (fun (_, (_, n)) -> n > capacity) fns in
          match (behaviour, too_big) with
          | Ok_image_checks_scratch, (f, (_, n)) :: _ ->
              Error
                (Printf.sprintf "blindmc: function %S needs %d bytes of scratch, the device has %d in all" f n capacity)
          | _ -> Ok { dev = d; fns; lock = Prim.Lock.create "blindmc.image"; entries = Hashtbl.create 8 })

    (* CODE-5: more scratch than the device has in all. *)
    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindmc: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* hostmem's entry: the table's slot is made before the scratch is
       charged and filled in place after. *)
    let entry i f =
      Prim.Lock.protect i.lock (fun () ->
          match Hashtbl.find_opt i.entries f with
          | Some h when h > 0 -> Entry (Int64.of_int h)
          | Some h when h < 0 -> No_memory (-h) (* what prepare met *)
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

    let prepare i f =
      match behaviour with
      | Prepare_sticky_nomem ->
          (* compile now, while rig does other things, and keep the outcome
             for entry *)
          Prim.Lock.protect i.lock (fun () ->
              match Hashtbl.find_opt i.entries f with
              | Some h when h <> 0 -> ()
              | _ -> (
                  match List.assoc_opt f i.fns with
                  | Some (k, n) when n <= capacity ->
                      let code = kind_code k and bytes = round_up n word in
                      Hashtbl.replace i.entries f 0;
                      let h = c_entry i.dev.c code bytes in
                      Hashtbl.replace i.entries f (if h = 0 then -max n word else h)
                  | _ -> ()))
      | _ -> () (* doing nothing is a valid prepare *)

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          Hashtbl.iter (fun _ h -> if h > 0 then ignore (c_free i.dev.c h)) i.entries;
          Hashtbl.reset i.entries)

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n

    (* No lock, no wait (TIME-1, LOCK-5). *)
    let signaled d =
      match behaviour with
      | Signaled_shadow -> Atomic.get d.shadow (* spare the device a read per poll *)
      | _ -> c_signaled d.c

    let check_fault d =
      match c_fault d.c with
      | Some why -> (
          match behaviour with
          | Fault_told_once ->
              (* one Fault per fault: rig has been told *)
              if not (Atomic.exchange d.fault_told true) then raise (Fault why)
          | _ -> raise (Fault why))
      | None -> ()

    let sleep d ~seen ~still_ms =
      match behaviour with
      | Sleep_from_now ->
          (* wait for the next fence: the word moving from where it is *)
          check_fault d;
          if still_ms > 0 then begin
            let now = c_signaled d.c in
            Prim.wait (fun () -> c_wait d.c now still_ms);
            check_fault d
          end
      | _ ->
          let refresh () = if behaviour = Signaled_shadow then Atomic.set d.shadow (c_signaled d.c) in
          check_fault d;
          refresh ();
          if c_signaled d.c = seen && still_ms > 0 then begin
            let ms = if behaviour = Ok_sleep_tick then min still_ms tick_ms else still_ms in
            Prim.wait (fun () -> c_wait d.c seen ms);
            refresh ();
            check_fault d
          end

    let stop d ~fault:_ =
      Atomic.set d.lost true;
      c_stop d.c true;
      (* stop may write the last value itself: let signaled see it *)
      if behaviour = Signaled_shadow then Atomic.set d.shadow (c_signaled d.c)
  end

  let name = B.name
  let next_id = Atomic.make 0

  let make name () =
    Prim.check_unheld "Blindmc.make";
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
            lost = Atomic.make false;
            shadow = Atomic.make 0;
            fault_told = Atomic.make false;
            cache_lock = Prim.Lock.create "blindmc.cache";
            cache = Hashtbl.create 8;
          }
        in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let device_names = [ B.name ^ "-0"; B.name ^ "-1" ]

  let openers () =
    Prim.check_unheld "Blindmc.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = Hostmem.kit
end

let package name behaviour =
  (module Make (struct
    let name = name
    let behaviour = behaviour
  end) : Rig_edge.Package)

(* (name, clause or "conforming", what it does, the package) *)
let packages = List.map (fun (n, b, clause, what) -> (n, clause, what, package n b)) drivers
let kit_more = Hostmem.kit_more
