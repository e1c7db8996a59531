(* blindoc: oc-* drivers, each hostmem (drivers/hostmem, its library
   rig_hostmem and its C stubs) wrapped with exactly one twist, about clause
   SIG-3 of spec/clauses.tsv when several threads use the driver at once:
   a wait's blocking step that keeps the OCaml runtime only while something
   happens on another thread (a memory call, a growth, a sibling device's
   work, a second sleeper, a high submit rate, a queue being fed), and
   conforming drivers that do unusual things around the same situation.
   Written from spec/ and the public interface only.

   SIG-3 "A wait's blocking step releases the OCaml runtime while it
          blocks, as a blocking stub does."  (Drivers section: "... inside
          its waits, each of which calls rig_unblock right before its
          blocking step and rig_block right after it, whether the step
          returns or raises, and whose step releases the OCaml runtime
          while it blocks, as a blocking stub does.")

   Every driver is hostmem's behaviour but for its twist: its functions
   call Hostmem.D's (its Fault is Hostmem.D.Fault), its make and openers
   check rig_holds () and block signals through Rig_edge_primitives as
   hostmem's do, it registers hostmem's kit and kit_more, and its key is
   its own name.  The common wrapper keeps, for the twists to read, lock-
   free counters only (Atomic): memory calls (alloc, free, map_peer,
   map_host) and grow calls in flight in the driver, threads inside sleep
   on each device, and the devices the driver made (a Weak array).  Some
   twists also wrap the device's queue (room/submit/commit, the record of
   closures facts gives) to note, lock-free, submits (a count and the times
   of the last 16) and which threads are feeding a device's queue (room
   answered RIG_ROOM, not yet committed).

   Common to all, so that each breaks nothing but (at most) SIG-3:
   - every sleep first calls hostmem's sleep with still_ms 0 (Fault if the
     device faulted, an immediate return if the word differs: TIME-3,
     TIME-5), waits at most still_ms (TIME-4), returns early once the
     device is stopped or faulted (as hostmem's wait does), and checks the
     fault again after its wait;
   - every wait goes through Rig_edge_primitives (wait, or Lock.await):
     rig_unblock right before the step, rig_block right after (SIG-2,
     SIG-9); no lock is held across a wait but Lock.await's own;
   - the held polls (broken drivers) keep the runtime in 100 us pieces (a C
     nanosleep without caml_enter_blocking_section, or a cpu_relax spin)
     with a Thread.yield between pieces ("be nice to other threads"), so
     that other threads still get the runtime within about 100 us: the
     step keeps the runtime while it blocks, which SIG-3 forbids, but
     other threads' calls, waits and deadlines are not starved;
   - no counted lock but oc-counted-lock's and oc-shared-ticker's (both
     Rig_edge_primitives.Lock.protect, never across a wait but await's).

   driver            | what it does                                       | clause     | the sentence it breaks, or that allows it
   ------------------+----------------------------------------------------+------------+-------------------------------------------
   oc-alloc-held     | sleep: if memory is moving on another thread as it | BREAKS     | SIG-3 "whose step releases the OCaml
                     | starts (a memory call -- alloc/free/map_peer/      | SIG-3      | runtime while it blocks, as a blocking
                     | map_host -- in flight, or the last one made by     |            | stub does": the step blocks in a C
                     | another thread and ended < 20 ms ago: "completion  |            | nanosleep that keeps the runtime
                     | soon"), its step polls the word with 100 us C      |            |
                     | nanosleeps that keep the runtime (+ Thread.yield), |            |
                     | for the whole sleep; else hostmem's wait           |            |
   oc-grow-spin      | sleep: if another thread is growing the queues as  | BREAKS     | same sentence: a busy spin keeps the
                     | it starts (a grow in flight, or the last grow made |            | runtime while the step blocks the
                     | by another thread and ended < 20 ms ago: "the queue| SIG-3      | sleep (Thread.yield counts as held:
                     | is being resized, its interrupt is off"), its step |            | it is not a blocking section)
                     | spins on the word (cpu_relax, Thread.yield between |            |
                     | spins); else hostmem's wait                        |            |
   oc-sibling-busy   | sleep: if another device of the driver has         | BREAKS     | same sentence
                     | committed work not yet done (Hostmem.busy) as it   | SIG-3      |
                     | starts ("the siblings share an interrupt vector"), |            |
                     | held C poll as oc-alloc-held; else hostmem's wait  |            |
   oc-shared-irq     | sleep: the first sleeper of a device takes         | BREAKS     | same sentence
                     | hostmem's wait ("owns the interrupt"); a sleep     | SIG-3      |
                     | that starts while another thread sleeps on the     |            |
                     | same device polls, held C poll                     |            |
   oc-rate-poll      | sleep: if the process-wide submit rate is high as  | BREAKS     | same sentence
                     | it starts (the last 16 submits of the driver within| SIG-3      |
                     | 50 ms: "hybrid polling at high IOPS"), held C poll;|            |
                     | else hostmem's wait                                |            |
   oc-feed-poll      | sleep: if another thread is feeding this device's  | BREAKS     | same sentence
                     | queue as it starts (its room answered RIG_ROOM,    | SIG-3      |
                     | its commit not yet made: "a doorbell is coming"),  |            |
                     | held C poll; else hostmem's wait                   |            |
   oc-early-wake     | sleep waits in hostmem waits of at most 5 ms and   | conforming | TIME-4's "It may return earlier, on an
                     | returns early (word unmoved) once any thread of    |            | event of other work or a timer of the
                     | the process submitted to the driver since it began |            | driver's own, since rig reads the word
                     |                                                    |            | again after every return and sleeps
                     |                                                    |            | again while it is unmoved."
   oc-slow-commit    | commit, while another thread sleeps on the device, | conforming | "Calls of the C functions are counted
                     | first waits 10 ms for more submissions to coalesce |            | where the device declares may_block"
                     | (Unix.sleepf: a blocking section, the runtime      |            | (hostmem declares it); TIME-6 "rig may
                     | released, signals left blocked), then commits      |            | call it while the driver's submit or
                     |                                                    |            | commit runs"; no SIG-2 wait (ambig. 3)
   oc-counted-lock   | sleep and submit share a per-device counted lock   | conforming | LOCK-3 (Lock.protect counts it),
                     | (Rig_edge_primitives.Lock) for statistics: each    |            | ASYNC-2 (protect), SIG-3 (the wait is
                     | takes it briefly; sleep never holds it across its  |            | hostmem's, outside the lock); TIME-6
                     | wait (hostmem's)                                   |            | (submit never waits for a sleeper)
   oc-shared-ticker  | one ticker thread for all the driver's devices     | conforming | SIG-3 through Lock.await ("waits on c,
                     | (Prim.spawn, Unix.sleepf 2 ms, Condition.broadcast)|            | giving l back while it blocks, as a
                     | sleepers wait under a driver lock with Lock.await  |            | wait"); TIME-4 "may return earlier
                     | and look at the word at each tick                  |            | ... on a timer of the driver's own";
                     |                                                    |            | SIG-8 (spawn)
   oc-one-device     | one opener (hostmem0 only): a machine with one     | conforming | Package.openers: "the devices of this
                     | device; no sibling, no peer                        |            | machine, as openers" (ambiguity 4)
   oc-alloc-timer    | oc-alloc-held's condition (memory moving on        | conforming | TIME-4's "or a timer of the driver's
                     | another thread as sleep starts) with a releasing   |            | own"; SIG-3: Unix.sleepf is a blocking
                     | poll: the step polls the word with 0.5 ms          |            | section
                     | Unix.sleepf                                        |            |
   oc-spin-first     | sleep: if memory is moving or the queues growing   | conforming | SIG-2 defines a wait by its rig_unblock
                     | on another thread as it starts (oc-alloc-held's and|            | / rig_block; the spin is outside any
                     | oc-grow-spin's conditions), it first spins up to   |            | wait, so SIG-3 does not govern it
                     | 50 us on the word (signals blocked, outside any    |            | (ambiguity 2)
                     | wait), then waits hostmem's wait for still_ms - 1  |            |

   Ambiguities resolved:
   1. "releases the OCaml runtime while it blocks": a step that keeps the
      runtime in short pieces and yields (Thread.yield) between them is
      taken to break it: it blocks (the sleep does not return) while it
      keeps the runtime, and a yield is not a blocking section
      (Rig_edge_primitives.time_in_waits' note says the same of
      Thread.yield).  The broken drivers yield so that nothing else
      (another thread's TIME-4 deadline, a hang bound) suffers.
   2. A spin outside any wait (signals blocked, runtime kept) is not "a
      wait's blocking step": the document calls waits the places where the
      driver unblocks signals (rig_unblock ... rig_block).  oc-spin-first
      relies on this and bounds its spin at 50 us, inside still_ms (it
      then waits still_ms - 1 ms at most).  A stricter reading (every
      blocking of sleep is a wait) would make it SIG-3 (or SIG-2).
   3. A blocking call with signals left blocked (oc-slow-commit's 10 ms in
      commit) is taken as not a wait: SIG-2 says where handlers run, not
      that every blocking call must open one; SIG-5 has the signal run at
      the call's next wait or once the call has returned.
   4. A package may offer one opener: nothing asks for two.  Clauses that
      need two devices (peer, map_peer) may then come out n/a.
   5. "Another thread" in the broken conditions: the sleeping thread cannot
      itself be inside alloc, grow, or another sleep, so a counter above 0
      (above 1 for the sleepers) is another thread; for oc-sibling-busy the
      sibling's work may have been committed by any thread, for
      oc-rate-poll the 16 submits by any threads (process-wide).
   6. Each condition is read once, as the sleep starts, and the held poll
      then lasts the whole sleep (until the word moves, the device faults
      or stops, or still_ms).
   7. hostmem's alloc, free and grow keep the runtime (plain stubs), so
      another thread "inside" one is seen by a sleeper only if the runtime
      preempted it there.  oc-alloc-held and oc-grow-spin (and the two
      conforming drivers with their conditions) therefore also count a
      call another thread ended less than 20 ms ago: "memory is moving" /
      "the queues are being resized" as a short window, not an instant.
      (Found with the author's own check, drivers/blindoc/check, before
      any certification.) *)

module Prim = Rig_edge_primitives
module H = Hostmem.D

(* The held delay: keeps the runtime (no blocking section). *)
external udelay : int -> unit = "oc_udelay" [@@noalloc]

(* ------------------------------------------------------------ state *)

type dev = {
  h : H.t;
  sleepers : int Atomic.t;  (* threads inside this device's sleep *)
  feeders : int list Atomic.t;  (* threads whose room answered Room, not yet committed *)
  stats : Prim.Lock.t;  (* oc-counted-lock's *)
  mutable submits_seen : int;  (* under stats *)
  mutable sleeps_seen : int;  (* under stats *)
  mutable queue : Rig_edge.queue;  (* set in make *)
}

type ctx = {
  mem_calls : int Atomic.t;  (* alloc, free, map_peer, map_host in flight *)
  grow_calls : int Atomic.t;  (* grow in flight *)
  mem_last : (int * float) Atomic.t;  (* the thread and end time of the last memory call *)
  grow_last : (int * float) Atomic.t;  (* the same for grow *)
  submits : int Atomic.t;  (* submits so far, all devices *)
  stamps : float array;  (* the times of the last 16 submits *)
  devices : H.t Weak.t;
  n_devices : int Atomic.t;
  tick_lock : Prim.Lock.t;  (* oc-shared-ticker's *)
  tick : Condition.t;
  ticker : bool Atomic.t;  (* started *)
}

let new_ctx name =
  {
    mem_calls = Atomic.make 0;
    grow_calls = Atomic.make 0;
    mem_last = Atomic.make (-1, neg_infinity);
    grow_last = Atomic.make (-1, neg_infinity);
    submits = Atomic.make 0;
    stamps = Array.make 16 neg_infinity;
    devices = Weak.create 64;
    n_devices = Atomic.make 0;
    tick_lock = Prim.Lock.create (name ^ ".tick");
    tick = Condition.create ();
    ticker = Atomic.make false;
  }

let counted c f =
  Atomic.incr c;
  match f () with
  | v ->
      Atomic.decr c;
      v
  | exception e ->
      Atomic.decr c;
      raise e

let self () = Thread.id (Thread.self ())

(* counted, and the end noted with the thread that made the call *)
let noted c last f =
  Atomic.incr c;
  match f () with
  | v ->
      Atomic.set last (self (), Unix.gettimeofday ());
      Atomic.decr c;
      v
  | exception e ->
      Atomic.set last (self (), Unix.gettimeofday ());
      Atomic.decr c;
      raise e

(* in flight, or ended on another thread less than 20 ms ago *)
let moving c last =
  Atomic.get c > 0
  ||
  let t, at = Atomic.get last in
  t <> self () && Unix.gettimeofday () -. at < 0.02

let memory_moving ctx = moving ctx.mem_calls ctx.mem_last
let queues_growing ctx = moving ctx.grow_calls ctx.grow_last

let rec update a f =
  let old = Atomic.get a in
  if not (Atomic.compare_and_set a old (f old)) then update a f

let feeding d =
  let me = self () in
  update d.feeders (fun l -> if List.mem me l then l else me :: l)

let fed d =
  let me = self () in
  update d.feeders (List.filter (fun t -> t <> me))

let others_feeding d =
  let me = self () in
  List.exists (fun t -> t <> me) (Atomic.get d.feeders)

let stamp ctx =
  let i = Atomic.fetch_and_add ctx.submits 1 in
  ctx.stamps.(i land 15) <- Unix.gettimeofday ()

(* the last 16 submits within 50 ms *)
let rate_high ctx =
  let n = Atomic.get ctx.submits in
  n >= 16 && Unix.gettimeofday () -. ctx.stamps.(n land 15) < 0.05

let sibling_busy ctx h =
  let me = Hostmem.id h in
  let n = min (Atomic.get ctx.n_devices) (Weak.length ctx.devices) in
  let rec go k =
    k < n
    && ((match Weak.get ctx.devices k with
        | Some h' when Hostmem.id h' <> me -> Hostmem.busy h'
        | _ -> false)
       || go (k + 1))
  in
  go 0

(* The queue wrapped to note submits and feeders. *)
let tracked ctx d (q : Rig_edge.queue) : Rig_edge.queue =
  {
    room =
      (fun s ->
        let a = q.room s in
        if a = Rig_edge.Room then feeding d;
        a);
    submit =
      (fun s ~value ->
        let ok = q.submit s ~value in
        stamp ctx;
        ok);
    commit =
      (fun () ->
        let ok = q.commit () in
        fed d;
        ok);
  }

(* ------------------------------------------------------------ sleeps *)

let faulted h = match H.sleep h ~seen:(H.signaled h) ~still_ms:0 with () -> false | exception H.Fault _ -> true

let settled h ~seen ~deadline =
  H.signaled h <> seen || Hostmem.stopped h || faulted h || Unix.gettimeofday () >= deadline

(* Held polls: keep the runtime while the step blocks. *)
let held_poll h ~seen ~deadline () =
  while not (settled h ~seen ~deadline) do
    udelay 100;
    Thread.yield ()
  done

let spin_poll h ~seen ~deadline () =
  while not (settled h ~seen ~deadline) do
    let t = Unix.gettimeofday () +. 0.0001 in
    while Unix.gettimeofday () < t && H.signaled h = seen do
      Domain.cpu_relax ()
    done;
    Thread.yield ()
  done

(* A releasing poll: a timer of the driver's own. *)
let timer_poll h ~seen ~deadline () =
  while not (settled h ~seen ~deadline) do
    Unix.sleepf 0.0005
  done

(* A sleep whose wait's step is [step]: hostmem's checks around it. *)
let sleep_with step h ~seen ~still_ms =
  H.sleep h ~seen ~still_ms:0;
  if H.signaled h = seen && still_ms > 0 then begin
    let deadline = Unix.gettimeofday () +. (float still_ms /. 1000.) in
    Prim.wait (step h ~seen ~deadline);
    H.sleep h ~seen ~still_ms:0
  end

(* ------------------------------------------------- the common driver *)

module type TWIST = sig
  val name : string
  val sleep : ctx -> dev -> seen:int -> still_ms:int -> unit
  val queue : ctx -> dev -> Rig_edge.queue -> Rig_edge.queue
  val openers : H.t Rig_edge.opener list -> H.t Rig_edge.opener list
  val on_make : ctx -> unit  (* inside Prim.masked *)
end

let plain_sleep _ d ~seen ~still_ms = H.sleep d.h ~seen ~still_ms
let plain_queue _ _ q = q
let all_openers l = l
let nothing_on_make _ = ()

module Make (X : TWIST) : Rig_edge.Package = struct
  let ctx = new_ctx X.name

  module D = struct
    type t = dev
    type region = H.region
    type image = H.image

    exception Fault = H.Fault

    let key = X.name
    let facts d = { (H.facts d.h) with queue = d.queue }
    let locate d r = H.locate d.h r
    let peer d d' = H.peer d.h d'.h
    let alloc d m n = noted ctx.mem_calls ctx.mem_last (fun () -> H.alloc d.h m n)
    let free d r = noted ctx.mem_calls ctx.mem_last (fun () -> H.free d.h r)
    let map_peer d d' r = noted ctx.mem_calls ctx.mem_last (fun () -> H.map_peer d.h d'.h r)
    let map_host d p n = noted ctx.mem_calls ctx.mem_last (fun () -> H.map_host d.h p n)
    let dma d r ~fn = H.dma d.h r ~fn
    let image d b = H.image d.h b
    let entry = H.entry
    let prepare = H.prepare
    let grow d = noted ctx.grow_calls ctx.grow_last (fun () -> H.grow d.h)
    let signaled d = H.signaled d.h
    let sleep d ~seen ~still_ms = counted d.sleepers (fun () -> X.sleep ctx d ~seen ~still_ms)
    let stop d ~fault = H.stop d.h ~fault
    let unload = H.unload
  end

  let name = X.name

  let make (o : H.t Rig_edge.opener) () =
    Prim.check_unheld (X.name ^ ".make");
    Prim.masked (fun () ->
        let h = o.make () in
        let d =
          {
            h;
            sleepers = Atomic.make 0;
            feeders = Atomic.make [];
            stats = Prim.Lock.create (X.name ^ ".stats");
            submits_seen = 0;
            sleeps_seen = 0;
            queue = (H.facts h).queue;
          }
        in
        d.queue <- X.queue ctx d d.queue;
        let k = Atomic.fetch_and_add ctx.n_devices 1 in
        Weak.set ctx.devices (k mod Weak.length ctx.devices) (Some h);
        X.on_make ctx;
        d)

  let openers () =
    Prim.check_unheld (X.name ^ ".openers");
    Prim.masked (fun () ->
        List.map
          (fun (o : H.t Rig_edge.opener) -> { Rig_edge.name = o.name; make = make o })
          (X.openers (Hostmem.openers ())))

  let kit = Hostmem.kit
end

(* ---------------------------------------------------- the broken six *)

module Alloc_held = Make (struct
  let name = "oc-alloc-held"

  let sleep ctx d ~seen ~still_ms =
    if memory_moving ctx then sleep_with held_poll d.h ~seen ~still_ms
    else H.sleep d.h ~seen ~still_ms

  let queue = plain_queue
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Grow_spin = Make (struct
  let name = "oc-grow-spin"

  let sleep ctx d ~seen ~still_ms =
    if queues_growing ctx then sleep_with spin_poll d.h ~seen ~still_ms
    else H.sleep d.h ~seen ~still_ms

  let queue = plain_queue
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Sibling_busy = Make (struct
  let name = "oc-sibling-busy"

  let sleep ctx d ~seen ~still_ms =
    if sibling_busy ctx d.h then sleep_with held_poll d.h ~seen ~still_ms else H.sleep d.h ~seen ~still_ms

  let queue = plain_queue
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Shared_irq = Make (struct
  let name = "oc-shared-irq"

  (* the wrapper counted this sleep already: > 1 is another thread *)
  let sleep _ d ~seen ~still_ms =
    if Atomic.get d.sleepers > 1 then sleep_with held_poll d.h ~seen ~still_ms else H.sleep d.h ~seen ~still_ms

  let queue = plain_queue
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Rate_poll = Make (struct
  let name = "oc-rate-poll"

  let sleep ctx d ~seen ~still_ms =
    if rate_high ctx then sleep_with held_poll d.h ~seen ~still_ms else H.sleep d.h ~seen ~still_ms

  let queue = tracked
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Feed_poll = Make (struct
  let name = "oc-feed-poll"

  let sleep _ d ~seen ~still_ms =
    if others_feeding d then sleep_with held_poll d.h ~seen ~still_ms else H.sleep d.h ~seen ~still_ms

  let queue = tracked
  let openers = all_openers
  let on_make = nothing_on_make
end)

(* ------------------------------------------------ the conforming seven *)

module Early_wake = Make (struct
  let name = "oc-early-wake"

  let sleep ctx d ~seen ~still_ms =
    let h = d.h in
    let gen = Atomic.get ctx.submits in
    let deadline = Unix.gettimeofday () +. (float still_ms /. 1000.) in
    let left () = int_of_float (Float.floor ((deadline -. Unix.gettimeofday ()) *. 1000.)) in
    H.sleep h ~seen ~still_ms:(min still_ms 5);
    let rec go () =
      let l = left () in
      if H.signaled h = seen && Atomic.get ctx.submits = gen && l > 0 && not (Hostmem.stopped h) then begin
        H.sleep h ~seen ~still_ms:(min l 5);
        go ()
      end
    in
    go ()

  let queue = tracked
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Slow_commit = Make (struct
  let name = "oc-slow-commit"
  let sleep = plain_sleep

  let queue _ d (q : Rig_edge.queue) : Rig_edge.queue =
    {
      q with
      commit =
        (fun () ->
          if Atomic.get d.sleepers > 0 then Unix.sleepf 0.01;
          q.commit ());
    }

  let openers = all_openers
  let on_make = nothing_on_make
end)

module Counted_lock = Make (struct
  let name = "oc-counted-lock"

  let sleep _ d ~seen ~still_ms =
    Prim.Lock.protect d.stats (fun () -> d.sleeps_seen <- d.sleeps_seen + 1);
    H.sleep d.h ~seen ~still_ms

  let queue _ d (q : Rig_edge.queue) : Rig_edge.queue =
    {
      q with
      submit =
        (fun s ~value ->
          Prim.Lock.protect d.stats (fun () -> d.submits_seen <- d.submits_seen + 1);
          q.submit s ~value);
    }

  let openers = all_openers
  let on_make = nothing_on_make
end)

module Shared_ticker = Make (struct
  let name = "oc-shared-ticker"

  let ticker ctx () =
    while true do
      Unix.sleepf 0.002;
      Condition.broadcast ctx.tick
    done

  let on_make ctx =
    if Atomic.compare_and_set ctx.ticker false true then ignore (Prim.spawn (ticker ctx) : Thread.t)

  let sleep ctx d ~seen ~still_ms =
    let h = d.h in
    H.sleep h ~seen ~still_ms:0;
    if H.signaled h = seen && still_ms > 0 then begin
      let deadline = Unix.gettimeofday () +. (float still_ms /. 1000.) in
      Prim.Lock.protect ctx.tick_lock (fun () ->
          while not (settled h ~seen ~deadline) do
            Prim.Lock.await ctx.tick_lock ctx.tick
          done);
      H.sleep h ~seen ~still_ms:0
    end

  let queue = plain_queue
  let openers = all_openers
end)

module One_device = Make (struct
  let name = "oc-one-device"
  let sleep = plain_sleep
  let queue = plain_queue
  let openers = function o :: _ -> [ o ] | [] -> []
  let on_make = nothing_on_make
end)

module Alloc_timer = Make (struct
  let name = "oc-alloc-timer"

  let sleep ctx d ~seen ~still_ms =
    if memory_moving ctx then sleep_with timer_poll d.h ~seen ~still_ms
    else H.sleep d.h ~seen ~still_ms

  let queue = plain_queue
  let openers = all_openers
  let on_make = nothing_on_make
end)

module Spin_first = Make (struct
  let name = "oc-spin-first"

  let sleep ctx d ~seen ~still_ms =
    let h = d.h in
    H.sleep h ~seen ~still_ms:0;
    if H.signaled h = seen && still_ms >= 2 && (memory_moving ctx || queues_growing ctx) then begin
      let t = Unix.gettimeofday () +. 0.00005 in
      while Unix.gettimeofday () < t && H.signaled h = seen do
        Domain.cpu_relax ()
      done;
      H.sleep h ~seen ~still_ms:(still_ms - 1)
    end
    else H.sleep h ~seen ~still_ms

  let queue = plain_queue
  let openers = all_openers
  let on_make = nothing_on_make
end)

(* ------------------------------------------------------------ all *)

let all : (module Rig_edge.Package) list =
  [
    (module Alloc_held);
    (module Grow_spin);
    (module Sibling_busy);
    (module Shared_irq);
    (module Rate_poll);
    (module Feed_poll);
    (module Early_wake);
    (module Slow_commit);
    (module Counted_lock);
    (module Shared_ticker);
    (module One_device);
    (module Alloc_timer);
    (module Spin_first);
  ]

let kit_more = Hostmem.kit_more
