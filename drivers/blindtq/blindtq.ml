(* blindtq: hostmem (drivers/hostmem) with sleep changed per driver, about
   lateness that comes from the CPU: sleep's bound (TIME-4), sleep's "return
   immediately" (TIME-3), and sleep while the driver's submit or commit runs
   (TIME-6).  Written from spec/rig_edge_driver.txt, spec/clauses.tsv, the
   interface (rig_edge.h, Rig_edge, Rig_edge_primitives, Rig_edge_registry)
   and hostmem alone, with this table written before anything was built or
   certified.  (spec/decisions.md was not present.)

   Every driver wraps Hostmem's public interface: memory, images, word,
   queues, kit and openers are hostmem's; only sleep differs, or what it
   needs (two drivers wrap the queue's submit and commit, one starts a C
   thread per device).

   The sentences relied on (Timeline, Drivers):
   [T4]    "sleep d ~seen ~still_ms blocks on the device's events until the
            word differs from seen, and must return, or raise Fault, at the
            latest after still_ms milliseconds."  (TIME-4)
   [T3]    "It must return immediately if the word already differs."
            (TIME-3)
   [T6]    "rig may call it while the driver's submit or commit runs."
            (TIME-6) Read as: sleep keeps [T4] and keeps watching the
            word while a submit or commit runs on another thread, and
            neither waits for the other.
   [EARLY] "It may return earlier, on an event of other work or a timer of
            the driver's own, since rig reads the word again after every
            return and sleeps again while it is unmoved."
   [T5]    "Raises Fault once the device has faulted."  (TIME-5)
   [W]     "inside its waits, each of which calls rig_unblock right before
            its blocking step and rig_block right after it, whether the step
            returns or raises, and whose step releases the OCaml runtime
            while it blocks, as a blocking stub does."  (SIG-2, SIG-3)
   [S8]    "A thread the driver starts blocks them for its life"  (SIG-8)
   [S9]    "A driver's OCaml code counts its locks and blocks signals
            through Rig_edge_primitives."  (SIG-9)
   [L3]    "A driver must count each lock it holds while OCaml code runs
            ... from before the take to after the give"; [A2] "... as
            Mutex.protect does."  (LOCK-3, ASYNC-2: Prim.Lock.protect)
   [STOP]  "stop must release what the driver made to run work ... and
            must not wait for that work."  (STOP-2, STOP-5)

   Common to all fourteen drivers: sleep first checks
   hostmem's fault record and returns at once when the word differs from
   seen or still_ms <= 0, exactly as hostmem's sleep does ([T3], [T5]),
   except tq-moved-compute, whose bug is on that path.  Every loop checks
   the fault record and the word after each step, so a fault raises at the
   next step ([T5]).  Every blocking step (hostmem's own wait through
   H.D.sleep, or a step of blindtq_stubs.c) runs inside
   Rig_edge_primitives.wait and releases the runtime ([W], [S9]), spins and
   sched_yield loops included.  CPU work outside waits keeps signals
   blocked (no rig_unblock).  The only lock is tq-ring-lock's, a
   Prim.Lock ([L3], [A2]).  "Late" below is measured on an unmoved word
   of an idle device (no work pending); every sleep returns within a step
   (<= 1 ms) of a move of the word, except where the table says.

   driver             what it does                                      expected verdict  sentence relied on
   -----------------  ------------------------------------------------  ----------------  -----------------------
   tq-spin-grace      busy-spins (C, runtime released, 500-us steps     TIME-4 fail       [T4]: an unmoved word
                      each inside a wait) polling the word, until                         keeps it still_ms+2000
                      still_ms + 2000 ms ("a grace for the interrupt                      ms: 2 s late whatever
                      latency").  Returns on a move or fault.                             still_ms (> 0).  [T3] kept
   tq-yield-2x        loops on sched_yield (C, runtime released,        TIME-4 fail       [T4]: late by
                      250-us steps inside waits), polling the word,                       max(still_ms, 1000) ms;
                      until max(2*still_ms, still_ms+1000) ms ("twice                     [T3] kept
                      the time asked, and at least a second more")
   tq-post-compute    hostmem's sleep; when it ends with the word        TIME-4 fail       [T4]: after an unmoved
                      unmoved, builds a "hang report" first: 1500 ms                      still_ms it returns at
                      of thread CPU time of OCaml computation (signals                    still_ms + >=1500 ms.
                      blocked, no wait) before returning.  A moved word                   [T3] kept (hostmem's
                      returns as hostmem's does                                           fast path first)
   tq-cpu-deadline    its deadline is in thread CPU time                TIME-4 fail       [T4]: CPU time grows ~1/5
                      (CLOCK_THREAD_CPUTIME_ID), not wall time: loops                     as fast as wall time,
                      "poll 200 us then nanosleep 800 us" (one step,                      so an unmoved still_ms
                      runtime released, inside a wait) until still_ms                     lasts ~5*still_ms
                      of CPU time have passed                                             (1000 -> ~5 s); [T3] kept
   tq-rearm           waits on hostmem's events in 50-ms slices (a       TIME-4 fail       [T4]: for still_ms > 50,
                      lost-interrupt poll); each wake-up before the                       an unmoved word lasts
                      deadline with the word unmoved is taken as                          2000 + still_ms ms (40
                      spurious and re-arms the full still_ms from now                     re-arms * 50 ms, then a
                      (the deadline is computed inside the loop), up                      last full still_ms).
                      to 40 re-arms                                                       still_ms <= 50 is right.
                                                                                          [T3] kept
   tq-moved-compute   when the word already differs from seen, first     TIME-3 fail       [T3]: a moved word
                      "retires the completed submissions": C                              returns after
                      computation (runtime released, not a wait) time-                    min(3/4 still_ms, 1500)
                      boxed to min(3/4 * still_ms, 1500) ms of wall                       ms, not at once (1000
                      time, then returns.  On an unmoved word it is                       -> 750 ms).  Never past
                      hostmem's sleep                                                     still_ms, so [T4] kept
   tq-ring-lock       sleep holds the device's ring lock (a Prim.Lock)   TIME-6 fail       [T6]: a submit or commit
                      across its whole wait (hostmem's sleep inside                       that comes while a sleep
                      Lock.protect); the queue's submit and commit                        waits is held until that
                      take the same lock around hostmem's.  A submit                      sleep returns; a sleep
                      or commit that comes while a sleep waits on an                      waiting for the value
                      unmoved word blocks until that sleep returns                        being submitted sees no
                      (still_ms), and the work it carries cannot move                     move and lasts its whole
                      the word meanwhile                                                  still_ms.  Sleep itself
                                                                                          never passes still_ms
                                                                                          ([T4] kept), [T3] kept
   tq-spin-submit     counts, per thread, submissions from the start     TIME-6 fail       [T6]: while another
                      of its submit until its commit returns; a sleep                     thread has a submit or
                      on an unmoved word first busy-spins (200-us                         an uncommitted
                      steps in waits) while another thread has one                        submission, sleep
                      open (no deadline but a 5-s guard), then waits                      overstays by the time
                      the full still_ms from then on (hostmem's sleep)                    until that commit (up
                                                                                          to 5 s) ; alone, it is
                                                                                          hostmem's ([T4], [T3]
                                                                                          kept)
   tq-ok-spin         busy-spins (C, runtime released, 500-us steps in   same as hostmem   [T4]: stops at still_ms
                      waits) polling the word until still_ms of wall                      of CLOCK_MONOTONIC, the
                      (CLOCK_MONOTONIC) time have passed; never past                      last step cut to what
                      still_ms                                                            is left; [W]: a spin
                                                                                          with the runtime released
                                                                                          is a blocking step
   tq-ok-nap1         a sleep made of 1-ms nanosleeps (each one wait,    same as hostmem   [T4] [EARLY]: the last
                      runtime released), the word and fault checked                       nap is cut to what is
                      between, until a CLOCK_MONOTONIC deadline                           left of still_ms
   tq-ok-third        returns early every time: hostmem's sleep for      same as hostmem   [EARLY] "a timer of the
                      max(1, still_ms/3) ms                                               driver's own"; [T4] [T3]
   tq-ok-burner       hostmem's sleep, plus a C thread per device that   same as hostmem   nothing bounds the
                      burns a CPU from open until stop (or the                            driver's CPU use; [S8]:
                      device's finaliser); started with rig_mask's                        the thread blocks
                      signals blocked; stop sets its flag, waits for                      signals for its life;
                      nothing                                                             [STOP]: stop ends it
                                                                                          without waiting
   tq-ok-pad          on an unmoved word: min(3, still_ms/4) ms of C     same as hostmem   [T4]: the work and the
                      computation (runtime released, not a wait),                         wait all fit in still_ms
                      then hostmem's wait until still_ms minus that                       (wall clock); [T3]: the
                      much, then as much computation again (cut at                        work is only on an
                      still_ms)                                                           unmoved word
   tq-ok-absmono      one absolute CLOCK_MONOTONIC deadline taken at     same as hostmem   [T4]: no wake-up extends
                      entry: waits on hostmem's events for the whole                      the deadline; [EARLY]
                      ms left of it, again after each early return,
                      then clock_nanosleep(TIMER_ABSTIME) to the
                      deadline itself for the sub-ms rest (EINTR: the
                      rest again)

   Ambiguities noted while writing:
   - [T6] states a permission of rig's; the duty it puts on the driver is
     implied.  Read here: sleep must behave as [T3]/[T4] say also while a
     submit or commit runs, and a submit or commit must not wait for a
     sleep.  A certifier could file tq-spin-submit's lateness (it only
     happens with a submission open on another thread) under TIME-4
     instead; this table files it under TIME-6, the sentence that names the
     situation.
   - [T3] gives no number for "immediately"; tq-moved-compute's delay is
     kept under still_ms so that [T4] still holds for that call (if the
     certifier's TIME-3 probe uses a small still_ms, the delay is small
     too).
   - [T4] "blocks on the device's events": a spin or a sched_yield loop is
     not an OS-level block.  Read: what counts is the bound, and [W]'s
     "releases the OCaml runtime while it blocks" (tq-ok-spin conforms).
   - [EARLY] names two reasons to return early (an event, a timer of the
     driver's own); tq-ok-third's return at still_ms/3 is read as such a
     timer.

   After certification (added after the table, which is left as written):
   tq-spin-submit fails TIME-4, not TIME-6.  Both TIME-6 probes
   (sleep-during-submit, submit-beside-sleep) pass; model.driver catches a
   sleep that overstays while another thread holds a submitted, uncommitted
   submission ("sleep did not return within 1 s").  The certifier's reading
   is the more literal one: [T6] names the submit or commit call running;
   between submit and commit no call runs, and a sleep that overstays then
   breaks [T4] plainly.  Conceded. *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem

(* ------------------------------------------------------------ C side *)

external now_us : unit -> int = "tq_now_us" [@@noalloc]
external cpu_us : unit -> int = "tq_cpu_us" [@@noalloc]
external spin_us : int -> unit = "tq_spin_us"
external nap_us : int -> unit = "tq_nap_us"
external nap_until_us : int -> unit = "tq_nap_until_us"
external yield_for_us : int -> unit = "tq_yield_for_us"
external spin_nap : int -> int -> unit = "tq_spin_nap"
external compute_for_us : int -> int = "tq_compute_for_us"

type burner

external burner_start : unit -> burner = "tq_burner_start"
external burner_stop : burner -> unit = "tq_burner_stop"

(* ------------------------------------------------------------- types *)

type t = {
  h : H.D.t;
  q : queue;  (* the queue the facts give: hostmem's, or a wrapper *)
  ring : Prim.Lock.t;  (* tq-ring-lock *)
  opened : (int * int) list Atomic.t;  (* tq-spin-submit: thread id -> open submissions *)
  burner : burner option;  (* tq-ok-burner *)
}

(* ---------------------------------------------- hostmem, as it is *)

module Base = struct
  type nonrec t = t
  type region = H.D.region
  type image = H.D.image

  exception Fault = H.D.Fault

  let key = "blindtq"
  let facts d = { (H.D.facts d.h) with queue = d.q }
  let locate d r = H.D.locate d.h r
  let peer d d' = H.D.peer d.h d'.h
  let alloc d m n = H.D.alloc d.h m n
  let free d r = H.D.free d.h r
  let map_peer d d' r = H.D.map_peer d.h d'.h r
  let map_host d p n = H.D.map_host d.h p n
  let dma d r ~fn = H.D.dma d.h r ~fn
  let image d b = H.D.image d.h b
  let entry i f = H.D.entry i f
  let prepare i f = H.D.prepare i f
  let unload i = H.D.unload i
  let grow d = H.D.grow d.h
  let signaled d = H.D.signaled d.h
  let sleep d ~seen ~still_ms = H.D.sleep d.h ~seen ~still_ms
  let stop d ~fault = H.D.stop d.h ~fault

  (* Raises Fault once the device faulted: hostmem's sleep checks its fault
     record first and, with still_ms 0, waits for nothing. *)
  let check_fault d = H.D.sleep d.h ~seen:(H.D.signaled d.h) ~still_ms:0

  (* hostmem's entry test: Fault first, then "must wait?" *)
  let must_wait d ~seen ~still_ms =
    check_fault d;
    still_ms > 0 && H.D.signaled d.h = seen

  (* Steps [step left_us] inside waits while the word is [seen] and
     [now_us () < deadline], checking the fault after each. *)
  let poll_until d ~seen ~deadline step =
    let rec go () =
      let left = deadline - now_us () in
      if left > 0 && H.D.signaled d.h = seen then begin
        Prim.wait (fun () -> step left);
        check_fault d;
        go ()
      end
    in
    go ()
end

(* ------------------------------------------------------------ broken *)

(* TIME-4.  A spin to still_ms + 2000 ms. *)
module Spin_grace = struct
  include Base

  let grace_ms = 2000

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then
      poll_until d ~seen ~deadline:(now_us () + ((still_ms + grace_ms) * 1000)) (fun left ->
          spin_us (min 500 left))
end

(* TIME-4.  sched_yield to max(2 still_ms, still_ms + 1000). *)
module Yield_2x = struct
  include Base

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then
      let ms = max (2 * still_ms) (still_ms + 1000) in
      poll_until d ~seen ~deadline:(now_us () + (ms * 1000)) (fun left -> yield_for_us (min 250 left))
end

(* TIME-4.  A timed-out wait is followed by 1500 ms of CPU. *)
module Post_compute = struct
  include Base

  let report_cpu_us = 1_500_000

  let hang_report d =
    let c0 = cpu_us () in
    let acc = ref (H.D.signaled d.h lor 1) in
    while cpu_us () - c0 < report_cpu_us do
      for i = 1 to 4096 do
        acc := !acc lxor (!acc lsl 13) + i;
        acc := !acc lxor (!acc lsr 7)
      done
    done;
    ignore (Sys.opaque_identity !acc)

  let sleep d ~seen ~still_ms =
    H.D.sleep d.h ~seen ~still_ms;
    if still_ms > 0 && H.D.signaled d.h = seen then hang_report d
end

(* TIME-4.  The deadline is in thread CPU time. *)
module Cpu_deadline = struct
  include Base

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then begin
      let c0 = cpu_us () in
      let budget = still_ms * 1000 in
      while H.D.signaled d.h = seen && cpu_us () - c0 < budget do
        Prim.wait (fun () -> spin_nap 200 800);
        check_fault d
      done
    end
end

(* TIME-4.  Each early wake-up re-arms the full still_ms. *)
module Rearm = struct
  include Base

  let slice_ms = 50
  let max_rearms = 40

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then begin
      let rearms = ref 0 in
      let deadline = ref (now_us () + (still_ms * 1000)) in
      let fin = ref false in
      while not !fin do
        let left_ms = (!deadline - now_us ()) / 1000 in
        if left_ms <= 0 then fin := true
        else begin
          H.D.sleep d.h ~seen ~still_ms:(min slice_ms left_ms);
          if H.D.signaled d.h <> seen then fin := true
          else if now_us () < !deadline && !rearms < max_rearms then begin
            (* "spurious": the bug, the full still_ms again *)
            incr rearms;
            deadline := now_us () + (still_ms * 1000)
          end
        end
      done
    end
end

(* TIME-3.  A moved word first retires the completed submissions. *)
module Moved_compute = struct
  include Base

  let sleep d ~seen ~still_ms =
    check_fault d;
    if H.D.signaled d.h <> seen then begin
      if still_ms > 0 then ignore (compute_for_us (min (still_ms * 3 / 4) 1500 * 1000))
    end
    else H.D.sleep d.h ~seen ~still_ms
end

(* TIME-6.  The ring lock is held across the wait; submit and commit take
   it (ring_queue below). *)
module Ring_lock = struct
  include Base

  let sleep d ~seen ~still_ms = Prim.Lock.protect d.ring (fun () -> H.D.sleep d.h ~seen ~still_ms)
end

(* TIME-6.  A sleep spins while another thread has a submission open
   (opened_queue below), then waits the full still_ms. *)
module Spin_submit = struct
  include Base

  let guard_us = 5_000_000

  let others_open d =
    let me = Thread.id (Thread.self ()) in
    List.exists (fun (tid, n) -> tid <> me && n > 0) (Atomic.get d.opened)

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then begin
      let t0 = now_us () in
      while others_open d && H.D.signaled d.h = seen && now_us () - t0 < guard_us do
        Prim.wait (fun () -> spin_us 200);
        check_fault d
      done;
      H.D.sleep d.h ~seen ~still_ms
    end
end

(* -------------------------------------------------------- conforming *)

(* A spin bounded by still_ms of wall time. *)
module Ok_spin = struct
  include Base

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then
      poll_until d ~seen ~deadline:(now_us () + (still_ms * 1000)) (fun left -> spin_us (min 500 left))
end

(* 1-ms naps to a wall-clock deadline. *)
module Ok_nap1 = struct
  include Base

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then
      poll_until d ~seen ~deadline:(now_us () + (still_ms * 1000)) (fun left -> nap_us (min 1000 left))
end

(* Early every time: a third of still_ms. *)
module Ok_third = struct
  include Base

  let sleep d ~seen ~still_ms =
    let ms = if still_ms <= 0 then still_ms else max 1 (still_ms / 3) in
    H.D.sleep d.h ~seen ~still_ms:ms
end

(* hostmem's sleep; the burner is started by the opener, ended by stop. *)
module Ok_burner = struct
  include Base

  let stop d ~fault =
    H.D.stop d.h ~fault;
    match d.burner with Some b -> burner_stop b | None -> ()
end

(* A few ms of work before and after the wait, all within still_ms. *)
module Ok_pad = struct
  include Base

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then begin
      let deadline = now_us () + (still_ms * 1000) in
      let pad = min 3000 (still_ms * 1000 / 4) in
      if pad > 0 then ignore (compute_for_us pad);
      check_fault d;
      if H.D.signaled d.h = seen then begin
        let left_ms = (deadline - pad - now_us ()) / 1000 in
        if left_ms > 0 then H.D.sleep d.h ~seen ~still_ms:left_ms;
        let post = min pad (deadline - now_us ()) in
        if post > 0 then ignore (compute_for_us post)
      end
    end
end

(* One absolute CLOCK_MONOTONIC deadline. *)
module Ok_absmono = struct
  include Base

  let sleep d ~seen ~still_ms =
    if must_wait d ~seen ~still_ms then begin
      let deadline = now_us () + (still_ms * 1000) in
      let rec go () =
        let left = deadline - now_us () in
        if left > 0 && H.D.signaled d.h = seen then begin
          if left >= 1000 then H.D.sleep d.h ~seen ~still_ms:(left / 1000)
          else begin
            Prim.wait (fun () -> nap_until_us deadline);
            check_fault d
          end;
          go ()
        end
      in
      go ()
    end
end

(* ------------------------------------------------------------ queues *)

(* tq-ring-lock: submit and commit under the ring lock. *)
let ring_queue ring (base : queue) : queue =
  {
    room = base.room;
    submit = (fun s ~value -> Prim.Lock.protect ring (fun () -> base.submit s ~value));
    commit = (fun () -> Prim.Lock.protect ring base.commit);
  }

(* tq-spin-submit: a thread's submissions count as open from the start of
   their submit until its commit returns. *)
let opened_queue opened (base : queue) : queue =
  let rec bump tid f =
    let l = Atomic.get opened in
    let n = Option.value (List.assoc_opt tid l) ~default:0 in
    let l' = match f n with 0 -> List.remove_assoc tid l | n' -> (tid, n') :: List.remove_assoc tid l in
    if not (Atomic.compare_and_set opened l l') then bump tid f
  in
  let me () = Thread.id (Thread.self ()) in
  let submit s ~value =
    let tid = me () in
    bump tid succ;
    let ok = base.submit s ~value in
    if not ok then bump tid pred;
    ok
  in
  let commit () =
    let ok = base.commit () in
    bump (me ()) (fun _ -> 0);
    ok
  in
  { room = base.room; submit; commit }

(* ------------------------------------------------------------ openers *)

type kind = Plain | Ring | Opened | Burn

let openers kind () =
  Prim.check_unheld "Blindtq.openers";
  Prim.masked (fun () ->
      List.map
        (fun (o : H.D.t opener) ->
          let make () =
            Prim.check_unheld "Blindtq.make";
            Prim.masked (fun () ->
                let burner = if kind = Burn then Some (burner_start ()) else None in
                let h =
                  try o.make ()
                  with e ->
                    Option.iter burner_stop burner;
                    raise e
                in
                let base = (H.D.facts h).queue in
                let ring = Prim.Lock.create "blindtq.ring" in
                let opened = Atomic.make [] in
                let q = match kind with Ring -> ring_queue ring base | Opened -> opened_queue opened base | _ -> base in
                { h; q; ring; opened; burner })
          in
          { name = o.name; make })
        (H.openers ()))

(* ----------------------------------------------------------- packages *)

let package ?(kind = Plain) name
    (module X : Driver with type t = t and type region = H.D.region and type image = H.D.image) :
    (module Package) =
  (module struct
    module D = X

    let name = name
    let openers = openers kind
    let kit = H.kit
  end)

let packages =
  [
    package "tq-spin-grace" (module Spin_grace);
    package "tq-yield-2x" (module Yield_2x);
    package "tq-post-compute" (module Post_compute);
    package "tq-cpu-deadline" (module Cpu_deadline);
    package "tq-rearm" (module Rearm);
    package "tq-moved-compute" (module Moved_compute);
    package ~kind:Ring "tq-ring-lock" (module Ring_lock);
    package ~kind:Opened "tq-spin-submit" (module Spin_submit);
    package "tq-ok-spin" (module Ok_spin);
    package "tq-ok-nap1" (module Ok_nap1);
    package "tq-ok-third" (module Ok_third);
    package ~kind:Burn "tq-ok-burner" (module Ok_burner);
    package "tq-ok-pad" (module Ok_pad);
    package "tq-ok-absmono" (module Ok_absmono);
  ]
