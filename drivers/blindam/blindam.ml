(* blindam: am-* drivers, each hostmem (drivers/hostmem, its library
   rig_hostmem and its C stubs) wrapped with one twist, about clause SIG-3
   of spec/clauses.tsv -- a wait's blocking step must release the OCaml
   runtime -- in the situations where OTHER THREADS of the program use the
   driver at the same time: another thread inside alloc/free, inside a
   queue's room/submit/commit, inside grow, inside image/entry/prepare,
   inside map_peer/dma, another device of the same driver with work.
   Written from spec/ and the public interface only.

   SIG-3 "inside its waits, each of which calls rig_unblock right before
          its blocking step and rig_block right after it, whether the step
          returns or raises, and whose step releases the OCaml runtime
          while it blocks, as a blocking stub does."

   Every driver is hostmem's behaviour but for its twist: its functions
   call Hostmem.D's (its Fault is Hostmem.D.Fault), its make and openers
   check rig_holds () and block signals through Rig_edge_primitives as
   hostmem's do, it registers hostmem's kit and kit_more, and its key is
   its own name.  Common to all:
   - every counted call (alloc, free, map_peer, map_host, dma, image,
     entry, prepare, grow, sleep, unload) and each call of the queue's
     closures (room, submit, commit: hostmem's C functions, wrapped in the
     record facts gives) is noted, lock-free (fixed arrays of Atomic slots,
     one CAS each, bounded loops: ambiguity 10), in the driver's table
     of calls in flight and of the last 64 calls ended, with its thread, device, start and the thread's count of calls of
     that function; room's and commit's answers also note, per device, the
     threads with a submission between a RIG_ROOM and its commit, the
     threads whose room answered RIG_GROW and has not yet answered
     RIG_ROOM, and the thread of the last commit.  locate, peer, facts,
     signaled and stop note nothing (LOCK-5, LOCK-6, TIME-1);
   - sleep is hostmem's (Prim.wait around hm_wait, which releases the
     runtime), or, in a broken driver under its condition, "held_sleep":
     hostmem's fault check, then ONE Prim.wait whose step naps in C
     WITHOUT releasing the runtime (am_nap_held, 200 us at a time,
     reading the word in between) -- or, am-held-other-dev-busy, spins in
     OCaml -- until the word moves, or for at most min(still_ms, 50) ms (a
     timer of the driver's own: "It may return earlier"), then the fault
     check again.  So the sleep still returns at once on a moved word
     (TIME-3), within still_ms (TIME-4), raises Fault once faulted
     (TIME-5, hostmem's fault stays recorded), calls rig_unblock and
     rig_block around its step (SIG-2, through Prim.wait: SIG-9);
   - no driver holds a lock across a wait; the only counted lock (am-
     counted-lock) is Prim.Lock.protect's (LOCK-3, ASYNC-2), never nested
     with hostmem's image lock (LOCK-8).

   driver                 | what it does                                   | clause     | the sentence it breaks, or that allows it
   -----------------------+------------------------------------------------+------------+-------------------------------------------
   am-held-alloc-inflight | sleep's step naps holding the runtime while    | BREAKS     | "whose step releases the OCaml runtime
                          | ANOTHER thread's alloc or free (any device of  | SIG-3      | while it blocks, as a blocking stub does"
                          | the driver) is in flight                       |            |
   am-held-submitting-    | same, while another thread has a submission in | BREAKS     | same sentence
   same-dev               | progress on the SAME device: its room answered | SIG-3      |
                          | RIG_ROOM and it has not committed yet          |            |
   am-held-recent-queue   | same, while another thread's room, submit or   | BREAKS     | same sentence
                          | commit (any device) is in flight or ended less | SIG-3      |
                          | than 300 ms ago                                |            |
   am-held-grow-pending   | same, while another thread is inside grow of   | BREAKS     | same sentence
                          | the same device, or its room answered RIG_GROW | SIG-3      |
                          | there and has not answered RIG_ROOM since      |            |
   am-held-slow-code      | image waits 20 ms, entry 10 ms (releasing      | BREAKS     | same sentence (its image's and entry's
                          | waits: "the first call may block"); sleep's    | SIG-3      | own waits release the runtime)
                          | step holds the runtime while another thread's  |            |
                          | image/entry/prepare has been in flight > 4 ms  |            |
   am-held-nth-map        | same, while another thread's 2nd or later      | BREAKS     | same sentence
                          | map_peer or dma (counted per thread) is in     | SIG-3      |
                          | flight or ended less than 500 ms ago           |            |
   am-held-other-dev-busy | sleep's step SPINS in OCaml (Domain.cpu_relax, | BREAKS     | same sentence: a spin holds the runtime
                          | reading the word) while another device of the  | SIG-3      | (its poll points yield it to others only
                          | driver has committed work not yet done, last   |            | at the tick, which counts as held)
                          | committed by another thread                    |            |
   am-garbage-calls       | alloc, free, map_peer, grow, room, commit      | conforming | no sentence bounds what a call allocates;
                          | allocate ~80 KB of OCaml memory before and     |            | rig's calls hold no lock (LOCK-1); sleep
                          | after hostmem's call (a list of strings, a     |            | is hostmem's; submit is left alone
                          | major-heap Bytes), so GCs and finalisers run   |            | (ambiguity 9)
                          | inside them                                    |            |
   am-counted-lock        | a driver lock (Prim.Lock.protect, counted from | conforming | "A driver must count each lock it holds
                          | before the take to after the give) held across |            | while OCaml code runs ... (rig_hold)";
                          | alloc's count per device and hostmem's alloc,  |            | "take each lock ... immediately before
                          | in sleep's setup (its statistics), given back  |            | the handler that gives it back ... as
                          | before sleep's wait                            |            | Mutex.protect does"
   am-short-naps          | sleep polls: Prim.wait around a nap of at most | conforming | "whose step releases the OCaml runtime
                          | 1 ms (Unix.sleepf, releases the runtime), word |            | while it blocks": each nap does; "It may
                          | and fault read between naps, up to still_ms    |            | return earlier, on ... a timer"
   am-poll-when-others    | the broken drivers' conditions (any of them):  | conforming | same: the twin of the broken ones, its
                          | sleep polls with releasing 1 ms naps; else     |            | step releases under their conditions
                          | hostmem's wait.  Per-thread counts as above    |            |
   am-yield-everywhere    | Thread.yield before and after every counted    | conforming | no sentence forbids letting the runtime
                          | call but sleep, and around room/submit/commit  |            | go outside a wait; a yield is no wait
                          | (never in locate, peer, signaled)              |            | (no block); sleep is hostmem's
   am-waits-everywhere    | a releasing wait (Prim.wait around a 1 ms      | conforming | "inside its waits, each of which calls
                          | Unix.sleepf) at the start of alloc, map_peer,  |            | rig_unblock ... and whose step releases
                          | map_host, dma, image, entry and grow, before   |            | the OCaml runtime": each does; an
                          | they change anything                           |            | exception it lets through changes nothing

   Ambiguities met:
   1. "A wait's blocking step" is read as the function given to a wait
      (Prim.wait's step, hm_wait's blocking section): everything between
      rig_unblock and rig_block.  A step that naps in C without
      caml_enter_blocking_section, or that spins in OCaml, "blocks" without
      releasing the runtime, even if it also yields it at the tick (OCaml
      5's systhreads give the master lock to a waiting thread at a poll
      point every 50 ms): the yield is not the release "a blocking stub
      does".
   2. The document does not say for how long a step may keep the runtime
      before that is "while it blocks": the broken steps keep it for up to
      50 ms per sleep (a nap of 200 us at a time, never released between
      naps); an OCaml loop between two releasing naps (am-short-naps, the
      word and fault read of am-poll-when-others) keeps it for
      microseconds, read as the wait's bookkeeping, not its blocking step.
   3. SIG-3 is stated without a condition; the broken drivers break it
      only when another thread is doing something, which the document
      names nowhere: a program's other threads are rig's business (rig
      "calls sleep while the driver's submit or commit runs", TIME-6, and
      calls the C functions "from any thread, several at once"), so each
      condition is reachable by rig's own use.  Whether a certifier ever
      reaches it is its business, not the clause's.
   4. "Another thread" is told apart by Thread.id.  A condition on "the
      same device" uses the device the call names (an image's device for
      entry/prepare/unload).  The queue closures are wrapped in OCaml
      around hostmem's C functions (facts.queue is a record of closures
      "so that a validation layer can wrap them like any driver
      function"): room, submit and commit stay hostmem's, with their
      runtime released around the C call (c_queue ~may_block:true).
   5. A wait inside alloc, map_peer, dma, image, entry, grow
      (am-waits-everywhere, am-held-slow-code) is allowed by "inside its
      waits" (a driver may have waits anywhere it blocks); entry's "The
      first call may block" allows it there; grow's and dma's waits are
      read as allowed too, since no sentence says only sleep waits.  free
      gets none: an asynchronous exception that ended a free at its wait
      would leave the region for good ("never again after a free of it
      raised").
   6. Thread.yield inside a counted call (am-yield-everywhere): the
      document forbids blocking only in locate, peer, signaled; a yield is
      no wait (it needs no rig_unblock: signals stay blocked across it).
   7. An asynchronous exception between a call's note and its end leaves
      the note in flight: a broken driver then keeps the runtime in more
      sleeps (SIG-3 only); am-poll-when-others then polls with releasing
      naps (still conforming).
   8. held_sleep returns after at most 50 ms held even if the word has not
      moved: "It may return earlier, on an event of other work or a timer
      of the driver's own, since rig reads the word again".  This bounds
      how long another thread stays without the runtime, so that the
      broken drivers break nothing but SIG-3 (no call of theirs hangs).
      The measure can still exceed 50 ms (and still_ms): the OCaml loop
      around the naps yields the runtime at the tick to a thread that may
      keep it a while, as any wait's return waits for the runtime; read
      as no breach of TIME-4 ("at the latest after still_ms" cannot bound
      the time another thread keeps the runtime).
   9. CODE-2's "so that the driver's submit allocates nothing to launch f"
      is read as device resources (what a launch of f needs); still,
      am-garbage-calls leaves submit alone, so that no reading of it
      that counts OCaml allocations makes that driver break CODE-2.
   10. The tables are lock-free but must also be safe for a call of the
      driver made from a callback at an allocation point inside them
      (LOCK-9, "may be called from a callback at any point"): a first
      version used CAS retry loops over immutable lists whose retries
      allocate, and a nested call at each retry's allocation could make
      the outer CAS fail for ever (the certifier's LOCK-3 probe did
      exactly that: "alloc did not return within 30 s").  They are now
      fixed arrays of Atomic slots, one CAS each, every loop bounded. *)

