(* blindt6: hostmem (drivers/hostmem) with one behaviour changed per driver,
   about the timeline: how sleep gets along with a submit or commit that
   runs at the same time on another thread.  Written from
   spec/rig_edge_driver.txt, the interface (rig_edge.h, Rig_edge,
   Rig_edge_primitives) and hostmem alone.  Every driver wraps Hostmem's
   public interface: its memory, images, word, kit and openers are
   hostmem's; only sleep and the device's queue (room/submit/commit, as the
   record Rig_edge.queue that facts gives) differ, as each comment says.

   The sentences quoted are the document's (Timeline, Drivers):
   [T6]  "rig may call sleep while the driver's submit or commit runs."
   [T4]  "sleep d ~seen ~still_ms blocks on the device's events until the
          word differs from seen, and must return, or raise Fault, at the
          latest after still_ms milliseconds."
   [T3]  "It must return immediately if the word already differs."
   [EARLY] "It may return earlier, on an event of other work or a timer of
          the driver's own, since rig reads the word again after every
          return and sleeps again while it is unmoved."
   [L3]  "A driver must count each lock it holds while OCaml code runs ...
          from before the take to after the give (rig_hold in rig_edge.h)."
   [A2]  "A driver must therefore take each lock it holds while OCaml code
          runs immediately before the handler that gives it back ... and
          must give it back first in both the return and the raise."
   [W]   "inside its waits, each of which calls rig_unblock right before its
          blocking step and rig_block right after it ... and whose step
          releases the OCaml runtime while it blocks"
   [S8]  "A thread the driver starts blocks them for its life"
   [C]   rig_edge.h: the C functions are called "from any thread, several at
          once for different submissions".

   driver                     what it does                                  clause  sentence
   -------------------------  --------------------------------------------  ------  --------
   t6-sleep-keeps-ring-lock   sleep arms the fence interrupt under the      TIME-6  [T6] broken: a submit or commit
                              queue's ring lock (a counted                          called during a sleep waits for
                              Rig_edge_primitives.Lock) and waits for the           that sleep to return (up to
                              word inside it; submit and commit take the            still_ms), so work rig commits
                              same lock                                             while it sleeps cannot move the word
   t6-commit-drains-sleepers  commit first waits (polling waits, up to      TIME-6  [T6] broken: commit does not run
                              2 s) until no sleep is in flight, "so the             while a sleep runs; it runs once
                              doorbell cannot race a sleeper arming its             every sleep has ended
                              interrupt"
   t6-irq-under-devlock       sleep takes the device-wide C mutex (counted  TIME-6  [T6] broken: the condition wait
                              with hold/give) to arm the interrupt, then            gives back only the interrupt lock;
                              waits on the interrupt condition variable             a submit called during the sleep
                              with a timeout, whose mutex is the interrupt          waits on the device lock until the
                              lock; submit takes the device lock                    sleep returns
   t6-sleep-waits-commit      commit holds the ring lock (C mutex, counted) TIME-6  [T6] broken: a sleep called while
                              through a 100 ms flush; sleep takes the ring          commit runs cannot look at the word
                              lock (timed, bounded by still_ms) to read             until that commit ends (or still_ms
                              the retired fence before it looks at the              passes): it sleeps through a change
                              word or waits                                         of the word meanwhile
   t6-ok-brief-ring-lock      sleep takes the ring lock (counted Lock)      none    [T6] [T3] [T4] [L3] [A2]: the lock
                              only to snapshot the ring, gives it back,             is held for a snapshot, never across
                              then waits; submit and commit take it around          the wait, so neither side waits for
                              the C calls                                           the other's blocking step
   t6-ok-slow-submit          submit validates for 60 ms (a wait: nap       none    [T6] [W] [C]: a slow submit holds
                              inside Rig_edge_primitives.wait) under an             only an encoder lock sleep never
                              encoder lock of its own, then submits                 takes; nothing bounds submit's time
   t6-ok-sleep-short-timer    sleep waits at most 4 ms per call (a timer    none    [EARLY] [T3] [T4]: returns early on
                              of its own) and lets rig loop                         its own timer; rig sleeps again
   t6-ok-commit-handshake     commit rings a doorbell thread (C, signals    none    [T6] [W] [S8]: commit's short wait
                              blocked for its life) after hostmem's commit          is a wait (Prim.wait, runtime
                              and waits for its ack (~0.3 ms) in waits of           released); the doorbell thread holds
                              at most 20 ms; stop ends the thread                   nothing sleep needs *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem

