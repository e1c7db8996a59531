(* blindqs: twelve drivers, qs-*, about QUEUE-1, QUEUE-3, TIME-6, STOP-4 and
   STOP-5 of spec/rig_edge_driver.txt, written from spec/ and the edge's
   interfaces alone.  Each is hostmem's device (hostmem_stubs.c, through its
   C primitives and table; hostmem's kit and kit_more) behind a queue layer
   of blindqs_stubs.c, and differs from the others in exactly one twist.

   The layer (common to all twelve): a pool of "units" in front of
   hostmem's queues; a submission of n parts takes n + 1 units from room's
   RIG_ROOM to its commit.  The pool starts with 32 units (hostmem's has 64
   slots, so the layer runs out first); grow makes chunks of 16 units, each
   a 4096-byte region of hostmem's Device memory (charged to the device's
   budget, so that rig's reclamation gives grow room).  As hostmem's grow
   does, grow makes room for the whole submission into an earmark of the
   calling thread's, which that thread's next room puts into the pool; Short
   n says the bytes still missing.  room answers RIG_GROW when either pool
   lacks room; grow grows the layer, then hostmem's (hm_grow).  stop drops
   the layer's staging and reservations, stops hostmem's device (hm_stop:
   drops what is encoded, writes the last value given to submit now or once
   the running part ends) and gives back the layer's chunks.

   driver                  | what it does                                                    | clause      | the document's words it breaks (or that allow it)
   ------------------------+-----------------------------------------------------------------+-------------+---------------------------------------------------
   qs-grow-publishes       | grow puts its new chunks into the shared pool at once and       | QUEUE-1     | "It changes nothing the C functions read: a later
                           | reserves the calling thread's share there; the rest of the      |             | room puts what it made into the queues."
                           | chunks is free for other threads' rooms before the growing      |             |
                           | thread's next room (its own next room still answers RIG_ROOM)   |             |
   qs-short-drops          | a grow that cannot make all it needs gives back every chunk it  | QUEUE-3     | "What it made stays for a later room."
                           | made in that call ("no partial state on failure"), then Short n |             |
   qs-short-orphans        | on Short, the partial growth is moved to a spare list that room | QUEUE-3     | "What it made stays for a later room."
                           | and grow never look at (given back at stop): the next grow      |             |
                           | starts from nothing again                                       |             |
   qs-sleep-holds-lock     | sleep's wait holds the layer's mutex (the one room, submit and  | TIME-6      | "rig may call it while the driver's submit or commit
                           | commit take) for its whole blocking step: submit and commit on  |             | runs."
                           | other threads wait for the sleep, up to still_ms                |             |
   qs-commit-busy-in-sleep | commit fails ("the fence channel is busy") while a sleep is in  | TIME-6      | "rig may call it while the driver's submit or commit
                           | its wait: a commit beside a sleep loses the device              |             | runs."
   qs-stop-flushes-open    | on an idle device, stop commits ("flushes") the calling         | STOP-4      | "The driver must drop the work d encoded that runs
                           | thread's open command buffer instead of dropping it, lets it    |             | only once committed, such as an open command buffer."
                           | drain (at most 100 ms, then stops the device) so that the last  |             |
                           | value is in the word before it returns                          |             |
   qs-stop-frees-rig       | stop also frees the memory rig allocated (alloc's regions that  | STOP-5      | "stop must release nothing rig made. rig frees each
                           | no peer maps: "the device's memory dies with it"): at once on   |             | region and unloads each image itself, also after
                           | an idle device, else from a thread of its own once the word     |             | stop."
                           | shows the last value; rig's later free of them raises, as a     |             |
                           | free of a dead region does in hostmem                           |             |
   qs-fence-gone           | once stopped, signaled unmaps the "fence page" on the first     | STOP-5      | "A word of the driver's own, and what signaled needs
                           | read that shows the last value: later reads raise Fault         |             | to read it, must stay until rig frees the word."
   qs-grow-generous        | grow makes up to twice the units asked (best effort: no Short   | conforming  | "grow d makes what d's queues need to hold the parts
                           | for the extra), kept in the thread's earmark until its next     |             | ..." (nothing bounds it above) and "a later room puts
                           | room                                                            |             | what it made into the queues"
   qs-short-halves         | grow tries one region for all it misses, then halves, down to   | conforming  | "It is Short n if d has no memory for n bytes the
                           | one unit (256 bytes): on Short it keeps the partial growth and  |             | growth takes. What it made stays for a later room."
                           | n is the exact bytes still missing (not a multiple of a chunk)  |             |
   qs-stop-lazy            | stop gives the layer's chunks to a thread of the driver         | conforming  | "stop must release what the driver made to run work,
                           | (Rig_edge_primitives.spawn) that gives them back once the word  |             | such as its queues, and must not wait for that work";
                           | shows the last value (no work runs), 30 ms later: after stop    |             | "Otherwise the queues' releases write it, or the
                           | returned                                                        |             | driver does once that work runs no more."
   qs-sleep-early          | sleep waits in slices of 2 ms and returns, word unmoved, as     | conforming  | "It may return earlier, on an event of other work or
                           | soon as a room, submit or commit ran or runs on the device      |             | a timer of the driver's own, since rig reads the word
                           |                                                                 |             | again after every return and sleeps again while it is
                           |                                                                 |             | unmoved. rig may call it while the driver's submit or
                           |                                                                 |             | commit runs."

   check/qscheck.ml runs, on every driver, one sequence per clause and says
   what it saw; every broken driver shows its own clause only, the
   conforming ones none.  check/qsload.ml loads blindqs.cmxs and lists what
   it registered.

   Everything else is hostmem's, as hostmem does it: make and openers check
   rig_holds and block signals (Prim.check_unheld, Prim.masked); the image
   lock and qs-stop-frees-rig's table lock are Prim.Lock (counted, taken as
   Mutex.protect does); waits are Prim.wait around a step that releases the
   runtime; the threads a driver starts (qs-stop-lazy, qs-stop-frees-rig)
   are Prim.spawn's.  The layer's pthread mutex is held only by C code that
   runs no OCaml code and no signal handler (stubs called from OCaml never
   block on it with the runtime held), so it is not a counted lock; its
   order is before hostmem's.

   Ambiguities (where the document left me unsure, and what I decided):

   1. grow "makes what d's queues need": whether it may make more.  Nothing
      bounds it above; decided yes, if the surplus reaches the queues only
      through the thread's next room (qs-grow-generous), and that the extra
      is best effort (a Short is only for bytes the submission needs).
   2. "changes nothing the C functions read": room itself reads the
      thread's earmark (hostmem's does too).  Decided that state private to
      the growing thread, read only by that thread's next room, is how "a
      later room puts what it made into the queues"; state any other
      thread's room reads (the shared pool, its reservations) is what grow
      must not change.  qs-grow-publishes keeps QUEUE-2 (its claim makes its
      own next room answer RIG_ROOM) so that only QUEUE-1 breaks.
   3. grow makes room for the whole submission, not for what the shared
      pool lacks: free units of the pool may go to other threads before the
      next room, which would break QUEUE-2.  (qs-grow-publishes counts the
      units it claimed, which no other thread can take.)
   4. Short n: n is the bytes still missing when grow answers, not the
      growth's whole size.  For qs-short-drops that n, computed before the
      give-back, is still enough when rig frees exactly n (the memory given
      back is there again); the breach shows in the memory held between the
      Short and the next room (qscheck allocates it).  qs-short-orphans
      shows it in the next grow too.
   5. "What it made stays for a later room": decided it must both stay made
      (charged) and be used by the thread's later room/grow; a growth kept
      but unreachable (qs-short-orphans) breaks it.
   6. TIME-6 says only that rig may call sleep while submit or commit runs.
      Decided that a submit or commit that fails beside a sleep, or waits for
      it (up to still_ms, and again each time rig sleeps again), does not
      allow it.  A sleep waiting for another sleep's hold of the mutex gives
      up at its own still_ms (TIME-4).
   7. The polling waits of the two TIME-6 drivers see a fault only when the
      device was busy as the sleep started (its work ended); otherwise the
      sleep raises Fault after its wait, at the latest after still_ms ("must
      return, or raise Fault, at the latest after still_ms milliseconds").
      No fault can come then: committed work would have made the device
      busy, and no commit gets through beside those sleeps anyway.
   8. STOP-4 against STOP-2 and STOP-3: work that was flushed at stop on an
      idle device would leave the word without the last value when stop
      returns ("If no work runs when stop is called, the driver writes it
      before stop returns"), so qs-stop-flushes-open lets it drain (at most
      100 ms, then hm_stop ends the running part at once).  Decided that this
      is not "waiting for its work" (STOP-2): no committed work runs, and
      with committed work running it drops the open buffer as hostmem does
      and returns at once.  hostmem's commit commits the calling thread's
      buffer only, so the flush reaches the open buffer of the thread that
      calls stop; a buffer of another thread is dropped.
   9. STOP-5 "must release what the driver made to run work ... and must not
      wait for that work": whether the release must be done by the time stop
      returns.  Decided no: a driver thread may do it after, once no work
      runs, as hostmem's worker gives back its queue blocks after its
      running part (qs-stop-lazy).
  10. STOP-5 "release nothing rig made" against MEM-5 and MEM-7: freeing a
      mapping (map_peer, map_host) or a region a peer maps at stop would
      also break those; qs-stop-frees-rig frees only alloc's regions that
      no other device maps, and only when no work runs (at once on an idle
      device, else once the word shows the last value), so that no work
      touches freed memory.  Its free after stop raises Invalid_argument for them
      (as hostmem's free of a dead region); rig "drops their faults" after
      stop, and EXC-1 is about a device that is not lost.
  11. qs-fence-gone against TIME-1 and STOP-6: a signaled that can no
      longer read the word is also not "the value in d's word".  Decided
      that the clause is STOP-5's ("what signaled needs to read it"), and
      that signaled raises Fault (rig drops its faults after stop) rather
      than return another value, which would look like a write to the word
      after stop (STOP-6).  It unmaps only after a read showed the last
      value, so that STOP-3 is seen to hold.
  12. "an event of other work": decided it includes a room, submit or
      commit call on the device, even one whose work has not moved the word
      (qs-sleep-early).
  13. Where the queue layer's units come back (at commit, when the parts are
      in hostmem's queue, rather than when the work ends) the document says
      nothing; it is the layer's own accounting. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------- hostmem's device (its stubs) *)

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

(* ------------------------------------ the queue layer (blindqs_stubs.c) *)

type qdev

external q_open : nativeint -> nativeint -> int -> qdev = "qs_open"
external q_ptr : qdev -> nativeint = "qs_dev_ptr"
external q_fns : unit -> nativeint = "qs_fns"
external q_grow : qdev -> cdev -> int = "qs_grow"
external q_stop : qdev -> unit = "qs_stop"
external q_release : qdev -> cdev -> unit = "qs_release"
external q_open_here : qdev -> int = "qs_open_here"
external q_commit_here : qdev -> bool = "qs_commit_here"
external q_last : qdev -> int = "qs_last" [@@noalloc]
external q_events : qdev -> int = "qs_events" [@@noalloc]
external q_inflight : qdev -> int = "qs_inflight" [@@noalloc]
external q_chunks_live : qdev -> int = "qs_chunks_live" [@@noalloc]
external q_now_ms : unit -> int = "qs_now_ms" [@@noalloc]
external q_avail : qdev -> int = "qs_avail"
external q_wait : qdev -> int -> int -> bool -> bool -> unit = "qs_wait"

(* ----------------------------------------------------------- the twists *)

type twist =
  | Grow_publishes
  | Short_drops
  | Short_orphans
  | Sleep_holds_lock
  | Commit_busy_in_sleep
  | Stop_flushes_open
  | Stop_frees_rig
  | Fence_gone
  | Grow_generous
  | Short_halves
  | Stop_lazy
  | Sleep_early

(* The layer's mode (blindqs_stubs.c) for the twists it implements. *)
let mode_of = function
  | Grow_publishes -> 1
  | Short_drops -> 2
  | Short_orphans -> 3
  | Sleep_holds_lock -> 4
  | Commit_busy_in_sleep -> 5
  | Grow_generous -> 6
  | Short_halves -> 7
  | Stop_flushes_open | Stop_frees_rig | Fence_gone | Stop_lazy | Sleep_early -> 0

let chunk_bytes = 4096
let chunk_units = 16
let initial_units = 32

(* ------------------------------------------------------------- images *)

(* hostmem's image format (hostmem.ml), so that hostmem's kit serves. *)

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
                | None, _ -> Error (Printf.sprintf "blindqs: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindqs: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindqs: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindqs: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindqs: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindqs: not a hostmem image (no %S header)" header)

let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- drivers *)

module type SPEC = sig
  val name : string
  val twist : twist
end

(** A qs-* driver: a Package, and what the check reads of its devices. *)
module type QS = sig
  include Rig_edge.Package

  val twist : twist

  (** Chunks the queue layer made and has not given back. *)
  val chunks_live : D.t -> int

  (** The layer's free units, as a new room of another thread sees them. *)
  val avail : D.t -> int

  (** The last value given to submit. *)
  val last_value : D.t -> int
end

let next_id = Atomic.make 0

module Make (S : SPEC) : QS = struct
  let twist = S.twist

  module D = struct
    type t = {
      c : cdev;
      q : qdev;
      id : int;
      name : string;
      queue : queue;
      mutable word : region option;  (* set once at open *)
      tlock : Prim.Lock.t;  (* guards tracked (qs-stop-frees-rig only) *)
      tracked : (int, region) Hashtbl.t;  (* the regions alloc made, by handle *)
      stopped : bool Atomic.t;
      fence_gone : bool Atomic.t;  (* qs-fence-gone only *)
    }

    and region = { owner : t; h : int; size : int; kind : rkind; mutable exported : bool }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;  (* guards entries *)
      entries : (string, int) Hashtbl.t;  (* f -> handle *)
    }

    exception Fault of string

    let key = S.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindqs: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindqs: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindqs: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindqs: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let tracks = S.twist = Stop_frees_rig

    let alloc d m n =
      if n <= 0 then invalid_arg "blindqs: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None
      else begin
        let r = { owner = d; h; size = n; kind = Mem; exported = false } in
        if tracks then Prim.Lock.protect d.tlock (fun () -> Hashtbl.replace d.tracked h r);
        Some r
      end

    let free _ r =
      match r.kind with
      | Word -> () (* the word lives in hostmem's device, as long as it is reachable *)
      | Mem | Mapping ->
          if tracks && r.kind = Mem then
            Prim.Lock.protect r.owner.tlock (fun () -> Hashtbl.remove r.owner.tracked r.h);
          if not (c_free r.owner.c r.h) then invalid_arg "blindqs: free of a region that is not live"

    let map_peer d _ r =
      r.exported <- true;
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindqs: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping; exported = false }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindqs: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping; exported = false }

    (* The whole pages that hold the n bytes (MEM-7). *)
    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindqs: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "blindqs.image"; entries = Hashtbl.create 8 }

    let fits f n =
      if n > Hostmem.capacity then
        invalid_arg
          (Printf.sprintf "blindqs: %s needs %d bytes of scratch, the device has %d in all" f n Hostmem.capacity)

    (* As hostmem's entry: the slot is made before the scratch is charged and
       filled in place after, so that no allocation comes between the charge
       and its record. *)
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

    (* The layer's growth (twisted per driver in blindqs_stubs.c), then
       hostmem's (nothing when its room answered RIG_ROOM). *)
    let grow d =
      let a = q_grow d.q d.c in
      let b = c_grow d.c in
      if a + b = 0 then Grown else Short (a + b)

    let signaled d =
      match S.twist with
      | Fence_gone when Atomic.get d.stopped ->
          (* the twist: the fence page is unmapped once it has shown the
             last value after stop *)
          if Atomic.get d.fence_gone then raise (Fault "blindqs: the fence page was unmapped after stop");
          let v = c_signaled d.c in
          if v = q_last d.q then Atomic.set d.fence_gone true;
          v
      | _ -> c_signaled d.c

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    (* qs-sleep-early: waits in slices of at most 2 ms and returns early once
       a room, submit or commit ran or runs on the device (an event of other
       work) or the device faulted. *)
    let sleep_early d ~seen ~still_ms =
      let t0 = q_now_ms () and ev0 = q_events d.q in
      let rec go () =
        let left = still_ms - (q_now_ms () - t0) in
        if left > 0 && c_signaled d.c = seen && q_events d.q = ev0 && q_inflight d.q = 0 then begin
          Prim.wait (fun () -> c_wait d.c seen (min left 2));
          check_fault d;
          go ()
        end
      in
      go ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        (match S.twist with
        | Sleep_holds_lock -> Prim.wait (fun () -> q_wait d.q seen still_ms true false)
        | Commit_busy_in_sleep -> Prim.wait (fun () -> q_wait d.q seen still_ms false true)
        | Sleep_early -> sleep_early d ~seen ~still_ms
        | _ -> Prim.wait (fun () -> c_wait d.c seen still_ms));
        check_fault d
      end

    (* Waits (at most ms) until the word shows v. *)
    let wait_word d v ms =
      let t0 = q_now_ms () in
      let rec go () =
        let now = c_signaled d.c in
        let left = ms - (q_now_ms () - t0) in
        if now <> v && left > 0 then begin
          Prim.wait (fun () -> c_wait d.c now (min left 5));
          go ()
        end
      in
      go ()

    (* hostmem's stop: drops what was encoded and not committed, writes the
       last value now or once the running part ends; the layer drops its
       staging and reservations. *)
    let base_stop d =
      q_stop d.q;
      c_stop d.c true;
      Atomic.set d.stopped true

    (* qs-stop-lazy: the layer's chunks are given back by a thread of the
       driver once the word shows the last value (no work runs), and a
       little later. *)
    let reaper d () =
      let last = q_last d.q and t0 = q_now_ms () in
      while c_signaled d.c <> last && q_now_ms () - t0 < 2000 do
        Thread.delay 0.001
      done;
      Thread.delay 0.03;
      q_release d.q d.c

    let stop d ~fault:_ =
      match S.twist with
      | Stop_flushes_open ->
          (* the twist: on an idle device, the calling thread's open command
             buffer is committed ("flushed") instead of dropped, and stop
             lets it drain so that the last value is in the word before it
             returns *)
          let last = q_last d.q in
          let flushed = (not (c_busy d.c)) && q_open_here d.q > 0 && q_commit_here d.q in
          (* the device is stopped also when a signal's exception ends the
             drain's wait *)
          Fun.protect
            ~finally:(fun () ->
              base_stop d;
              q_release d.q d.c)
            (fun () -> if flushed then wait_word d last 100);
          if flushed then wait_word d last 1000
      | Stop_frees_rig ->
          (* the twist: on an idle device, stop also frees the memory rig
             allocated and no other device maps ("the device's memory dies
             with it") *)
          let idle = not (c_busy d.c) in
          base_stop d;
          q_release d.q d.c;
          let free_all () =
            let victims =
              Prim.Lock.protect d.tlock (fun () ->
                  let l = Hashtbl.fold (fun _ r acc -> if r.exported then acc else r :: acc) d.tracked [] in
                  Hashtbl.reset d.tracked;
                  l)
            in
            List.iter (fun r -> ignore (c_free d.c r.h)) victims
          in
          if idle then free_all ()
          else
            (* with work running, a thread of the driver's frees them once
               the word shows the last value (no work uses them any more) *)
            ignore
              (Prim.spawn (fun () ->
                   let last = q_last d.q and t0 = q_now_ms () in
                   while c_signaled d.c <> last && q_now_ms () - t0 < 2000 do
                     Thread.delay 0.001
                   done;
                   free_all ()))
      | Stop_lazy ->
          base_stop d;
          ignore (Prim.spawn (reaper d))
      | _ ->
          base_stop d;
          q_release d.q d.c
  end

  let name = S.name

  let make name () =
    Prim.check_unheld "Blindqs.make";
    Prim.masked (fun () ->
        let c = c_open Hostmem.capacity in
        let q = q_open (c_fns ()) (c_ptr c) (mode_of S.twist) in
        let queue = c_queue ~fns:(q_fns ()) ~dev:(q_ptr q) ~may_block:true in
        let d =
          {
            D.c;
            q;
            id = Atomic.fetch_and_add next_id 1;
            name;
            queue;
            word = None;
            tlock = Prim.Lock.create (S.name ^ ".tracked");
            tracked = Hashtbl.create 16;
            stopped = Atomic.make false;
            fence_gone = Atomic.make false;
          }
        in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word; exported = false };
        d)

  let device_names = [ S.name ^ "-0"; S.name ^ "-1" ]

  let openers () =
    Prim.check_unheld "Blindqs.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = Hostmem.kit
  let chunks_live (d : D.t) = q_chunks_live d.q
  let avail (d : D.t) = q_avail d.q
  let last_value (d : D.t) = q_last d.q
end

let spec name twist = (module struct let name = name let twist = twist end : SPEC)

let drivers : (module QS) list =
  List.map
    (fun (n, t) ->
      let module S = (val spec n t) in
      (module Make (S) : QS))
    [
      ("qs-grow-publishes", Grow_publishes);
      ("qs-short-drops", Short_drops);
      ("qs-short-orphans", Short_orphans);
      ("qs-sleep-holds-lock", Sleep_holds_lock);
      ("qs-commit-busy-in-sleep", Commit_busy_in_sleep);
      ("qs-stop-flushes-open", Stop_flushes_open);
      ("qs-stop-frees-rig", Stop_frees_rig);
      ("qs-fence-gone", Fence_gone);
      ("qs-grow-generous", Grow_generous);
      ("qs-short-halves", Short_halves);
      ("qs-stop-lazy", Stop_lazy);
      ("qs-sleep-early", Sleep_early);
    ]

(* What the plugin registers beyond each kit: hostmem's. *)
let kit_more = Hostmem.kit_more