module Prim = Rig_edge_primitives
module H = Hostmem.D

external nap_held : int -> unit = "am_nap_held" [@@noalloc]
external now_us : unit -> int = "am_now_us" [@@noalloc]

let self () = Thread.id (Thread.self ())

(* ------------------------------------------------- what is in flight *)

type fn =
  | F_alloc
  | F_free
  | F_map_peer
  | F_map_host
  | F_dma
  | F_image
  | F_entry
  | F_prepare
  | F_grow
  | F_room
  | F_submit
  | F_commit
  | F_sleep
  | F_unload

let fn_index = function
  | F_alloc -> 0
  | F_free -> 1
  | F_map_peer -> 2
  | F_map_host -> 3
  | F_dma -> 4
  | F_image -> 5
  | F_entry -> 6
  | F_prepare -> 7
  | F_grow -> 8
  | F_room -> 9
  | F_submit -> 10
  | F_commit -> 11
  | F_sleep -> 12
  | F_unload -> 13

(* One call: its thread, device, function, start (us) and the thread's
   count of calls of that function, this one included. *)
type call = { tid : int; dev : int; fn : fn; t0 : int; nth : int }

(* Slots of thread ids, -1 empty: claimed and cleared with one CAS each,
   nothing allocated between a read and its CAS, every loop bounded, so
   that a call of the driver made from a callback at any point inside
   (LOCK-9) neither waits for nor livelocks the call it interrupts. *)