(* ------------------------------------------------------------ C side *)

type cst

external c_new : unit -> cst = "t6_new"
external now_ms : unit -> int = "t6_now_ms" [@@noalloc]
external nap : int -> unit = "t6_nap"
external dl_lock : cst -> unit = "t6_dl_lock"
external dl_unlock : cst -> unit = "t6_dl_unlock" [@@noalloc]
external ev_wait : cst -> int -> unit = "t6_ev_wait"
external ev_kick : cst -> unit = "t6_ev_kick" [@@noalloc]
external ring_lock : cst -> unit = "t6_ring_lock"
external ring_timedlock : cst -> int -> bool = "t6_ring_timedlock"
external ring_unlock : cst -> unit = "t6_ring_unlock" [@@noalloc]
external db_start : cst -> unit = "t6_db_start"
external db_ring : cst -> int = "t6_db_ring" [@@noalloc]
external db_wait : cst -> int -> int -> bool = "t6_db_wait"
external db_quit : cst -> unit = "t6_db_quit" [@@noalloc]

(* ------------------------------------------------------------- types *)

type t = {
  h : H.D.t;
  c : cst;
  ring : Prim.Lock.t;  (* the queue's ring lock, a counted lock of OCaml's *)
  encoder : Prim.Lock.t;  (* t6-ok-slow-submit's submit-only lock *)
  sleepers : int Atomic.t;  (* sleeps in flight (t6-commit-drains-sleepers) *)
  snap : int Atomic.t;  (* the ring snapshot t6-ok-brief-ring-lock takes *)
  mutable queue : queue;  (* set once at open *)
}

(* The C device-wide lock and ring lock, held across OCaml code: counted
   from before the take to after the give [L3], taken immediately before
   the handler that gives them back, given back first on both paths [A2]. *)
let with_dl c f =
  Prim.hold ();
  dl_lock c;
  match f () with
  | x ->
      dl_unlock c;
      Prim.give ();
      x
  | exception e ->
      dl_unlock c;
      Prim.give ();
      raise e

let with_ring c f =
  Prim.hold ();
  ring_lock c;
  match f () with
  | x ->
      ring_unlock c;
      Prim.give ();
      x
  | exception e ->
      ring_unlock c;
      Prim.give ();
      raise e

(* [with_ring_within c ms f]: f () under the ring lock if it is taken within
   ms, else [none]. *)
let with_ring_within c ms ~none f =
  Prim.hold ();
  if ring_timedlock c ms then
    match f () with
    | x ->
        ring_unlock c;
        Prim.give ();
        x
    | exception e ->
        ring_unlock c;
        Prim.give ();
        raise e
  else begin
    Prim.give ();
    none
  end

(* ---------------------------------------------- hostmem, as it is *)

module Base = struct
  type nonrec t = t
  type region = H.D.region
  type image = H.D.image

  exception Fault = H.D.Fault

  let key = "blindt6"
  let facts d = { (H.D.facts d.h) with queue = d.queue }
  let locate d r = H.D.locate d.h r
  let peer d d' = H.D.peer d.h d'.h
  let alloc d m n = H.D.alloc d.h m n
  let free d r = H.D.free d.h r
  let map_peer d d' r = H.D.map_peer d.h d'.h r
  let map_host d p n = H.D.map_host d.h p n
  let dma d r ~fn = H.D.dma d.h r ~fn
  let image d b = H.D.image d.h b
  let entry = H.D.entry
  let prepare = H.D.prepare
  let unload = H.D.unload
  let grow d = H.D.grow d.h
  let signaled d = H.D.signaled d.h
  let sleep d ~seen ~still_ms = H.D.sleep d.h ~seen ~still_ms
  let stop d ~fault = H.D.stop d.h ~fault

  (* Raises Fault once the device faulted (hostmem's sleep checks the fault
     first; with still_ms 0 it waits for nothing). *)
  let check_fault d ~seen = H.D.sleep d.h ~seen ~still_ms:0

  (* Whether sleep has to wait at all [T3]. *)
  let unmoved d ~seen ~still_ms = H.D.signaled d.h = seen && still_ms > 0
end

(* Openers of hostmem's devices, each wrapped with the state of ours;
   [wrap] makes the device's queue from hostmem's; [init] starts what the
   driver needs. *)
let openers ~wrap ~init () =
  Prim.check_unheld "Blindt6.openers";
  Prim.masked (fun () ->
      List.map
        (fun (o : H.D.t opener) ->
          let make () =
            Prim.check_unheld "Blindt6.make";
            Prim.masked (fun () ->
                let h = o.make () in
                let hq = (H.D.facts h).queue in
                let d =
                  {
                    h;
                    c = c_new ();
                    ring = Prim.Lock.create "blindt6.ring";
                    encoder = Prim.Lock.create "blindt6.encoder";
                    sleepers = Atomic.make 0;
                    snap = Atomic.make 0;
                    queue = hq;
                  }
                in
                d.queue <- wrap d hq;
                init d;
                d)
          in
          { name = o.name; make })
        (H.openers ()))

let same_queue _ q = q
let no_init _ = ()

(* ------------------------------------------------------------ broken *)

(* TIME-6.  "Arm the fence interrupt under the ring lock, so that no
   submission slips in between the check of the word and the arm": sleep
   takes the ring lock and keeps it for its whole wait.  submit and commit
   take the ring lock around hostmem's C calls, so one called while a sleep
   waits waits for that sleep.  The lock is a counted Lock, the wait is
   hostmem's (Rig_edge_primitives.wait, runtime released); sleep still
   returns at once when the word differs and within still_ms. *)
let ring_queue d (q : queue) =
  {
    q with
    submit = (fun s ~value -> Prim.Lock.protect d.ring (fun () -> q.submit s ~value));
    commit = (fun () -> Prim.Lock.protect d.ring (fun () -> q.commit ()));
  }

module Sleep_keeps_ring_lock = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d ~seen;
    if unmoved d ~seen ~still_ms then
      Prim.Lock.protect d.ring (fun () -> H.D.sleep d.h ~seen ~still_ms)
end

(* TIME-6.  "A doorbell write while a sleeper arms its interrupt can lose
   the interrupt": commit waits, in waits of 1 ms, until no sleep is in
   flight (giving up after 2 s, a watchdog of its own) before it commits.
   A commit called while a sleep runs therefore runs only once the sleeps
   have ended: up to still_ms, or longer while rig sleeps again. *)
let drain_deadline_ms = 2000

let drain_queue d (q : queue) =
  {
    q with
    commit =
      (fun () ->
        let until = now_ms () + drain_deadline_ms in
        while Atomic.get d.sleepers > 0 && now_ms () < until do
          Prim.wait (fun () -> nap 1)
        done;
        q.commit ());
  }

module Commit_drains_sleepers = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d ~seen;
    if unmoved d ~seen ~still_ms then begin
      Atomic.incr d.sleepers;
      match H.D.sleep d.h ~seen ~still_ms with
      | () -> Atomic.decr d.sleepers
      | exception e ->
          Atomic.decr d.sleepers;
          raise e
    end
end

(* TIME-6.  The classic nested monitor: sleep takes the device-wide lock
   (a C mutex, counted while OCaml code runs under it) to arm the interrupt,
   then waits on the interrupt's condition variable with a timeout.  That
   wait gives back the interrupt lock, its own mutex, but not the device
   lock.  submit takes the device lock around hostmem's submit (and kicks
   the interrupt after it), so a submit called during a sleep waits until
   the sleep ends.  The word is read after each wake and each slice of at
   most 2 ms; sleep returns at once when it differs and within still_ms. *)
