(* blinda2: a2-* drivers, each hostmem (drivers/hostmem, its library
   rig_hostmem and its C stubs) wrapped with exactly one twist, about how a
   driver takes and gives back the locks it holds while OCaml code runs,
   given that an asynchronous exception can end any OCaml code of the
   driver, also code already handling an earlier one: clause ASYNC-2 (and
   ASYNC-1 where it touches it) of spec/clauses.tsv.  Written from spec/
   and the public interface only.

   Every driver is hostmem's behaviour (Hostmem.D, included) but for its
   twist.  Its openers are hostmem's (they check rig_holds () and block
   signals as hostmem's do, LOCK-4, SIG-6); it registers hostmem's kit and
   kit_more.  The twist adds a table of the driver's own (live regions, a
   histogram, notes) guarded by a lock of the driver's own, taken in alloc,
   free or entry, functions rig calls holding no lock (LOCK-1), so none
   needs a check of its own.  Every lock held while OCaml code runs is
   counted (Prim.Lock, or Prim.hold right before Mutex.lock and Prim.give
   right after Mutex.unlock, LOCK-3); no lock is held across a wait; where
   two are nested they are always taken in one order (the driver's outer,
   then its inner or hostmem's image lock, LOCK-8).

   Quoted: ASYNC-2 "A driver must therefore take each lock it holds while
   OCaml code runs immediately before the handler that gives it back, with
   no allocation or call in between, and must give it back first in both
   the return and the raise, as Mutex.protect does."  ASYNC-1 "An
   asynchronous exception ... can end any OCaml code of the driver".
   LOCK-3 "A driver must count each lock it holds while OCaml code runs, or
   while a stub runs pending signal handlers, ... from before the take to
   after the give".

   driver                        | what it does                                   | clause     | the words it breaks, or that allow it
   ------------------------------+------------------------------------------------+------------+------------------------------------------
   a2-alloc-log-before-give      | alloc: hold+Mutex.lock, match ... with         | BREAKS     | "give it back first ... in the raise":
                                 | exception; the raise handler pushes (n, e) on  | ASYNC-2    | it allocates (a tuple, a cons) while
                                 | a failure list, then unlocks, gives, reraises  |            | the lock is taken
   a2-free-cleanup-before-give   | free: the raise handler calls the driver's     | BREAKS     | "give it back first": a call (which
                                 | cleanup forget k (drops the entry, notes it:   | ASYNC-2    | allocates) before the unlock
                                 | allocates), then unlocks                       |            |
   a2-entry-message-before-give  | entry: driver lock around Hostmem.D.entry; the | BREAKS     | "give it back first ... in the raise":
                                 | raise handler builds Printf.sprintf ... of     | ASYNC-2    | Printexc.to_string and sprintf run
                                 | Printexc.to_string e, then unlocks, stores it  |            | while the lock is taken
   a2-alloc-finally-stats        | alloc: hold+lock, then Fun.protect ~finally    | BREAKS     | "with no allocation or call in between"
                                 | whose finally updates statistics (Some (n,m):  | ASYNC-2    | (closures, the call of Fun.protect,
                                 | allocates), then unlocks and gives             |            | its get_raw_backtrace) and "give it
                                 |                                                |            | back first" (the statistics)
   a2-alloc-nested-outer-logs    | alloc: outer hand lock (live table), inner     | BREAKS     | "give it back first": the inner is
                                 | Prim.Lock.protect (histogram); the outer raise | ASYNC-2    | right, the outer allocates before its
                                 | handler Hashtbl.replace's the failure first    |            | unlock
   a2-alloc-tag-after-take       | alloc: hold+lock, then builds a tag            | BREAKS     | "immediately before the handler ...
                                 | (Printf.sprintf), then match ... with          | ASYNC-2    | with no allocation or call in between"
                                 | exception (which gives back first)             |            |
   a2-alloc-give-then-log        | a2-alloc-log-before-give's handler reordered:  | conforming | "give it back first": given, counted
                                 | unlock, give, then push (n, e), reraise        |            | off, then whatever it likes
   a2-entry-inner-log-reraise    | entry: Prim.Lock.protect (gives back first)    | conforming | the inner handler is not "the handler
                                 | around try Hostmem.D.entry i f with e -> note  |            | that gives it back"; an exception that
                                 | (sprintf, allocates); raise e                  |            | ends it reaches Lock.protect's, which
                                 |                                                |            | gives first (ambiguity 3)
   a2-journal-lock-c-only        | alloc/free note sizes in a byte journal: an    | conforming | "each lock it holds while OCaml code
                                 | uncounted Stdlib Mutex held only around        |            | runs": none runs while it is held, and
                                 | Bytes.unsafe_blit (caml_blit_bytes, noalloc C);|            | no stub runs signal handlers; the
                                 | stop snapshots it the same way                 |            | record is made before the take
   a2-mutex-protect-counted      | alloc/free: Prim.hold (); Mutex.protect m work | conforming | "as Mutex.protect does"; the count is
                                 | (closure made before the hold), Prim.give ()   |            | "from before the take to after the
                                 | after it on both paths                         |            | give", unlock first then give
   a2-alloc-undo-outside-lock    | alloc: Prim.Lock.protect around make+register; | conforming | the lock is back before the cleanup
                                 | a half-made region (made, not registered) is   |            | runs; ASYNC-1's second exception may
                                 | freed by the raise path outside the lock       |            | end the cleanup, not leave a lock
   a2-alloc-tag-before-take      | a2-alloc-tag-after-take with the sprintf moved | conforming | "immediately before the handler": the
                                 | before Prim.hold + Mutex.lock                  |            | allocation comes before the take
   a2-free-relock-in-handler     | free: unregisters under Prim.Lock.protect,     | conforming | a take inside a raise handler, after
                                 | frees outside; if the free raises, the handler |            | allocations, is still immediately
                                 | takes the lock again to re-register            |            | before its own handler
                                 | (allocating before that take), then reraises   |            |

   Why each breaks nothing else: the twist touches only the lock of the
   driver's own table and what runs around its take and give; the calls of
   Hostmem.D, their answers and their exceptions (Invalid_argument of
   entry's CODE-5, of a bad alloc or free) pass through unchanged (the
   handlers reraise the same exception); the counts go up right before each
   take and down right after each give, on both paths, so rig_holds () is
   back to what it was after every call; no wait inside any lock; locate,
   peer, signaled are hostmem's (no lock); openers and make are hostmem's.
   In particular: a2-alloc-finally-stats's Fun.protect reraises the same
   exception (Finally_raised only if its finally raised, which it does
   not); a2-journal-lock-c-only's stop still stops first and waits for no
   work (the snapshot is a 512-byte blit); a2-alloc-undo-outside-lock frees
   only a region its alloc did not return, which rig never sees (and the
   raise loses the device as hostmem's would, EXC-1);
   a2-free-relock-in-handler's second take is of the same lock, in no
   other lock, so the one order holds.

   Ambiguities resolved:
   1. "the handler that gives it back": for [match e with v -> .. |
      exception x -> ..] the handler is installed before e runs, so
      [Mutex.lock m; match e with ...] takes it immediately before.
   2. The count is not the lock: Prim.hold () comes right before the take
      and nothing (no allocation) between them either, so that no exception
      leaves a count without a lock; Prim.give () right after the unlock.
   3. "give it back first" is the first thing the handler that gives the
      lock back does; after the give the handler may allocate, log, call.
      A handler inside the locked body that does not give the lock back
      (a2-entry-inner-log-reraise) is OCaml code running under the lock
      like any other: ASYNC-1 may end it, and the exception then reaches
      the giving handler, which gives first.
   4. An allocation before the take (a2-alloc-tag-before-take) or in a raise
      handler before a later take (a2-free-relock-in-handler) is allowed:
      "in between" is only between the take and its handler.
   5. A lock held only around a noalloc C primitive (blit) is not held
      "while OCaml code runs": neither LOCK-3 nor ASYNC-2 apply to it.
      Mutex.lock may run pending handlers while contended, but before the
      take, and under rig's mask none is pending for the thread.
   6. Fun.protect is not "as Mutex.protect does": its call, its closures
      and its Printexc.get_raw_backtrace come between the take and the
      handler inside it, and its finally is not first.
   7. Where an asynchronous exception can come: on Linux signals run only
      at waits (SIG-2), but ASYNC-1 says "any OCaml code" (Out_of_memory,
      Windows, which runs handlers at any allocation): the broken drivers
      are broken whether or not a signal reaches their handler here.
   8. Hostmem's image lock taken inside a driver lock (entry drivers) is
      the inner of one order: nothing takes the driver lock inside it. *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem.D

external reraise : exn -> 'a = "%reraise"

let kit_more = Hostmem.kit_more

(* A region's key in a driver's table: the device and the region's handle. *)
let region_key d r = (Hostmem.id d, (H.locate d r).handle)

(* A hand-taken counted lock, right: counted right before the take, taken
   immediately before the handler, given back first on both paths. *)
let locked m f =
  Prim.hold ();
  Mutex.lock m;
  match f () with
  | v ->
      Mutex.unlock m;
      Prim.give ();
      v
  | exception e ->
      Mutex.unlock m;
      Prim.give ();
      reraise e

let register live d r n = match r with Some r -> Hashtbl.replace live (region_key d r) n | None -> ()

(* free through the driver's table under a hand-taken counted lock *)
let free_locked m live d r =
  let k = region_key d r in
  locked m (fun () ->
      H.free d r;
      Hashtbl.remove live k)

let openers name () =
  Prim.check_unheld (name ^ ".openers");
  Prim.masked (fun () -> Hostmem.openers ())

(* ---------------------------------------------------------- broken *)

module Alloc_log_before_give = struct
  let name = "a2-alloc-log-before-give"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64
    let failures : (int * exn) list ref = ref []

    let alloc d mem n =
      Prim.hold ();
      Mutex.lock m;
      match
        let r = H.alloc d mem n in
        register live d r n;
        r
      with
      | r ->
          Mutex.unlock m;
          Prim.give ();
          r
      | exception e ->
          (* the twist: the failure is recorded while the lock is taken *)
          failures := (n, e) :: !failures;
          Mutex.unlock m;
          Prim.give ();
          reraise e

    let free d r = free_locked m live d r
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Free_cleanup_before_give = struct
  let name = "a2-free-cleanup-before-give"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64
    let dropped : (int * int64) list ref = ref []

    (* the driver's cleanup of a region whose free failed *)
    let forget k =
      Hashtbl.remove live k;
      dropped := k :: !dropped

    let alloc d mem n =
      let r = H.alloc d mem n in
      locked m (fun () -> register live d r n);
      r

    let free d r =
      let k = region_key d r in
      Prim.hold ();
      Mutex.lock m;
      match
        H.free d r;
        Hashtbl.remove live k
      with
      | () ->
          Mutex.unlock m;
          Prim.give ()
      | exception e ->
          (* the twist: the cleanup is called before the unlock *)
          forget k;
          Mutex.unlock m;
          Prim.give ();
          reraise e
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Entry_message_before_give = struct
  let name = "a2-entry-message-before-give"

  module D = struct
    include H

    (* serialises the making of entries across the driver; hostmem's image
       lock is taken inside it, never the other way *)
    let m = Mutex.create ()
    let made = ref 0
    let last_error = ref ""

    let entry i f =
      Prim.hold ();
      Mutex.lock m;
      match
        let a = H.entry i f in
        incr made;
        a
      with
      | a ->
          Mutex.unlock m;
          Prim.give ();
          a
      | exception e ->
          (* the twist: the message is built before the unlock *)
          let msg = Printf.sprintf "%s: entry %S failed: %s" name f (Printexc.to_string e) in
          Mutex.unlock m;
          Prim.give ();
          last_error := msg;
          reraise e
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Alloc_finally_stats = struct
  let name = "a2-alloc-finally-stats"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64
    let calls = ref 0
    let last : (int * memory) option ref = ref None

    let alloc d mem n =
      Prim.hold ();
      Mutex.lock m;
      (* the twist: Fun.protect, whose finally first updates statistics *)
      Fun.protect
        ~finally:(fun () ->
          incr calls;
          last := Some (n, mem);
          Mutex.unlock m;
          Prim.give ())
        (fun () ->
          let r = H.alloc d mem n in
          register live d r n;
          r)

    let free d r = free_locked m live d r
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Alloc_nested_outer_logs = struct
  let name = "a2-alloc-nested-outer-logs"

  module D = struct
    include H

    let m = Mutex.create ()  (* outer: the live table *)
    let hist_lock = Prim.Lock.create (name ^ ".hist")  (* inner: the histogram *)
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64
    let hist : (int, int) Hashtbl.t = Hashtbl.create 16
    let failed : (int, string) Hashtbl.t = Hashtbl.create 16

    let alloc d mem n =
      Prim.hold ();
      Mutex.lock m;
      match
        let r = H.alloc d mem n in
        register live d r n;
        Prim.Lock.protect hist_lock (fun () ->
            Hashtbl.replace hist n (1 + Option.value ~default:0 (Hashtbl.find_opt hist n)));
        r
      with
      | r ->
          Mutex.unlock m;
          Prim.give ();
          r
      | exception e ->
          (* the twist: the outer handler records the failure first *)
          Hashtbl.replace failed n (Printexc.to_string e);
          Mutex.unlock m;
          Prim.give ();
          reraise e

    let free d r = free_locked m live d r
  end

  let openers = openers name
  let kit = Hostmem.kit
end

let mem_name = function Device -> "Device" | Mapped -> "Mapped" | Pinned -> "Pinned"

module Alloc_tag_after_take = struct
  let name = "a2-alloc-tag-after-take"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, string) Hashtbl.t = Hashtbl.create 64

    let alloc d mem n =
      Prim.hold ();
      Mutex.lock m;
      (* the twist: an allocation between the take and the handler *)
      let tag = Printf.sprintf "%d bytes of %s" n (mem_name mem) in
      match
        let r = H.alloc d mem n in
        register live d r tag;
        r
      with
      | r ->
          Mutex.unlock m;
          Prim.give ();
          r
      | exception e ->
          Mutex.unlock m;
          Prim.give ();
          reraise e

    let free d r = free_locked m live d r
  end

  let openers = openers name
  let kit = Hostmem.kit
end

(* ------------------------------------------------------ conforming *)

module Alloc_give_then_log = struct
  let name = "a2-alloc-give-then-log"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64
    let failures : (int * exn) list ref = ref []

    let alloc d mem n =
      Prim.hold ();
      Mutex.lock m;
      match
        let r = H.alloc d mem n in
        register live d r n;
        r
      with
      | r ->
          Mutex.unlock m;
          Prim.give ();
          r
      | exception e ->
          Mutex.unlock m;
          Prim.give ();
          (* given back and counted off: now the record *)
          failures := (n, e) :: !failures;
          reraise e

    let free d r = free_locked m live d r
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Entry_inner_log_reraise = struct
  let name = "a2-entry-inner-log-reraise"

  module D = struct
    include H

    let l = Prim.Lock.create (name ^ ".entries")
    let notes : string list ref = ref []

    let entry i f =
      Prim.Lock.protect l (fun () ->
          try H.entry i f
          with e ->
            (* under the lock: allocates, then raises the same exception to
               Lock.protect's handler, which gives the lock back first *)
            notes := Printf.sprintf "%s: entry %S: %s" name f (Printexc.to_string e) :: !notes;
            raise e)
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Journal_lock_c_only = struct
  let name = "a2-journal-lock-c-only"

  module D = struct
    include H

    (* The last 64 sizes alloc made (positive) and free gave back
       (negative), 8 bytes each, for a debugger.  jm is held only around
       caml_blit_bytes, a noalloc C primitive: no OCaml code runs, no
       allocation, no poll while it is held, so it is not counted. *)
    let journal = Bytes.make (64 * 8) '\000'
    let jm = Mutex.create ()
    let slot = Atomic.make 0
    let snapshot = ref Bytes.empty

    let note n =
      let rc = Bytes.create 8 in
      Bytes.set_int64_le rc 0 (Int64.of_int n);
      let off = Atomic.fetch_and_add slot 1 land 63 * 8 in
      Mutex.lock jm;
      Bytes.unsafe_blit rc 0 journal off 8;
      Mutex.unlock jm

    let alloc d mem n =
      let r = H.alloc d mem n in
      (match r with Some _ -> note n | None -> ());
      r

    let free d r =
      let n = (H.locate d r).size in
      H.free d r;
      note (-n)

    let stop d ~fault =
      H.stop d ~fault;
      let snap = Bytes.create (64 * 8) in
      Mutex.lock jm;
      Bytes.unsafe_blit journal 0 snap 0 (64 * 8);
      Mutex.unlock jm;
      snapshot := snap
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Mutex_protect_counted = struct
  let name = "a2-mutex-protect-counted"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64

    (* work is made by the caller, before the count goes up *)
    let counted_protect work =
      Prim.hold ();
      match Mutex.protect m work with
      | v ->
          Prim.give ();
          v
      | exception e ->
          Prim.give ();
          reraise e

    let alloc d mem n =
      let work () =
        let r = H.alloc d mem n in
        register live d r n;
        r
      in
      counted_protect work

    let free d r =
      let k = region_key d r in
      let work () =
        H.free d r;
        Hashtbl.remove live k
      in
      counted_protect work
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Alloc_undo_outside_lock = struct
  let name = "a2-alloc-undo-outside-lock"

  module D = struct
    include H

    let l = Prim.Lock.create (name ^ ".live")
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64

    let alloc d mem n =
      let made = ref None and kept = ref false in
      match
        Prim.Lock.protect l (fun () ->
            let r = H.alloc d mem n in
            made := r;
            register live d r n;
            kept := true;
            r)
      with
      | r -> r
      | exception e ->
          (* the lock is back: free a region made but not registered *)
          (match !made with Some r when not !kept -> ( try H.free d r with _ -> ()) | _ -> ());
          reraise e

    let free d r =
      let k = region_key d r in
      Prim.Lock.protect l (fun () ->
          H.free d r;
          Hashtbl.remove live k)
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Alloc_tag_before_take = struct
  let name = "a2-alloc-tag-before-take"

  module D = struct
    include H

    let m = Mutex.create ()
    let live : (int * int64, string) Hashtbl.t = Hashtbl.create 64

    let alloc d mem n =
      let tag = Printf.sprintf "%d bytes of %s" n (mem_name mem) in
      Prim.hold ();
      Mutex.lock m;
      match
        let r = H.alloc d mem n in
        register live d r tag;
        r
      with
      | r ->
          Mutex.unlock m;
          Prim.give ();
          r
      | exception e ->
          Mutex.unlock m;
          Prim.give ();
          reraise e

    let free d r = free_locked m live d r
  end

  let openers = openers name
  let kit = Hostmem.kit
end

module Free_relock_in_handler = struct
  let name = "a2-free-relock-in-handler"

  module D = struct
    include H

    let l = Prim.Lock.create (name ^ ".live")
    let live : (int * int64, int) Hashtbl.t = Hashtbl.create 64

    let alloc d mem n =
      let r = H.alloc d mem n in
      Prim.Lock.protect l (fun () -> register live d r n);
      r

    let free d r =
      let k = region_key d r in
      let size =
        Prim.Lock.protect l (fun () ->
            let s = Hashtbl.find_opt live k in
            Hashtbl.remove live k;
            s)
      in
      match H.free d r with
      | () -> ()
      | exception e ->
          (* the region is still the device's: register it again, taking
             the lock anew inside this handler *)
          (match size with Some s -> Prim.Lock.protect l (fun () -> Hashtbl.replace live k s) | None -> ());
          reraise e
  end

  let openers = openers name
  let kit = Hostmem.kit
end

let all : (module Rig_edge.Package) list =
  [
    (module Alloc_log_before_give);
    (module Free_cleanup_before_give);
    (module Entry_message_before_give);
    (module Alloc_finally_stats);
    (module Alloc_nested_outer_logs);
    (module Alloc_tag_after_take);
    (module Alloc_give_then_log);
    (module Entry_inner_log_reraise);
    (module Journal_lock_c_only);
    (module Mutex_protect_counted);
    (module Alloc_undo_outside_lock);
    (module Alloc_tag_before_take);
    (module Free_relock_in_handler);
  ]