type tids = int Atomic.t array

let n_tids = 64
let new_tids () : tids = Array.init n_tids (fun _ -> Atomic.make (-1))

let add_tid (a : tids) me =
  if not (Array.exists (fun s -> Atomic.get s = me) a) then begin
    let rec go i =
      if i < n_tids then if not (Atomic.get a.(i) = -1 && Atomic.compare_and_set a.(i) (-1) me) then go (i + 1)
    in
    go 0
  end

let drop_tid (a : tids) me = Array.iter (fun s -> if Atomic.get s = me then ignore (Atomic.compare_and_set s me (-1))) a

(* Another thread's id in the slots. *)
let others_in (a : tids) me =
  Array.exists
    (fun s ->
      let t = Atomic.get s in
      t <> -1 && t <> me)
    a

type dev = {
  h : H.t;
  id : int;
  mutable facts : H.region Rig_edge.facts;  (* set once in make *)
  last_commit_tid : int Atomic.t;  (* -1: none yet *)
  submitting : tids;  (* threads between a RIG_ROOM and their commit *)
  growing : tids;  (* threads whose room answered RIG_GROW, not RIG_ROOM since *)
}

type image = { hi : H.image; idev : dev }

let no_call = { tid = -1; dev = -1; fn = F_sleep; t0 = 0; nth = 0 }
let n_slots = 256
let n_recent = 64

(* A driver's table (one per driver, made by its twist).  Same rules as
   the tids above. *)
type state = {
  inflight : call Atomic.t array;  (* no_call: empty *)
  recent : (call * int) Atomic.t array;  (* a ring: the last calls ended, with their end *)
  recent_next : int Atomic.t;
  counts : int Atomic.t array;  (* (tid mod 1024) * 16 + fn_index -> calls *)
  devs : dev Weak.t;  (* the driver's devices, for am-held-other-dev-busy *)
  next_slot : int Atomic.t;
  next_id : int Atomic.t;
}

let n_devs = 256

let new_state () =
  {
    inflight = Array.init n_slots (fun _ -> Atomic.make no_call);
    recent = Array.init n_recent (fun _ -> Atomic.make (no_call, 0));
    recent_next = Atomic.make 0;
    counts = Array.init (1024 * 16) (fun _ -> Atomic.make 0);
    devs = Weak.create n_devs;
    next_slot = Atomic.make 0;
    next_id = Atomic.make 0;
  }

let bump st me fn = 1 + Atomic.fetch_and_add st.counts.(((me land 1023) * 16) + fn_index fn) 1

(* Notes [c] in flight: the index of its slot, -1 if all are taken. *)
let start st c =
  let rec go i =
    if i >= n_slots then -1
    else if Atomic.get st.inflight.(i) == no_call && Atomic.compare_and_set st.inflight.(i) no_call c then i
    else go (i + 1)
  in
  go 0

let finish st i c =
  if i >= 0 then ignore (Atomic.compare_and_set st.inflight.(i) c no_call);
  let e = (c, now_us ()) in
  Atomic.set st.recent.(Atomic.fetch_and_add st.recent_next 1 land (n_recent - 1)) e

(* Another thread's call in flight that [p] accepts. *)
let others_inflight st p =
  let me = self () in
  Array.exists
    (fun s ->
      let c = Atomic.get s in
      c != no_call && c.tid <> me && p c)
    st.inflight

(* Same, or ended less than [within_us] ago. *)
let others_recent st ~within_us p =
  let me = self () in
  others_inflight st p
  ||
  let now = now_us () in
  Array.exists
    (fun s ->
      let c, t1 = Atomic.get s in
      c != no_call && c.tid <> me && now - t1 <= within_us && p c)
    st.recent

(* ----------------------------------------------------------- sleeps *)

(* hostmem's: Prim.wait around hm_wait, which releases the runtime. *)
let hm_sleep d ~seen ~still_ms = H.sleep d.h ~seen ~still_ms

(* hostmem's fault check alone (still_ms 0: no wait). *)
let check d = H.sleep d.h ~seen:(H.signaled d.h) ~still_ms:0

(* The broken step: naps (or spins) HOLDING the runtime until the word
   moves, for at most min still_ms 50 ms. *)
let held_sleep ?(spin = false) d ~seen ~still_ms =
  check d;
  if H.signaled d.h = seen && still_ms > 0 then begin
    let limit = now_us () + (1000 * min still_ms 50) in
    Prim.wait (fun () ->
        while H.signaled d.h = seen && now_us () < limit do
          if spin then Domain.cpu_relax () else nap_held 200
        done);
    check d
  end

(* The conforming poll: releasing naps of at most 1 ms. *)
let short_naps d ~seen ~still_ms =
  check d;
  if still_ms > 0 then begin
    let limit = now_us () + (1000 * still_ms) in
    let rec go () =
      let left = limit - now_us () in
      if H.signaled d.h = seen && left > 0 then begin
        let s = float_of_int (min 1000 left) /. 1e6 in
        Prim.wait (fun () -> Unix.sleepf s);
        check d;
        go ()
      end
    in
    go ()
  end

(* ------------------------------------------------- the common driver *)

module type TWIST = sig
  val name : string
  val st : state

  (* around each noted call (not sleep's, which is [sleep]) *)
  val around : dev -> fn -> (unit -> 'a) -> 'a
  val sleep : dev -> seen:int -> still_ms:int -> unit
end

let plain _ _ f = f ()

module Make (X : TWIST) : Rig_edge.Package = struct
  let st = X.st

  let noted d fn f =
    let me = self () in
    let c = { tid = me; dev = d.id; fn; t0 = now_us (); nth = bump st me fn } in
    let i = start st c in
    match f () with
    | v ->
        finish st i c;
        v
    | exception e ->
        finish st i c;
        raise e

  let tracked d fn f = noted d fn (fun () -> X.around d fn f)

  let wrap_queue d (q : Rig_edge.queue) : Rig_edge.queue =
    {
      room =
        (fun s ->
          tracked d F_room (fun () ->
              let a = q.room s in
              let me = self () in
              (match a with
              | Rig_edge.Room ->
                  drop_tid d.growing me;
                  add_tid d.submitting me
              | Rig_edge.Grow -> add_tid d.growing me);
              a));
      submit = (fun s ~value -> tracked d F_submit (fun () -> q.submit s ~value));
      commit =
        (fun () ->
          tracked d F_commit (fun () ->
              let r = q.commit () in
              let me = self () in
              Atomic.set d.last_commit_tid me;
              drop_tid d.submitting me;
              r));
    }

  module D = struct
    type t = dev
    type region = H.region
    type nonrec image = image

    exception Fault = H.Fault

    let key = X.name
    let facts d = d.facts
    let locate d r = H.locate d.h r
    let peer d d' = H.peer d.h d'.h
    let alloc d m n = tracked d F_alloc (fun () -> H.alloc d.h m n)
    let free d r = tracked d F_free (fun () -> H.free d.h r)
    let map_peer d d' r = tracked d F_map_peer (fun () -> H.map_peer d.h d'.h r)
    let map_host d p n = tracked d F_map_host (fun () -> H.map_host d.h p n)
    let dma d r ~fn = tracked d F_dma (fun () -> H.dma d.h r ~fn)

    let image d b =
      tracked d F_image (fun () ->
          match H.image d.h b with Ok hi -> Ok { hi; idev = d } | Error e -> Error e)

    let entry i f = tracked i.idev F_entry (fun () -> H.entry i.hi f)
    let prepare i f = tracked i.idev F_prepare (fun () -> H.prepare i.hi f)
    let grow d = tracked d F_grow (fun () -> H.grow d.h)
    let signaled d = H.signaled d.h
    let sleep d ~seen ~still_ms = noted d F_sleep (fun () -> X.sleep d ~seen ~still_ms)
    let stop d ~fault = H.stop d.h ~fault
    let unload i = tracked i.idev F_unload (fun () -> H.unload i.hi)
  end

  let name = X.name

  let make (o : H.t Rig_edge.opener) () =
    Prim.check_unheld (X.name ^ ".make");
    Prim.masked (fun () ->
        let h = o.make () in
        let hf = H.facts h in
        let d =
          {
            h;
            id = Atomic.fetch_and_add st.next_id 1;
            facts = hf;
            last_commit_tid = Atomic.make (-1);
            submitting = new_tids ();
            growing = new_tids ();
          }
        in
        d.facts <- { hf with queue = wrap_queue d hf.queue };
        Weak.set st.devs (Atomic.fetch_and_add st.next_slot 1 mod n_devs) (Some d);
        d)

  let openers () =
    Prim.check_unheld (X.name ^ ".openers");
    Prim.masked (fun () ->
        List.map (fun (o : H.t Rig_edge.opener) -> { Rig_edge.name = o.name; make = make o }) (Hostmem.openers ()))

  let kit = Hostmem.kit
end

(* -------------------------------------------------- the conditions *)

let is_alloc_free c = c.fn = F_alloc || c.fn = F_free
let is_queue c = c.fn = F_room || c.fn = F_submit || c.fn = F_commit
let is_code c = c.fn = F_image || c.fn = F_entry || c.fn = F_prepare
let is_map c = (c.fn = F_map_peer || c.fn = F_dma) && c.nth >= 2

let submitting_same d = others_in d.submitting (self ())

let growing_same st d =
  others_in d.growing (self ()) || others_inflight st (fun c -> c.fn = F_grow && c.dev = d.id)

let slow_code st = others_inflight st (fun c -> is_code c && now_us () - c.t0 > 4000)

let other_dev_busy st d =
  let me = self () in
  let rec look i =
    i < n_devs
    &&
    match Weak.get st.devs i with
    | Some d' when d' != d ->
        let t = Atomic.get d'.last_commit_tid in
        (t <> -1 && t <> me && (not (Hostmem.stopped d'.h)) && Hostmem.busy d'.h) || look (i + 1)
    | _ -> look (i + 1)
  in
  look 0

(* Releasing waits: a nap of [s] seconds, the runtime let go. *)
let wait_s s = Prim.wait (fun () -> Unix.sleepf s)

(* ---------------------------------------------------- the broken seven *)

module Held_alloc_inflight = Make (struct
  let name = "am-held-alloc-inflight"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if others_inflight st is_alloc_free then held_sleep d ~seen ~still_ms else hm_sleep d ~seen ~still_ms
end)

module Held_submitting_same_dev = Make (struct
  let name = "am-held-submitting-same-dev"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if submitting_same d then held_sleep d ~seen ~still_ms else hm_sleep d ~seen ~still_ms
end)

module Held_recent_queue = Make (struct
  let name = "am-held-recent-queue"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if others_recent st ~within_us:300_000 is_queue then held_sleep d ~seen ~still_ms
    else hm_sleep d ~seen ~still_ms
end)

module Held_grow_pending = Make (struct
  let name = "am-held-grow-pending"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if growing_same st d then held_sleep d ~seen ~still_ms else hm_sleep d ~seen ~still_ms
end)

module Held_slow_code = Make (struct
  let name = "am-held-slow-code"
  let st = new_state ()

  (* loading and compiling take time here: releasing waits, before
     anything changes *)
  let around _ fn f =
    (match fn with F_image -> wait_s 0.020 | F_entry -> wait_s 0.010 | _ -> ());
    f ()

  let sleep d ~seen ~still_ms =
    if slow_code st then held_sleep d ~seen ~still_ms else hm_sleep d ~seen ~still_ms
end)

module Held_nth_map = Make (struct
  let name = "am-held-nth-map"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if others_recent st ~within_us:500_000 is_map then held_sleep d ~seen ~still_ms
    else hm_sleep d ~seen ~still_ms
end)

module Held_other_dev_busy = Make (struct
  let name = "am-held-other-dev-busy"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if other_dev_busy st d then held_sleep ~spin:true d ~seen ~still_ms else hm_sleep d ~seen ~still_ms
end)

(* ------------------------------------------------ the conforming six *)

let sink = Atomic.make 0

(* ~80 KB of OCaml memory: a list of short strings (minor heap) and a
   Bytes past the minor heap's limit (major heap). *)
let garbage () =
  let l = List.init 2000 string_of_int in
  let b = Bytes.make 65536 'g' in
  Atomic.set sink (List.length l + Bytes.length b)

module Garbage_calls = Make (struct
  let name = "am-garbage-calls"
  let st = new_state ()

  let around _ fn f =
    match fn with
    | F_alloc | F_free | F_map_peer | F_grow | F_room | F_commit ->
        garbage ();
        let v = f () in
        garbage ();
        v
    | _ -> f ()

  let sleep = hm_sleep
end)

(* Statistics: per device, allocations by size and sleeps, under one
   counted lock. *)
module Counted_lock = Make (struct
  let name = "am-counted-lock"
  let st = new_state ()
  let lk = Prim.Lock.create "am-counted-lock.stats"
  let allocs : (int, int) Hashtbl.t = Hashtbl.create 8
  let sleeps : (int, int) Hashtbl.t = Hashtbl.create 8
  let bump_in t k = Hashtbl.replace t k (1 + Option.value ~default:0 (Hashtbl.find_opt t k))

  (* alloc: the count and hostmem's alloc itself under the lock *)
  let around d fn f =
    match fn with
    | F_alloc ->
        Prim.Lock.protect lk (fun () ->
            bump_in allocs d.id;
            f ())
    | _ -> f ()

  let sleep d ~seen ~still_ms =
    Prim.Lock.protect lk (fun () -> bump_in sleeps d.id);
    hm_sleep d ~seen ~still_ms
end)

module Short_naps = Make (struct
  let name = "am-short-naps"
  let st = new_state ()
  let around = plain
  let sleep = short_naps
end)

module Poll_when_others = Make (struct
  let name = "am-poll-when-others"
  let st = new_state ()
  let around = plain

  let sleep d ~seen ~still_ms =
    if
      others_inflight st is_alloc_free
      || submitting_same d
      || others_recent st ~within_us:300_000 is_queue
      || growing_same st d || slow_code st
      || others_recent st ~within_us:500_000 is_map
      || other_dev_busy st d
    then short_naps d ~seen ~still_ms
    else hm_sleep d ~seen ~still_ms
end)

module Yield_everywhere = Make (struct
  let name = "am-yield-everywhere"
  let st = new_state ()

  let around _ _ f =
    Thread.yield ();
    let v = f () in
    Thread.yield ();
    v

  let sleep = hm_sleep
end)

module Waits_everywhere = Make (struct
  let name = "am-waits-everywhere"
  let st = new_state ()

  let around _ fn f =
    (match fn with
    | F_alloc | F_map_peer | F_map_host | F_dma | F_image | F_entry | F_grow -> wait_s 0.001
    | _ -> ());
    f ()

  let sleep = hm_sleep
end)

(* ------------------------------------------------------------ all *)

let all : (module Rig_edge.Package) list =
  [
    (module Held_alloc_inflight);
    (module Held_submitting_same_dev);
    (module Held_recent_queue);
    (module Held_grow_pending);
    (module Held_slow_code);
    (module Held_nth_map);
    (module Held_other_dev_busy);
    (module Garbage_calls);
    (module Counted_lock);
    (module Short_naps);
    (module Poll_when_others);
    (module Yield_everywhere);
    (module Waits_everywhere);
  ]

let kit_more = Hostmem.kit_more
