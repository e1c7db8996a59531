(* blindsg: sg-* drivers, each hostmem (drivers/hostmem, its library
   rig_hostmem and its C stubs) wrapped with exactly one twist, about the
   clauses SIG-6, SIG-7, SIG-9, ASYNC-2, LOCK-5 and LOCK-9 of
   spec/clauses.tsv.  Written from spec/ and the public interface only.
   Every driver is hostmem's behaviour but for its twist: its functions
   call Hostmem.D's, its make and openers check rig_holds () and block
   signals through Rig_edge_primitives as hostmem's do, and it registers
   hostmem's kit and kit_more.

   Quotations are from spec/rig_edge_driver.txt.

   driver                 | what it does                                       | clause      | the sentence it breaks, or the words that allow it
   -----------------------+----------------------------------------------------+-------------+-----------------------------------------------------
   sg-split-mask          | make checks rig_holds (), then opens the device in | BREAKS      | "The driver's functions that start with the check of
                          | one Prim.masked helper and registers it in another,| SIG-6       | rig_holds () above block signals the same way for
                          | and formats its "opened" log line between the two, |             | their whole run."
                          | with the caller's signals open                     |             |
   sg-fin-unshielded      | each device gets a Gc.finalise that, once the      | BREAKS      | "Its finalisers and exit handlers block them with
                          | device is dropped, formats a log line of it (an    | SIG-7       | rig_shield, waits included, so that no signal's
                          | allocation) without Prim.shield                    |             | exception escapes them into the code they interrupt"
   sg-exit-unshielded     | its first open registers an at_exit handler that   | BREAKS      | "Its finalisers and exit handlers block them with
                          | lets busy devices finish (a sleep of up to 20 ms,  | SIG-7       | rig_shield, waits included, so that no signal's
                          | a wait) and logs them, without Prim.shield         |             | exception ... skips the exit handlers after them."
                          | (not shown by a certifier that never exits; shown  |             |
                          | by sgcheck in a child process that exits)          |             |
   sg-sigmask-direct      | make blocks the same signals rig_mask does (all    | BREAKS      | "A driver's OCaml code counts its locks and blocks
                          | but the fault signals) with Thread.sigmask, not    | SIG-9       | signals through Rig_edge_primitives."
                          | Prim.masked, and sets the old mask back the same   |             |
                          | way (its mask is right, its means are not)         |             |
   sg-flag-late-handler   | entry and unload serialise on a per-image compile  | BREAKS      | "A driver must therefore take each lock it holds
                          | lock (a busy flag under a primitive lock, counted  | ASYNC-2     | while OCaml code runs immediately before the handler
                          | with Prim.hold/give); the flag is set inside       |             | that gives it back, with no allocation or call in
                          | Prim.Lock.protect, and after that call returns     |             | between"
                          | entry formats a "holder" string (allocation) and   |             |
                          | only then enters the handler that gives it back:   |             |
                          | an exception in that stretch leaves the flag set   |             |
                          | for good (and, past the return, the count up)      |             |
   sg-locked-signaled     | signaled takes the device's stats lock (a          | BREAKS      | "Driver.locate, Driver.peer and Driver.signaled check
                          | Prim.Lock) to count the reads of the word          | LOCK-5      | nothing and must take no lock"
   sg-tls-place-cache     | locate keeps a one-entry cache per thread (region, | BREAKS      | "A function that takes no lock may be called from a
                          | place), which alloc primes with the new region:    | LOCK-9      | callback at any point."
                          | key and value are written with an allocation       |             |
                          | between them, so a locate from a callback there    |             |
                          | tears the cache and a later locate of that region  |             |
                          | answers another region's handle.  Thread-safe (one |             |
                          | cache per thread), lock-free, wrong only when      |             |
                          | re-entered from a callback                         |             |
   sg-fin-shielded        | each device gets a Gc.finalise that, inside        | conforming  | "Its finalisers and exit handlers block them with
                          | Prim.shield, lets a busy dropped device finish (a  |             | rig_shield, waits included": a wait and allocations
                          | sleep of up to 10 ms, a wait, when the thread      |             | inside rig_shield are allowed
                          | holds no lock) and logs it                         |             |
   sg-exit-shielded       | its first open registers an at_exit handler that,  | conforming  | same sentence: an exit handler that waits and
                          | inside Prim.shield, lets busy devices finish (a    |             | allocates inside rig_shield
                          | sleep of up to 20 ms) and logs them                |             |
   sg-helper-thread       | its first open starts, with Prim.spawn, a monitor  | conforming  | "A thread the driver starts blocks them for its life,
                          | thread that every 20 ms reads each live device's   |             | so that a signal sent to the process runs its handler
                          | word (no lock, no rig call) for a heartbeat; it    |             | on a thread of the program's."  Its sleeps are no
                          | sleeps with Thread.delay (releases the runtime)    |             | waits of a driver call: they unblock nothing
   sg-unchecked-openers   | openers takes no lock, so it does not check        | conforming  | "Its functions that may take a lock and that rig
                          | rig_holds () and does not block signals while it   |             | calls without its own check ... must start the same
                          | builds its list (make still checks and masks, as   |             | way": only those that may take a lock; SIG-6 binds
                          | hostmem's)                                         |             | only "functions that start with the check"
   sg-flag-lock           | entry and unload serialise on the same compile     | conforming  | "immediately before the handler that gives it back,
                          | lock as sg-flag-late-handler, but the handler is   |             | with no allocation or call in between, and must give
                          | in place before the take, which sets the busy flag |             | it back first in both the return and the raise, as
                          | and a "taken" mark with no allocation or call      |             | Mutex.protect does": no point where the lock is held
                          | between them; on both paths the give (a store) is  |             | without the handler; counted "through
                          | first, then the uncount, then the waiters' wake-up |             | Rig_edge_primitives" (Prim.hold/give, Prim.Lock)
                          | (a closure made with the image: no allocation)     |             |

   Why each broken driver breaks only its clause:
   - sg-split-mask's make still checks rig_holds () first, changes nothing
     before (LOCK-4), blocks the rig set through the primitives (SIG-9);
     only the stretch between its two masked helpers is open (SIG-6).
   - sg-fin-unshielded's finaliser takes no lock (a finaliser may run
     inside a lock), waits for nothing and calls nothing of rig's; it only
     allocates with signals as the interrupted code had them (SIG-7).
   - sg-exit-unshielded's handler is the shielded one's minus the shield.
   - sg-sigmask-direct's mask covers exactly the signals rig_mask blocks for
     make's whole run (SIG-6 is met in effect); only the means differ.
     One cause, one clause (spec/decisions.md: "A mask the primitives did
     not set is SIG-9, not SIG-6").
   - sg-flag-late-handler's compile lock is counted from before the take to
     after the give (LOCK-3), taken in one order (flag, then hostmem's
     image lock: LOCK-8) and given back first on both paths once the
     handler is in place; only the allocation between the take and the
     handler is wrong (ASYNC-2).  rig masks signals in entry, so the
     exception that finds the window comes from an allocation: a memprof
     or finaliser callback that raises, or Out_of_memory.
   - sg-locked-signaled's lock is a driver lock (not rig's, so taking it
     inside rig's lock is allowed by the primitives), held for an
     increment and a read with no allocation or wait inside, taken by
     nothing else: it never waits for long (TIME-1) and no order with
     another lock comes of it (LOCK-8).  locate and peer are hostmem's.
   - sg-tls-place-cache's locate takes no lock, blocks on nothing, faults
     on nothing (LOCK-6), and answers right whenever it is not re-entered;
     its cache is per thread, so threads never tear it: only a callback
     that runs at the allocation between the writes does (LOCK-9).

   Ambiguities (what the document left open, and what I decided):
   1. LOCK-4 "Its functions that may take a lock and that rig calls without
      its own check, those of its capability, its opener's make and its
      own public functions": read as restrictive ("that may take a lock"),
      the list naming which functions rig calls without its own check; a
      capability function that can take no lock need not check
      (sg-unchecked-openers; hostmem's own public functions, which take no
      lock, check nothing either).  The other reading (every capability
      function checks) would make sg-unchecked-openers break LOCK-4.
   2. SIG-6 binds "The driver's functions that start with the check":
      decided that a function without the check (sg-unchecked-openers'
      openers) need not block signals at all.
   3. ASYNC-2 "take each lock ... immediately before the handler": a
      handler installed before the take, that gives the lock back only if
      the take happened (sg-flag-lock), decided conforming: the sentence's
      aim ("An asynchronous exception ... can end any OCaml code") is that
      no point holds the lock without the handler, and the take and its
      mark are two stores with no allocation or call between them.
   4. What "a lock" is (LOCK-3, ASYNC-2): decided that a lock built of the
      primitives (a busy flag under a Prim.Lock, waited for with
      Prim.Lock.await, counted with Prim.hold/Prim.give) is a lock the
      driver holds while OCaml code runs, so ASYNC-2 applies to it, and
      that counting it with Prim.hold/give is "through
      Rig_edge_primitives" (SIG-9).  No stdlib Mutex is used anywhere,
      since SIG-9 may be read as "locks of the primitives only".
   5. LOCK-5 vs LOCK-6 / TIME-1: a lock taken in locate or peer "may block"
      (LOCK-6) too, so the LOCK-5 driver takes its lock in signaled, which
      LOCK-6 does not name; its lock is never held across a wait or an
      allocation, so it never blocks for long (TIME-1 "must not block").
      Whether a momentary contention is "blocking" is left open: I decided
      it is not.
   6. LOCK-9 "called from a callback at any point": decided that a callback
      is OCaml code the runtime runs at an allocation or poll point of
      whatever code runs (a signal handler, a finaliser, a memprof or GC
      alarm callback), also inside the driver's own lock-free functions;
      and that "may be called" means the call and the interrupted call
      both still answer right.  The Warning's "Another caller must call
      the functions of this signature only as rig does, holding no lock"
      is read as about functions that take a lock ("Nothing checks it
      before the call takes a lock").
   7. SIG-7 and SIG-2: a finaliser or exit handler without rig_shield lets
      a handler run at its allocations, outside any wait, which could be
      read as a SIG-2 break too.  Decided it is SIG-7's (the sentence that
      names finalisers and exit handlers), and the unshielded finaliser
      waits for nothing, so that no wait of it is judged under SIG-2.
   8. SIG-8 and SIG-2 for a driver thread: SIG-2's waits "call rig_unblock
      right before [the] blocking step", SIG-8's thread "blocks them for
      its life".  Decided the helper thread's sleeps (Thread.delay) are
      not waits of a driver call and unblock nothing.
   9. SIG-7 "waits included": decided that Prim.wait (hostmem's sleep)
      inside Prim.shield keeps signals blocked, as shield's interface says
      ("its waits included"), so a finaliser may call the driver's sleep
      inside it.  The shielded finaliser waits only when the thread holds
      no counted lock, since a finaliser may run inside one and nothing
      says a wait there is allowed.
  10. Starting a thread "at load": the helper thread is started at the
      driver's first open, not when the plugin loads, since the plugin
      holds twelve drivers and a thread started at load would run in the
      certification of every one of them.
  11. The exit handlers are not reached by a certifier whose runs end
      without the driver's process exiting normally (spec/decisions.md:
      "exit handlers, which run only as the process exits, are not");
      sg-exit-unshielded may then pass there: sgcheck shows its bug in a
      child process that exits.
  12. Finalisers of a device wrapper: whether rig drops a device without
      stop is unknown; the finalisers only read the device (busy, word)
      and sleep on it, never stop or free anything, since a device rig
      dropped may still have work or mappings of another device over its
      memory.
  13. sg-sigmask-direct's make ends with Thread.sigmask SIG_SETMASK, whose
      result (the mask it replaced, as a list) is allocated once the
      caller's mask is back: some 50 allocations with signals open after
      the last blocked one.  spec/decisions.md does not judge what comes
      after the last blocked allocation ("boxes its result after it"), and
      those allocations are the SIG-9 means themselves (the mask is not the
      one the primitives left: "A mask the primitives did not set is
      SIG-9, not SIG-6").  Decided: SIG-9 only.
  14. A lock counted from before the take (Prim.hold) while the thread
      still waits for it (Prim.Lock.await in the compile lock's take):
      LOCK-3 says "from before the take", so counting during the wait for
      it is what it asks.
  15. The compile lock's wake-up of waiters after the give: an exception
      there (only an allocation callback's can come, signals being masked)
      leaves the lock given back and uncounted, but may leave a waiter
      asleep until the next give.  Decided that ASYNC-2 asks for the give
      and the uncount on both paths, which hold; nothing bounds the
      wake-up of a waiter for a lock (hostmem's own waits are bounded by
      still_ms, these by the next entry).
  16. sg-locked-signaled's lock shows to a caller that takes signaled for
      lock-free (as the document says it is) and calls it from a callback
      inside signaled itself: the primitives refuse the re-take
      (Invalid_argument, which loses nothing for signaled).  Decided that
      this is LOCK-5's consequence, not a LOCK-9 break: LOCK-9 is about "A
      function that takes no lock", which this signaled is not. *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem.D

(* ---------------------------------------------------------------- log *)

(* The drivers' log: the last line any of them wrote.  An Atomic, so that
   writing it takes no lock (finalisers and exit handlers write it). *)
let last_log = Atomic.make ""
let log s = Atomic.set last_log s
let last_log () = Atomic.get last_log

(* -------------------------------------------------------- the device *)

type dev = {
  hm : H.t;
  dname : string;
  lk : Prim.Lock.t;  (* the device's stats lock (sg-locked-signaled) *)
  mutable reads : int;  (* reads of the word under lk *)
  heartbeat : int Atomic.t;  (* the helper thread's last look at the word *)
}

(* Devices alive, per driver, for the exit handlers and the helper thread:
   weak, so that the registry keeps none alive. *)
type registry = dev Weak.t list Atomic.t

let registry () : registry = Atomic.make []

let register_dev (reg : registry) d =
  let w = Weak.create 1 in
  Weak.set w 0 (Some d);
  let rec add () =
    let l = Atomic.get reg in
    let l' = w :: List.filter (fun w -> Weak.check w 0) l in
    if not (Atomic.compare_and_set reg l l') then add ()
  in
  add ()

let live (reg : registry) = List.filter_map (fun w -> Weak.get w 0) (Atomic.get reg)

(* A new device: hostmem's device k (0 or 1) under the opener name [name].
   Called inside the caller's mask. *)
let new_dev k name =
  let lk = Prim.Lock.create (name ^ ".stats") in
  let o = List.nth (Hostmem.openers ()) k in
  let hm = o.make () in
  { hm; dname = name; lk; reads = 0; heartbeat = Atomic.make (-1) }

(* hostmem's make: the check, then the whole run masked. *)
let std_make drv k name () =
  Prim.check_unheld (drv ^ ".make");
  Prim.masked (fun () -> new_dev k name)

let opener_names drv = [ drv ^ "0"; drv ^ "1" ]

(* hostmem's openers. *)
let std_openers drv make () =
  Prim.check_unheld (drv ^ ".openers");
  Prim.masked (fun () -> List.mapi (fun k n -> { name = n; make = make k n }) (opener_names drv))

(* Every function hostmem's, on the wrapped device: Base0 without the
   functions of images, Base with hostmem's. *)
module Base0 = struct
  type t = dev
  type region = H.region

  exception Fault = H.Fault

  let facts d = H.facts d.hm
  let locate d r = H.locate d.hm r
  let peer d d' = H.peer d.hm d'.hm
  let alloc d m n = H.alloc d.hm m n
  let free d r = H.free d.hm r
  let map_peer d d' r = H.map_peer d.hm d'.hm r
  let map_host d p n = H.map_host d.hm p n
  let dma d r ~fn = H.dma d.hm r ~fn
  let grow d = H.grow d.hm
  let signaled d = H.signaled d.hm
  let sleep d ~seen ~still_ms = H.sleep d.hm ~seen ~still_ms
  let stop d ~fault = H.stop d.hm ~fault
end

module Base = struct
  include Base0

  type image = H.image

  let image d b = H.image d.hm b
  let entry = H.entry
  let prepare = H.prepare
  let unload = H.unload
end

(* ===================================================== broken drivers *)

(* ------------------------------------------------ sg-split-mask (SIG-6) *)

module Split_mask = struct
  let name = "sg-split-mask"

  module D = struct
    include Base

    let key = name
  end

  (* Two helpers, each masking its own part; the glue between them, the
     log line, runs with the caller's signals open. *)
  let open_hw k = Prim.masked (fun () -> (List.nth (Hostmem.openers ()) k).make ())
  let finish name hm = Prim.masked (fun () ->
      { hm; dname = name; lk = Prim.Lock.create (name ^ ".stats"); reads = 0; heartbeat = Atomic.make (-1) })

  let make k n () =
    Prim.check_unheld (name ^ ".make");
    let hm = open_hw k in
    let line = Printf.sprintf "%s: opened %s as hostmem device %d" name n (Hostmem.id hm) in (* SIG-6: open *)
    log line;
    finish n hm

  let openers = std_openers name make
  let kit = Hostmem.kit
end

(* ------------------------------------------- sg-fin-unshielded (SIG-7) *)

let drop_line drv d = Printf.sprintf "%s: device %s dropped (busy %b, word %d)" drv d.dname (Hostmem.busy d.hm) (H.signaled d.hm)

module Fin_unshielded = struct
  let name = "sg-fin-unshielded"

  module D = struct
    include Base

    let key = name
  end

  (* SIG-7: no Prim.shield. *)
  let on_drop d = log (drop_line name d)

  let make k n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = new_dev k n in
        Gc.finalise on_drop d;
        d)

  let openers = std_openers name make
  let kit = Hostmem.kit
end

(* ---------------------------------------- exit handlers (sg-exit-* ) *)

(* Let each busy device of [reg] finish, for up to 20 ms (where the
   thread holds no lock), and log it. *)
let drain drv reg () =
  List.iter
    (fun d ->
      if Hostmem.busy d.hm && not (Hostmem.stopped d.hm) then begin
        if Prim.holds () = 0 then (try H.sleep d.hm ~seen:(H.signaled d.hm) ~still_ms:20 with H.Fault _ -> ());
        log (Printf.sprintf "%s: at exit, %s busy %b" drv d.dname (Hostmem.busy d.hm))
      end)
    (live reg)

module Exit_handler (X : sig
  val name : string
  val shielded : bool
end) =
struct
  let name = X.name

  module D = struct
    include Base

    let key = name
  end

  let reg = registry ()
  let registered = Atomic.make false

  let handler =
    if X.shielded then fun () -> Prim.shield (drain name reg) else drain name reg (* SIG-7 when not shielded *)

  let make k n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = new_dev k n in
        register_dev reg d;
        if Atomic.compare_and_set registered false true then at_exit handler;
        d)

  let openers = std_openers name make
  let kit = Hostmem.kit
end

module Exit_unshielded = Exit_handler (struct
  let name = "sg-exit-unshielded"
  let shielded = false
end)

(* -------------------------------------------- sg-sigmask-direct (SIG-9) *)

module Sigmask_direct = struct
  let name = "sg-sigmask-direct"

  module D = struct
    include Base

    let key = name
  end

  (* What rig_mask blocks: every signal but those a fault raises (Linux
     numbers: SIGILL 4, SIGTRAP 5, SIGABRT 6, SIGBUS 7, SIGFPE 8, SIGSEGV 11,
     SIGSYS 31), and but those no mask can hold (SIGKILL, SIGSTOP) or glibc
     keeps for itself (32, 33). *)
  let rig_set =
    List.filter (fun s -> not (List.mem s [ 4; 5; 6; 7; 8; 11; 31; 9; 19; 32; 33 ])) (List.init 64 (fun i -> i + 1))

  (* SIG-9: the mask set with Thread.sigmask, not with the primitives. *)
  let make k n () =
    Prim.check_unheld (name ^ ".make");
    let old = Thread.sigmask Unix.SIG_BLOCK rig_set in
    match new_dev k n with
    | d ->
        ignore (Thread.sigmask Unix.SIG_SETMASK old);
        d
    | exception e ->
        ignore (Thread.sigmask Unix.SIG_SETMASK old);
        raise e

  let openers = std_openers name make
  let kit = Hostmem.kit
end

(* ------------------------------------ the compile lock (sg-flag-* ) *)

(* A per-image compile lock: a busy flag under a primitive lock, waited for
   with Prim.Lock.await (a wait, in which a signal's handler may end the
   waiting call), counted with Prim.hold/Prim.give from before the take to
   after the give. *)
type fimage = {
  hi : H.image;
  mu : Prim.Lock.t;
  cv : Condition.t;
  wake : unit -> unit;  (* made with the image: waking waiters allocates nothing *)
  mutable busy : bool;  (* the compile lock: true while taken *)
  mutable holder : string;
}

let fimage d b =
  match H.image d.hm b with
  | Error e -> Error e
  | Ok hi ->
      let cv = Condition.create () in
      Ok { hi; mu = Prim.Lock.create "sg-flag.image"; cv; wake = (fun () -> Condition.broadcast cv); busy = false; holder = "" }

(* The give is its first step, a store: no allocation or call before it;
   then the uncount (Prim.give), then the waiters are woken, under the
   primitive lock so that none misses the store.  An exception that ends
   the wake leaves the lock given back and uncounted. *)
let release i =
  i.busy <- false;
  Prim.give ();
  Prim.Lock.protect i.mu i.wake

(* Conforming: the handler is in place before the take; the take (busy)
   and its mark (taken) are two stores with nothing between them. *)
let with_flag i f =
  let taken = ref false in
  Prim.hold ();
  match
    Prim.Lock.protect i.mu (fun () ->
        while i.busy do
          Prim.Lock.await i.mu i.cv
        done;
        i.busy <- true;
        taken := true);
    f ()
  with
  | v ->
      release i;
      v
  | exception e ->
      if !taken then release i else Prim.give ();
      raise e

(* ASYNC-2: the take, then an allocation (the holder's name), then the
   handler. *)
let with_flag_late i f =
  Prim.hold ();
  (match
     Prim.Lock.protect i.mu (fun () ->
         while i.busy do
           Prim.Lock.await i.mu i.cv
         done;
         i.busy <- true)
   with
  | () -> ()
  | exception e ->
      Prim.give ();
      raise e);
  i.holder <- Printf.sprintf "thread %d" (Thread.id (Thread.self ()));
  match f () with
  | v ->
      release i;
      v
  | exception e ->
      release i;
      raise e

module Flag_driver (X : sig
  val name : string
  val late : bool
end) =
struct
  let name = X.name

  module D = struct
    include Base0

    type image = fimage

    let key = name
    let image = fimage
    let locked i f = if X.late then with_flag_late i f else with_flag i f
    let entry i f = locked i (fun () -> H.entry i.hi f)
    let prepare i f = H.prepare i.hi f
    let unload i = locked i (fun () -> H.unload i.hi)
  end

  let make = std_make name
  let openers = std_openers name make
  let kit = Hostmem.kit
end

module Flag_late = Flag_driver (struct
  let name = "sg-flag-late-handler"
  let late = true
end)

(* ------------------------------------------- sg-locked-signaled (LOCK-5) *)

module Locked_signaled = struct
  let name = "sg-locked-signaled"

  module D = struct
    include Base

    let key = name

    (* LOCK-5: a lock in signaled. *)
    let signaled d =
      Prim.Lock.protect d.lk (fun () ->
          d.reads <- d.reads + 1;
          H.signaled d.hm)
  end

  let make = std_make name
  let openers = std_openers name make
  let kit = Hostmem.kit
end

(* ------------------------------------------ sg-tls-place-cache (LOCK-9) *)

module Tls_cache = struct
  let name = "sg-tls-place-cache"

  type cache = { mutable key : H.region option; mutable value : place }

  module IM = Map.Make (Int)

  (* One cache per thread, found without a lock. *)
  let caches : cache IM.t Atomic.t = Atomic.make IM.empty

  let my_cache () =
    let id = Thread.id (Thread.self ()) in
    match IM.find_opt id (Atomic.get caches) with
    | Some c -> c
    | None ->
        let c = { key = None; value = { handle = 0L; size = 0; reach = None } } in
        let rec add () =
          let m = Atomic.get caches in
          if not (Atomic.compare_and_set caches m (IM.add id c m)) then add ()
        in
        add ();
        c

  module D = struct
    include Base

    let key = name

    (* LOCK-9: the key is written, the place made (an allocation), the value
       written: a locate from a callback at that allocation leaves the key
       of its region beside the value of this one. *)
    let locate d r =
      let c = my_cache () in
      match c.key with
      | Some r' when r' == r -> c.value
      | _ ->
          c.key <- Some r;
          let p = H.locate d.hm r in
          c.value <- p;
          p

    (* rig locates a region right after it allocates it: prime the cache. *)
    let alloc d m n =
      match H.alloc d.hm m n with
      | None -> None
      | Some r as answer ->
          let c = my_cache () in
          c.key <- Some r;
          c.value <- H.locate d.hm r;
          answer
  end

  let make = std_make name
  let openers = std_openers name make
  let kit = Hostmem.kit
end

(* ================================================== conforming drivers *)

(* --------------------------------------------------- sg-fin-shielded *)

module Fin_shielded = struct
  let name = "sg-fin-shielded"

  module D = struct
    include Base

    let key = name
  end

  (* Shielded, waits included: a busy dropped device gets up to 10 ms to
     finish (only where the thread holds no lock), then a log line. *)
  let on_drop d =
    Prim.shield (fun () ->
        if Prim.holds () = 0 && Hostmem.busy d.hm && not (Hostmem.stopped d.hm) then
          (try H.sleep d.hm ~seen:(H.signaled d.hm) ~still_ms:10 with H.Fault _ -> ());
        log (drop_line name d))

  let make k n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = new_dev k n in
        Gc.finalise on_drop d;
        d)

  let openers = std_openers name make
  let kit = Hostmem.kit
end

(* -------------------------------------------------- sg-exit-shielded *)

module Exit_shielded = Exit_handler (struct
  let name = "sg-exit-shielded"
  let shielded = true
end)

(* -------------------------------------------------- sg-helper-thread *)

module Helper_thread = struct
  let name = "sg-helper-thread"

  module D = struct
    include Base

    let key = name
  end

  let reg = registry ()
  let started = Atomic.make false
  let beats = Atomic.make 0

  (* The monitor: reads each live device's word every 20 ms.  No lock, no
     rig call; Thread.delay releases the runtime while it sleeps. *)
  let rec monitor () =
    Thread.delay 0.02;
    List.iter (fun d -> Atomic.set d.heartbeat (H.signaled d.hm)) (live reg);
    Atomic.incr beats;
    monitor ()

  let make k n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = new_dev k n in
        register_dev reg d;
        if Atomic.compare_and_set started false true then ignore (Prim.spawn monitor);
        d)

  let openers = std_openers name make
  let kit = Hostmem.kit

  (* The library's own: takes no lock, checks nothing. *)
  let heartbeats () = List.map (fun d -> Atomic.get d.heartbeat) (live reg)
  let beats () = Atomic.get beats
end

(* ---------------------------------------------- sg-unchecked-openers *)

module Unchecked_openers = struct
  let name = "sg-unchecked-openers"

  module D = struct
    include Base

    let key = name
  end

  let make = std_make name

  (* Takes no lock: no check of rig_holds (), no mask. *)
  let openers () = List.mapi (fun k n -> { name = n; make = make k n }) (opener_names name)
  let kit = Hostmem.kit
end

(* ------------------------------------------------------- sg-flag-lock *)

module Flag_lock = Flag_driver (struct
  let name = "sg-flag-lock"
  let late = false
end)

(* ------------------------------------------------------------- all *)

(* name, expected verdict ("conforming" or the clause it breaks), package *)
let all : (string * string * (module Package)) list =
  [
    (Split_mask.name, "SIG-6", (module Split_mask));
    (Fin_unshielded.name, "SIG-7", (module Fin_unshielded));
    (Exit_unshielded.name, "SIG-7", (module Exit_unshielded));
    (Sigmask_direct.name, "SIG-9", (module Sigmask_direct));
    (Flag_late.name, "ASYNC-2", (module Flag_late));
    (Locked_signaled.name, "LOCK-5", (module Locked_signaled));
    (Tls_cache.name, "LOCK-9", (module Tls_cache));
    (Fin_shielded.name, "conforming", (module Fin_shielded));
    (Exit_shielded.name, "conforming", (module Exit_shielded));
    (Helper_thread.name, "conforming", (module Helper_thread));
    (Unchecked_openers.name, "conforming", (module Unchecked_openers));
    (Flag_lock.name, "conforming", (module Flag_lock));
  ]