let devlock_queue d (q : queue) =
  {
    q with
    submit =
      (fun s ~value ->
        let ok = with_dl d.c (fun () -> q.submit s ~value) in
        ev_kick d.c;
        ok);
    commit =
      (fun () ->
        let ok = q.commit () in
        ev_kick d.c;
        ok);
  }

module Irq_under_devlock = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d ~seen;
    if unmoved d ~seen ~still_ms then begin
      let until = now_ms () + still_ms in
      with_dl d.c (fun () ->
          let rec go () =
            let left = until - now_ms () in
            if H.D.signaled d.h = seen && left > 0 then begin
              Prim.wait (fun () -> ev_wait d.c (min left 2));
              check_fault d ~seen;
              go ()
            end
          in
          go ())
    end
end

(* TIME-6.  commit flushes the ring (100 ms: a wait) under the ring lock (a
   C mutex, counted), then commits.  sleep reads the ring's retired fence
   under the ring lock before it looks at the word and arms its wait; it
   takes the lock with a timeout of still_ms, so it still returns in time,
   but a sleep called while a commit runs learns nothing of the word until
   that commit ends. *)
let flush_ms = 100

let flush_queue d (q : queue) =
  {
    q with
    commit =
      (fun () ->
        with_ring d.c (fun () ->
            Prim.wait (fun () -> nap flush_ms);
            q.commit ()));
  }

