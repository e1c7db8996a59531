(* blindw: hostmem (drivers/hostmem) with one behaviour changed per driver,
   about three clauses: TIME-5 (sleep and the device's faults, read with
   TIME-3), SIG-2 (a driver's waits bracket their blocking step with
   rig_unblock/rig_block, read with SIG-3) and LOCK-3 (each lock held while
   OCaml code runs is counted), the last in functions other than alloc.
   Written from spec/rig_edge_driver.txt, the interface (rig_edge.h,
   Rig_edge, Rig_edge_primitives) and hostmem alone.  Every driver wraps
   Hostmem's public interface: memory, images, word, queues, kit and openers
   are hostmem's; only the function each comment names differs.

   The sentences quoted are the document's (Timeline, Drivers, Code):
   [T5a]  "Raises Fault once the device has faulted."
   [T5b]  "The driver must record each event it consumes, such as a fault's
           report, before it consumes it, so that the next call of sleep
           still raises Fault for it."
   [T3]   "It must return immediately if the word already differs."
   [T4]   "... and must return, or raise Fault, at the latest after still_ms
           milliseconds."
   [EARLY] "It may return earlier, on an event of other work or a timer of
           the driver's own, since rig reads the word again after every
           return and sleeps again while it is unmoved."
   [W]    "A signal's handler therefore runs in a driver only where the
           driver unblocks signals: inside its waits, each of which calls
           rig_unblock right before its blocking step and rig_block right
           after it, whether the step returns or raises, and whose step
           releases the OCaml runtime while it blocks, as a blocking stub
           does."
   [L3]   "A driver must count each lock it holds while OCaml code runs, or
           while a stub runs pending signal handlers, among the locks its
           thread holds, from before the take to after the give (rig_hold
           in rig_edge.h)."
   [A2]   "A driver must therefore take each lock it holds while OCaml code
           runs immediately before the handler that gives it back, with no
           allocation or call in between, and must give it back first in
           both the return and the raise, as Mutex.protect does."
   [S8]   "A thread the driver starts blocks them for its life"
   [S9]   "A driver's OCaml code counts its locks and blocks signals through
           Rig_edge_primitives."
   [P]    "prepare i f may start making what entry i f makes and return
           without waiting ... the next entry i f must wait for what it
           started and answer as if it made the entry itself. A prepare of an
           f that has an entry or a started prepare must start nothing, and a
           prepare that raises must have changed nothing."
   [E2]   "A second call for f must make nothing new."
   [F]    "free d r gives back r"

   driver                    what it does                                    clause  sentence
   ------------------------  ----------------------------------------------  ------  --------
   w-word-first              sleep asks "has the fence moved?" before "has   TIME-5  [T5a] broken: on a faulted device
                             the device faulted?": a word that differs              whose word differs from seen, sleep
                             from seen returns at once, fault or not                returns instead of raising ([T3] is
                                                                                    kept: it returns, or raises, at once)
   w-fault-once-cached       once a wait has reported the fault (sleep       TIME-5  [T5b] broken: the report is consumed
                             raised Fault), the driver marks the engine             by the first raise; the next sleep
                             dead and answers every later sleep from the            returns instead of raising Fault
                             cached fence: it returns at once
   w-sleep-plain-wait        sleep's blocking step is a plain C nap          SIG-2   [W] broken: the wait never calls
                             (runtime released) in slices of 2 ms, called           rig_unblock/rig_block: its step runs
                             directly, not inside Rig_edge_primitives.wait          with rig's mask, and no handler runs
                                                                                    inside the driver's wait
   w-wait-forgets-block      sleep waits on the driver's interrupt in a C    SIG-2   [W] broken: "rig_block right after
                             helper that calls rig_unblock before the               it, whether the step returns or
                             blocking step, but returns on its timeout              raises": after a timed-out slice the
                             path before rig_block; slices of 2 ms                  call goes on with signals unblocked,
                                                                                    so handlers run outside any wait
   w-entry-stdlib-mutex      entry keeps a front cache of answers under a    LOCK-3  [L3] broken: the Mutex is held while
                             Stdlib Mutex (Mutex.protect) held across the           OCaml code runs (the cache, hostmem's
                             lookup, hostmem's entry and the cache update           entry) and is never counted
   w-prepare-c-lock-hook     prepare queues f on a C compile queue whose     LOCK-3  [L3] broken: the pthread lock is held
                             pthread mutex stays held while the queue calls         while the OCaml hook runs, without
                             an OCaml trace hook (formats a line into a             rig_hold/rig_give; entry's drop of f
                             Buffer); entry drops f from the queue in C             holds it in C alone
   w-free-stats-mutex        free keeps release statistics (bytes freed, a   LOCK-3  [L3] broken: the Mutex is held while
                             ring of the last 64 handles) under a Stdlib            OCaml code runs in free and is never
                             Mutex held across hostmem's free and the               counted (alloc is hostmem's, untouched)
                             bookkeeping
   w-ok-sleep-at-once        sleep raises Fault if the device faulted, and   none    [T5a] [T3] [EARLY] [T4]: never blocks,
                             otherwise returns at once: rig loops                   returns well within still_ms; rig
                                                                                    reads the word and sleeps again
   w-ok-sliced-waits         sleep blocks in waits of at most 2 ms, each a   none    [W] [T5a] [T3] [T4]: every blocking
                             nap inside Rig_edge_primitives.wait, checking          step is bracketed by Prim.wait and
                             the fault and the word between them                    releases the runtime
   w-ok-entry-counted-cache  entry reads a lock-free cache (an Atomic of an  none    [L3] [A2] [E2]: the only lock held
                             immutable list); on a miss it takes a counted          across OCaml code is a counted
                             Rig_edge_primitives.Lock, looks again, makes           Prim.Lock; the lock-free read holds
                             the entry and publishes it                             none
   w-ok-prepare-thread       prepare starts a driver thread                  none    [P] [S8] [L3]: prepare starts nothing
                             (Rig_edge_primitives.spawn, signals blocked            for an f with an entry or a started
                             for its life) that makes the entry, and                prepare; the thread reports nothing;
                             returns; entry and unload wait for it under a          entry waits with Lock.await (a wait)
                             counted lock (Lock.await)
   w-ok-free-deferred        free pushes the region on a lock-free list of   none    [F] [L3] [A2]: releases happen under
                             pending releases, then drains the list under a         a counted Prim.Lock, taken after the
                             counted Rig_edge_primitives.Lock (the                  push; each region is given back
                             reclaimer), releasing what every free pushed           before some free returns *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem

(* ------------------------------------------------------------ C side *)

type cst

external c_new : unit -> cst = "w_new"
external now_ms : unit -> int = "w_now_ms" [@@noalloc]
external nap : int -> unit = "w_nap"
external irq_wait : cst -> int -> bool = "w_irq_wait"
external irq_kick : cst -> unit = "w_irq_kick"
external pq_push : cst -> string -> (string -> unit) -> unit = "w_pq_push"
external pq_drop : cst -> string -> unit = "w_pq_drop"

(* ------------------------------------------------------------- types *)

type t = {
  h : H.D.t;
  c : cst;
  dead : int option Atomic.t;  (* w-fault-once-cached: the fence when the fault was reported *)
  stats : Mutex.t;  (* w-free-stats-mutex: NOT counted *)
  mutable freed_bytes : int;
  recent : int64 Queue.t;
  reclaim : Prim.Lock.t;  (* w-ok-free-deferred: counted *)
  pending : H.D.region list Atomic.t;
  trace : Buffer.t;  (* w-prepare-c-lock-hook: written under the queue lock only *)
}

type image = {
  hi : H.D.image;
  dev : t;
  mu : Mutex.t;  (* w-entry-stdlib-mutex: NOT counted *)
  front : (string, entry_answer) Hashtbl.t;
  mk : Prim.Lock.t;  (* w-ok-entry-counted-cache *)
  cache : (string * int64) list Atomic.t;
  jl : Prim.Lock.t;  (* w-ok-prepare-thread: guards jobs *)
  jcv : Condition.t;
  jobs : (string, bool ref) Hashtbl.t;  (* f -> done *)
}

(* ---------------------------------------------- hostmem, as it is *)

module Base = struct
  type nonrec t = t
  type region = H.D.region
  type nonrec image = image

  exception Fault = H.D.Fault

  let key = "blindw"
  let facts d = H.D.facts d.h
  let locate d r = H.D.locate d.h r
  let peer d d' = H.D.peer d.h d'.h
  let alloc d m n = H.D.alloc d.h m n
  let free d r = H.D.free d.h r
  let map_peer d d' r = H.D.map_peer d.h d'.h r
  let map_host d p n = H.D.map_host d.h p n
  let dma d r ~fn = H.D.dma d.h r ~fn

  let image d b =
    match H.D.image d.h b with
    | Error e -> Error e
    | Ok hi ->
        Ok
          {
            hi;
            dev = d;
            mu = Mutex.create ();
            front = Hashtbl.create 8;
            mk = Prim.Lock.create "blindw.entry";
            cache = Atomic.make [];
            jl = Prim.Lock.create "blindw.jobs";
            jcv = Condition.create ();
            jobs = Hashtbl.create 8;
          }

  let entry i f = H.D.entry i.hi f
  let prepare i f = H.D.prepare i.hi f
  let unload i = H.D.unload i.hi
  let grow d = H.D.grow d.h
  let signaled d = H.D.signaled d.h
  let sleep d ~seen ~still_ms = H.D.sleep d.h ~seen ~still_ms

  let stop d ~fault =
    H.D.stop d.h ~fault;
    irq_kick d.c

  (* Raises Fault once the device faulted: hostmem's sleep checks its fault
     record first and, with still_ms 0, waits for nothing. *)
  let check_fault d = H.D.sleep d.h ~seen:(H.D.signaled d.h) ~still_ms:0

  (* Whether sleep has to wait at all [T3]. *)
  let unmoved d ~seen ~still_ms = H.D.signaled d.h = seen && still_ms > 0
end

let slice_ms = 2

(* [sliced d ~seen ~still_ms step]: the loop of the sliced sleeps: checks
   the fault first, returns at once if the word differs, else runs [step ms]
   (a blocking step of at most ms) until the word moves, the device faults
   or still_ms pass. *)
let sliced d ~seen ~still_ms step =
  Base.check_fault d;
  if Base.unmoved d ~seen ~still_ms then begin
    let until = now_ms () + still_ms in
    let rec go () =
      let left = until - now_ms () in
      if H.D.signaled d.h = seen && left > 0 then begin
        step (min left slice_ms);
        Base.check_fault d;
        go ()
      end
    in
    go ()
  end

(* ------------------------------------------------------------ broken *)

(* TIME-5.  "Nothing to wait for if the fence moved": the word is read
   first, and only an unmoved word gets to hostmem's sleep, which checks the
   fault.  A faulted device whose word differs from seen (work that ended
   before the faulting one) gets a return, not Fault. *)
module Word_first = struct
  include Base

  let sleep d ~seen ~still_ms = if H.D.signaled d.h <> seen then () else H.D.sleep d.h ~seen ~still_ms
end

(* TIME-5.  "A dead engine writes no more fences": once a sleep has raised
   the fault's report, the driver keeps the fence it read then and answers
   every later sleep from it, returning at once, without looking at the
   device's fault again.  The report was consumed by its first raise. *)
module Fault_once_cached = struct
  include Base

  let sleep d ~seen ~still_ms =
    match Atomic.get d.dead with
    | Some _fence -> () (* the engine is dead: the cached fence is all there is; rig reads the word *)
    | None -> (
        match H.D.sleep d.h ~seen ~still_ms with
        | () -> ()
        | exception (H.D.Fault _ as e) ->
            Atomic.set d.dead (Some (H.D.signaled d.h));
            raise e)
end

(* SIG-2.  The wait is a plain C nap, runtime released (SIG-3 holds), but
   called directly: no rig_unblock before it, no rig_block after it. *)
module Sleep_plain_wait = struct
  include Base

  let sleep d ~seen ~still_ms = sliced d ~seen ~still_ms nap
end

(* SIG-2.  The interrupt wait helper (w_irq_wait, C) unblocks signals before
   its blocking step, but its timeout path returns before rig_block. *)
module Wait_forgets_block = struct
  include Base

  let sleep d ~seen ~still_ms = sliced d ~seen ~still_ms (fun ms -> ignore (irq_wait d.c ms))
end

(* LOCK-3.  A front cache of entry answers, so that two threads asking for
   the same f do not both go to the compiler, under a Stdlib Mutex that is
   never counted. *)
module Entry_stdlib_mutex = struct
  include Base

  let entry i f =
    Mutex.protect i.mu (fun () ->
        match Hashtbl.find_opt i.front f with
        | Some a -> a
        | None ->
            let a = H.D.entry i.hi f in
            (match a with Entry _ -> Hashtbl.replace i.front f a | Absent | No_memory _ -> ());
            a)
end

(* LOCK-3.  prepare queues f on the C compile queue; the queue calls the
   trace hook under its pthread mutex, which nothing counts.  Making the
   entry is left to entry (hostmem's), which then drops f from the queue. *)
let trace_hook d f =
  if Buffer.length d.trace > 8192 then Buffer.clear d.trace;
  Buffer.add_string d.trace (Printf.sprintf "prepare %s: queued at %d ms\n" f (now_ms ()))

module Prepare_c_lock_hook = struct
  include Base

  let prepare i f = pq_push i.dev.c f (trace_hook i.dev)

  let entry i f =
    let a = H.D.entry i.hi f in
    (match a with Entry _ -> pq_drop i.dev.c f | Absent | No_memory _ -> ());
    a
end

(* LOCK-3.  free keeps release statistics under a Stdlib Mutex that is
   never counted, held across hostmem's free and the bookkeeping. *)
module Free_stats_mutex = struct
  include Base

  let free d r =
    let p = H.D.locate d.h r in
    Mutex.protect d.stats (fun () ->
        H.D.free d.h r;
        d.freed_bytes <- d.freed_bytes + p.size;
        Queue.push p.handle d.recent;
        if Queue.length d.recent > 64 then ignore (Queue.pop d.recent))
end

(* -------------------------------------------------------- conforming *)

(* sleep never blocks: the fault first [T5a], then a return at once, which
   the document allows [EARLY]; rig reads the word and sleeps again. *)
module Sleep_at_once = struct
  include Base

  let sleep d ~seen:_ ~still_ms:_ = Base.check_fault d
end

(* sleep blocks in waits of at most 2 ms, each a nap (runtime released)
   inside Rig_edge_primitives.wait. *)
module Sliced_waits = struct
  include Base

  let sleep d ~seen ~still_ms = sliced d ~seen ~still_ms (fun ms -> Prim.wait (fun () -> nap ms))
end

(* entry reads a lock-free cache; a miss takes a counted lock, looks again,
   makes the entry (hostmem's, whose own lock nests inside ours, always in
   that order) and publishes the new list. *)
module Entry_counted_cache = struct
  include Base

  let entry i f =
    match List.assoc_opt f (Atomic.get i.cache) with
    | Some h -> Entry h
    | None ->
        Prim.Lock.protect i.mk (fun () ->
            let l = Atomic.get i.cache in
            match List.assoc_opt f l with
            | Some h -> Entry h
            | None -> (
                match H.D.entry i.hi f with
                | Entry h as e ->
                    Atomic.set i.cache ((f, h) :: l);
                    e
                | a -> a))
end

(* prepare starts a driver thread that makes the entry and returns.  The
   thread reports nothing; entry waits for it, then answers with hostmem's
   entry (the one the thread made, or a new try); unload waits for every
   thread of the image. *)
module Prepare_thread = struct
  include Base

  let build i f j =
    (try ignore (H.D.entry i.hi f) with _ -> ());
    Prim.Lock.protect i.jl (fun () ->
        j := true;
        Condition.broadcast i.jcv)

  let prepare i f =
    Prim.Lock.protect i.jl (fun () ->
        if not (Hashtbl.mem i.jobs f) then begin
          let j = ref false in
          Hashtbl.replace i.jobs f j;
          match Prim.spawn (fun () -> build i f j) with
          | _ -> ()
          | exception e ->
              Hashtbl.remove i.jobs f;
              raise e
        end)

  let entry i f =
    Prim.Lock.protect i.jl (fun () ->
        match Hashtbl.find_opt i.jobs f with
        | Some j -> while not !j do Prim.Lock.await i.jl i.jcv done
        | None -> ());
    let a = H.D.entry i.hi f in
    (match a with
    | Entry _ -> Prim.Lock.protect i.jl (fun () -> Hashtbl.replace i.jobs f (ref true))
    | Absent | No_memory _ -> ());
    a

  let unload i =
    Prim.Lock.protect i.jl (fun () ->
        while Hashtbl.fold (fun _ j busy -> busy || not !j) i.jobs false do
          Prim.Lock.await i.jl i.jcv
        done);
    H.D.unload i.hi
end

(* free pushes the region on a lock-free list of pending releases, then
   drains the list under the reclaimer's counted lock: one region at a
   time, taken off the list before it is given back.  A free that finds the
   lock taken waits for it; the holder drains what it pushed. *)
module Free_deferred = struct
  include Base

  let rec push d r =
    let l = Atomic.get d.pending in
    if not (Atomic.compare_and_set d.pending l (r :: l)) then push d r

  let rec take d =
    match Atomic.get d.pending with
    | [] -> None
    | r :: rest as l -> if Atomic.compare_and_set d.pending l rest then Some r else take d

  let free d r =
    push d r;
    Prim.Lock.protect d.reclaim (fun () ->
        let err = ref None in
        let rec drain () =
          match take d with
          | None -> ()
          | Some r ->
              (try H.D.free d.h r with e -> if !err = None then err := Some e);
              drain ()
        in
        drain ();
        Option.iter raise !err)
end

(* ------------------------------------------------------------ openers *)

let openers () =
  Prim.check_unheld "Blindw.openers";
  Prim.masked (fun () ->
      List.map
        (fun (o : H.D.t opener) ->
          let make () =
            Prim.check_unheld "Blindw.make";
            Prim.masked (fun () ->
                let h = o.make () in
                {
                  h;
                  c = c_new ();
                  dead = Atomic.make None;
                  stats = Mutex.create ();
                  freed_bytes = 0;
                  recent = Queue.create ();
                  reclaim = Prim.Lock.create "blindw.reclaim";
                  pending = Atomic.make [];
                  trace = Buffer.create 256;
                })
          in
          { name = o.name; make })
        (H.openers ()))

(* ----------------------------------------------------------- packages *)

let package name
    (module X : Driver with type t = t and type region = H.D.region and type image = image) :
    (module Package) =
  (module struct
    module D = X

    let name = name
    let openers = openers
    let kit = H.kit
  end)

let packages =
  [
    package "w-word-first" (module Word_first);
    package "w-fault-once-cached" (module Fault_once_cached);
    package "w-sleep-plain-wait" (module Sleep_plain_wait);
    package "w-wait-forgets-block" (module Wait_forgets_block);
    package "w-entry-stdlib-mutex" (module Entry_stdlib_mutex);
    package "w-prepare-c-lock-hook" (module Prepare_c_lock_hook);
    package "w-free-stats-mutex" (module Free_stats_mutex);
    package "w-ok-sleep-at-once" (module Sleep_at_once);
    package "w-ok-sliced-waits" (module Sliced_waits);
    package "w-ok-entry-counted-cache" (module Entry_counted_cache);
    package "w-ok-prepare-thread" (module Prepare_thread);
    package "w-ok-free-deferred" (module Free_deferred);
  ]