module Sleep_waits_commit = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d ~seen;
    if unmoved d ~seen ~still_ms then begin
      let until = now_ms () + still_ms in
      let fence = with_ring_within d.c still_ms ~none:None (fun () -> Some (H.D.signaled d.h)) in
      match fence with
      | None -> () (* still_ms passed: rig reads the word and sleeps again *)
      | Some w ->
          let left = until - now_ms () in
          if w = seen && left > 0 then H.D.sleep d.h ~seen ~still_ms:left
    end
end

(* -------------------------------------------------------- conforming *)

(* sleep takes the ring lock only to snapshot the ring (the word, as the
   retired fence), gives it back, then waits without it.  submit and
   commit hold the ring lock around hostmem's calls, which do not wait. *)
module Brief_ring_lock = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d ~seen;
    if unmoved d ~seen ~still_ms then begin
      let w = Prim.Lock.protect d.ring (fun () -> H.D.signaled d.h) in
      Atomic.set d.snap w;
      if w = seen then H.D.sleep d.h ~seen ~still_ms
    end
end

(* submit validates the submission for 60 ms (a wait, the runtime
   released) under an encoder lock that only submit takes, then submits.
   Slow, but it holds nothing sleep or commit needs. *)
let validate_ms = 60

let slow_queue d (q : queue) =
  {
    q with
    submit =
      (fun s ~value ->
        Prim.Lock.protect d.encoder (fun () ->
            Prim.wait (fun () -> nap validate_ms);
            q.submit s ~value));
  }

module Slow_submit = struct
  include Base
end

(* sleep waits at most 4 ms per call, a timer of the driver's own, and lets
   rig read the word and sleep again. *)
let tick_ms = 4

module Sleep_short_timer = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d ~seen;
    if unmoved d ~seen ~still_ms then H.D.sleep d.h ~seen ~still_ms:(min still_ms tick_ms)
end

(* commit commits, then rings the device's doorbell thread (C, started with
   signals blocked, holding no lock of the driver's while it waits) and
   waits for its ack in waits of at most 20 ms.  stop ends the thread
   without waiting for it. *)
let handshake_queue d (q : queue) =
  {
    q with
    commit =
      (fun () ->
        let ok = q.commit () in
        let ticket = db_ring d.c in
        while not (Prim.wait (fun () -> db_wait d.c ticket 20)) do
          ()
        done;
        ok);
  }

module Commit_handshake = struct
  include Base

  let stop d ~fault =
    Base.stop d ~fault;
    db_quit d.c
end

(* ----------------------------------------------------------- packages *)

let package ?(wrap = same_queue) ?(init = no_init) name
    (module X : Driver with type t = t and type region = H.D.region and type image = H.D.image) :
    (module Package) =
  (module struct
    module D = X

    let name = name
    let openers = openers ~wrap ~init
    let kit = H.kit
  end)

let packages =
  [
    package "t6-sleep-keeps-ring-lock" ~wrap:ring_queue (module Sleep_keeps_ring_lock);
    package "t6-commit-drains-sleepers" ~wrap:drain_queue (module Commit_drains_sleepers);
    package "t6-irq-under-devlock" ~wrap:devlock_queue (module Irq_under_devlock);
    package "t6-sleep-waits-commit" ~wrap:flush_queue (module Sleep_waits_commit);
    package "t6-ok-brief-ring-lock" ~wrap:ring_queue (module Brief_ring_lock);
    package "t6-ok-slow-submit" ~wrap:slow_queue (module Slow_submit);
    package "t6-ok-sleep-short-timer" (module Sleep_short_timer);
    package "t6-ok-commit-handshake" ~wrap:handshake_queue ~init:(fun d -> db_start d.c)
      (module Commit_handshake);
  ]
