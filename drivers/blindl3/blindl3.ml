(* blindl3: hostmem (drivers/hostmem) with one function changed per driver,
   about LOCK-3, read with the Locks sentences around it (LOCK-1..LOCK-9),
   ASYNC-2 and rig_hold/rig_give/rig_holds of rig_edge.h and
   Rig_edge_primitives.  Written from spec/rig_edge_driver.txt, the
   interface (rig_edge.h, Rig_edge, Rig_edge_primitives, Rig_edge_registry)
   and hostmem alone, before any conformance tool ran on them.

   How it is built: every change is in OCaml or in a lock of the driver's
   own (blindl3_stubs.c: a C pthread mutex and the stubs that take it), none
   in hostmem's device state, so the drivers WRAP Hostmem's package: each D
   includes Hostmem.D and replaces one or two functions.  Each driver has a
   lock of its own, one for all its devices (a statistics table, a compile
   queue, an image cache, a device registry), and its alloc also touches
   that lock, correctly for the lock's kind, as real code that shares one
   table between its functions does.

   The sentences relied on:
   [L3] "A driver must count each lock it holds while OCaml code runs, or
         while a stub runs pending signal handlers, among the locks its
         thread holds, from before the take to after the give (rig_hold in
         rig_edge.h)."
   [H]  rig_edge.h: "rig_holds: The number of locks the calling thread holds
         while OCaml code may run"; "rig_hold/rig_give: Count a lock the
         calling thread is about to take (call right before the take) and
         uncount it (call right after the give).  LOCK-3."
   [P]  Rig_edge_primitives: "The lock count is per system thread and shared
         with C"; "[hold ()] counts a lock the thread is about to take;
         [give ()] uncounts one it just gave back (LOCK-3)."
   [S9] "A driver's OCaml code counts its locks and blocks signals through
         Rig_edge_primitives."
   [A2] "A driver must therefore take each lock it holds while OCaml code
         runs immediately before the handler that gives it back, with no
         allocation or call in between, and must give it back first in both
         the return and the raise, as Mutex.protect does."
   [L4] "Its functions that may take a lock and that rig calls without its
         own check, those of its capability, its opener's make and its own
         public functions, must start the same way: each must raise
         Invalid_argument, having changed nothing, while rig_holds () is not
         0."
   [L1] "rig calls a driver's functions but Driver.locate, Driver.peer and
         Driver.signaled on a thread that holds no lock of rig's, of a
         driver's or of an io library's."
   [D]  decisions.md, "How a lock held uncounted shows (LOCK-3)": "At an
         allocation where rig_holds () is 0, the same thread asks alloc of
         the same device: OCaml 5 mutexes refuse a re-take by their owner
         (Sys_error), a C mutex never returns".

   driver                 what it does                                       expected          sentence
   ---------------------  -------------------------------------------------  ----------------  --------
   l3-entry-cqueue        entry: a compile queue, a C pthread mutex taken    LOCK-3 fails      [L3] broken: a C lock held while
                          in a stub (blindl3_stubs.c) and held across        (only it)         OCaml code runs (the callback
                          caml_callback_exn into OCaml (Hostmem's entry,                       allocates: closure, Hashtbl), never
                          then Hashtbl.replace of the compile record);                         counted: rig_holds () is 0 inside.
                          nothing counted.  alloc bumps a counter under the                    [A2] kept: the stub gives it back
                          same mutex in pure C                                                 right after the callback returns
                                                                                               or raises, first
   l3-alloc-stats         alloc: a statistics table (Hashtbl of bytes per    LOCK-3 fails      [L3] broken: a Stdlib Mutex held
                          memory kind) under a Stdlib Mutex, Mutex.protect   (only it)         across Hashtbl.replace and boxing,
                          around Hashtbl.replace, uncounted.  free updates                     uncounted ([S9]: no Prim.hold).
                          the same table counted (Prim.hold before,                            [A2] kept: Mutex.protect
                          Prim.give after)
   l3-image-cache-late    image: an image cache (digests of refused          LOCK-3 fails      [L3] "from before the take": the
                          binaries) under a C mutex; the stub takes it,      (only it)         hold comes one step late, after an
                          calls an OCaml trace hook (Printf.sprintf into a                     OCaml callback that runs with the
                          log ring) and only then rig_hold, then the                           lock taken and rig_holds () = 0.
                          lookup/Hostmem image/insert callback, rig_give,                      [H] "right before the take"
                          unlock.  alloc bumps under the mutex in pure C
   l3-unload-early-give   unload: an image registry under a C mutex; the     LOCK-3 fails      [L3] "to after the give": rig_give
                          stub does rig_hold, take, callback (Hostmem                          one step early, before an OCaml log
                          unload, Hashtbl.remove), rig_give, then an OCaml   (only it)         callback that still runs under the
                          log hook callback, and only then unlock.  alloc                      lock.  [H] "right after the give"
                          bumps under the mutex in pure C
   l3-make-registry       the opener's make: after Hostmem's make, a device  LOCK-3 fails      [L3] broken in make (uncounted
                          registry (Hashtbl name -> id, and a Printf log     (only it)         Stdlib Mutex while OCaml runs).
                          line) under a Stdlib Mutex, Mutex.protect,                           [L4] kept: make checks rig_holds ()
                          uncounted.  alloc looks the device up in the                         first and blocks signals (masked)
                          registry, counted
   l3-grow-late-hold      grow: growth statistics under a Stdlib Mutex;      LOCK-3 fails      [L3] [P] the OCaml hold comes one
                          inside Mutex.protect an OCaml trace (Printf) runs  (only it)         step too late: the trace runs with
                          first, then Prim.hold, Hostmem's grow and the                        the mutex held and holds () = 0.
                          Hashtbl update (Prim.give in a Fun.protect                           [A2] kept: Mutex.protect
                          finally).  alloc takes the same mutex counted
   l3-ok-c-pure           alloc and free: live-bytes statistics under a C    conforms          [L3] "while OCaml code runs": the
                          pthread mutex taken and given inside one stub                        mutex is held only in pure C (no
                          that runs pure C only (the result is boxed after                     allocation, callback or pending
                          the give); nothing counted                                           handler while held), so there is
                                                                                               nothing to count.  [H] "may run"
   l3-ok-c-counted        entry and prepare: a compile queue, a C mutex      conforms          [L3] [H] counted from C: rig_hold
                          counted in the stub: rig_hold right before the                       right before the take, rig_give
                          take, rig_give right after the give, around a                        right after the give.  [A2] given
                          caml_callback_exn into OCaml (Hostmem's entry,                       back first on both paths.  CODE-6/7:
                          Hashtbl); prepare records the function as asked                      prepare starts nothing ("Doing
                          under the same counted lock and starts nothing                       nothing is a valid prepare")
   l3-ok-lockfree         image, make and stop: the image cache and a        conforms          [L3] no lock is held, so there is
                          device registry kept lock-free (immutable lists                      none to count; [L9] "A function that
                          in Atomic.t, compare_and_set retries); no lock                       takes no lock may be called from a
                          of the driver's own anywhere                                         callback at any point"
   l3-ok-mutex-counted    map_host, unload and grow: a Stdlib Mutex          conforms          [L3] [P] [S9] counted through
                          statistics table, counted with Prim.hold right                       Rig_edge_primitives from before the
                          before Mutex.protect and Prim.give right after                       take to after the give; [A2]
                          it, on the return and the raise                                      Mutex.protect
*)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem.D

(* ------------------------------------------------- the driver's C locks *)

type clock

external c_lock : unit -> clock = "l3_lock_create"
external c_bump : clock -> unit = "l3_bump"
external c_account : clock -> int -> int = "l3_account"
external c_count : clock -> int = "l3_count"
external c_uncounted : clock -> (unit -> 'a) -> 'a = "l3_locked_uncounted"
external c_counted : clock -> (unit -> 'a) -> 'a = "l3_locked_counted"
external c_late : clock -> (unit -> unit) -> (unit -> 'a) -> 'a = "l3_locked_late"
external c_early : clock -> (unit -> 'a) -> (unit -> unit) -> 'a = "l3_locked_early"
external c_held : clock -> bool = "l3_held"

(* For the author's check: a page of host memory for map_host. *)
external test_page : unit -> nativeint = "l3_test_page"

(* -------------------------------------------------------- shared helpers *)

(* A Stdlib Mutex counted from right before the take to right after the
   give, on both paths (LOCK-3 through Rig_edge_primitives, SIG-9); the take
   and give themselves are Mutex.protect's (ASYNC-2). *)
let counted m f =
  Prim.hold ();
  match Mutex.protect m f with
  | x ->
      Prim.give ();
      x
  | exception e ->
      Prim.give ();
      raise e

(* Whether a Stdlib Mutex is held (for the author's check): try_lock fails
   on a mutex held by any thread, its owner included. *)
let mutex_held m =
  if Mutex.try_lock m then begin
    Mutex.unlock m;
    false
  end
  else true

(* The drivers' log: the last lines, kept lock-free (no lock to count). *)
let log_ring : string list Atomic.t = Atomic.make []

let rec trace line =
  let old = Atomic.get log_ring in
  let keep = List.filteri (fun i _ -> i < 63) old in
  if not (Atomic.compare_and_set log_ring old (line :: keep)) then trace line

let log () = Atomic.get log_ring

let rec push a x =
  let old = Atomic.get a in
  if not (Atomic.compare_and_set a old (x :: old)) then push a x

let kind_name = function Device -> "device" | Mapped -> "mapped" | Pinned -> "pinned"

let bump tbl k n = Hashtbl.replace tbl k (n + Option.value ~default:0 (Hashtbl.find_opt tbl k))

(* hostmem's make, as its opener's: it checks rig_holds () and blocks
   signals itself (LOCK-4, SIG-6); the wrappers below check first too. *)
let default_make drv _name base () =
  Prim.check_unheld (drv ^ ".make");
  Prim.masked base

(* ---------------------------------------------------------- the drivers *)

(* What each driver is, for the package and for the author's check. *)
module type SPEC = sig
  val name : string

  module D : Driver with type t = H.t

  (* [make opener_name base] is the opener's make, over hostmem's. *)
  val make : string -> (unit -> H.t) -> unit -> H.t

  (* Whether the driver's own lock is held now (None: it has none). *)
  val held : (unit -> bool) option

  (* The driver functions the change is in. *)
  val changed : string list
  val broken : bool
end

(* -- broken -- *)

module Entry_cqueue : SPEC = struct
  let name = "l3-entry-cqueue"
  let q = c_lock ()
  let compiled : (string, int) Hashtbl.t = Hashtbl.create 16

  module D = struct
    include H

    let key = name

    let alloc d m n =
      c_bump q;
      H.alloc d m n

    (* The compile queue: held across the callback, uncounted. *)
    let entry i f =
      c_uncounted q (fun () ->
          let a = H.entry i f in
          bump compiled (Printf.sprintf "%s/%s" name f) 1;
          a)
  end

  let make = default_make name
  let held = Some (fun () -> c_held q)
  let changed = [ "entry" ]
  let broken = true
end

module Alloc_stats : SPEC = struct
  let name = "l3-alloc-stats"
  let m = Mutex.create ()
  let stats : (string, int) Hashtbl.t = Hashtbl.create 16

  module D = struct
    include H

    let key = name

    (* The statistics table under a Stdlib Mutex, uncounted. *)
    let alloc d mem n =
      let r = H.alloc d mem n in
      (match r with
      | Some _ ->
          Mutex.protect m (fun () -> bump stats (Printf.sprintf "%d/%s" (Hostmem.id d) (kind_name mem)) n)
      | None -> ());
      r

    let free d r =
      let n = (H.locate d r).size in
      H.free d r;
      counted m (fun () -> bump stats (Printf.sprintf "%d/freed" (Hostmem.id d)) n)
  end

  let make = default_make name
  let held = Some (fun () -> mutex_held m)
  let changed = [ "alloc" ]
  let broken = true
end

module Image_cache_late : SPEC = struct
  let name = "l3-image-cache-late"
  let c = c_lock ()
  let refused : (Digest.t, string) Hashtbl.t = Hashtbl.create 16

  module D = struct
    include H

    let key = name

    let alloc d m n =
      c_bump c;
      H.alloc d m n

    (* The cache's lock counted one step late: after the trace hook. *)
    let image d b =
      c_late c
        (fun () -> trace (Printf.sprintf "%s: image of %d bytes on device %d" name (String.length b) (Hostmem.id d)))
        (fun () ->
          let k = Digest.string b in
          match Hashtbl.find_opt refused k with
          | Some e -> Error e
          | None -> (
              match H.image d b with
              | Error e as r ->
                  Hashtbl.replace refused k e;
                  r
              | ok -> ok))
  end

  let make = default_make name
  let held = Some (fun () -> c_held c)
  let changed = [ "image" ]
  let broken = true
end

module Unload_early_give : SPEC = struct
  let name = "l3-unload-early-give"
  let c = c_lock ()
  let live = ref 0

  module D = struct
    include H

    let key = name

    let alloc d m n =
      c_bump c;
      H.alloc d m n

    let image d b =
      match H.image d b with
      | Ok _ as r ->
          c_counted c (fun () -> incr live);
          r
      | e -> e

    (* The registry's lock uncounted one step early: before the log hook. *)
    let unload i =
      c_early c
        (fun () ->
          H.unload i;
          decr live)
        (fun () -> trace (Printf.sprintf "%s: unloaded an image, %d live" name !live))
  end

  let make = default_make name
  let held = Some (fun () -> c_held c)
  let changed = [ "unload" ]
  let broken = true
end

module Make_registry : SPEC = struct
  let name = "l3-make-registry"
  let m = Mutex.create ()
  let registry : (string, int) Hashtbl.t = Hashtbl.create 16
  let allocs : (int, int) Hashtbl.t = Hashtbl.create 16

  module D = struct
    include H

    let key = name

    let alloc d mem n =
      counted m (fun () -> bump allocs (Hostmem.id d) 1);
      H.alloc d mem n
  end

  (* The device registry under a Stdlib Mutex, uncounted, in make. *)
  let make opener base () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = base () in
        Mutex.protect m (fun () ->
            Hashtbl.replace registry opener (Hostmem.id d);
            trace (Printf.sprintf "%s: opened %s as device %d" name opener (Hostmem.id d)));
        d)

  let held = Some (fun () -> mutex_held m)
  let changed = [ "make" ]
  let broken = true
end

module Grow_late_hold : SPEC = struct
  let name = "l3-grow-late-hold"
  let m = Mutex.create ()
  let growths : (string, int) Hashtbl.t = Hashtbl.create 16

  module D = struct
    include H

    let key = name

    let alloc d mem n =
      counted m (fun () -> bump growths (Printf.sprintf "%d/allocs" (Hostmem.id d)) 1);
      H.alloc d mem n

    (* The hold one step too late: after the trace, inside the take. *)
    let grow d =
      Mutex.protect m (fun () ->
          trace (Printf.sprintf "%s: grow on device %d" name (Hostmem.id d));
          Prim.hold ();
          Fun.protect ~finally:Prim.give (fun () ->
              let a = H.grow d in
              bump growths
                (Printf.sprintf "%d/%s" (Hostmem.id d) (match a with Grown -> "grown" | Short _ -> "short"))
                1;
              a))
  end

  let make = default_make name
  let held = Some (fun () -> mutex_held m)
  let changed = [ "grow" ]
  let broken = true
end

(* -- conforming -- *)

module Ok_c_pure : SPEC = struct
  let name = "l3-ok-c-pure"
  let c = c_lock ()

  module D = struct
    include H

    let key = name

    (* Live bytes, added and taken under a C mutex in pure C. *)
    let alloc d mem n =
      match H.alloc d mem n with
      | Some _ as r ->
          ignore (c_account c n);
          r
      | None -> None

    let free d r =
      let p = H.locate d r in
      H.free d r;
      if p.reach <> None then ignore (c_account c (-p.size))
  end

  let make = default_make name
  let held = Some (fun () -> c_held c)
  let changed = [ "alloc"; "free" ]
  let broken = false
end

module Ok_c_counted : SPEC = struct
  let name = "l3-ok-c-counted"
  let q = c_lock ()
  let asked : (string, unit) Hashtbl.t = Hashtbl.create 16
  let made : (string, int) Hashtbl.t = Hashtbl.create 16

  module D = struct
    include H

    let key = name

    let alloc d m n =
      c_bump q;
      H.alloc d m n

    (* The compile queue counted from C: rig_hold, take, callback, give,
       rig_give. *)
    let entry i f =
      c_counted q (fun () ->
          let a = H.entry i f in
          Hashtbl.remove asked f;
          (match a with Entry _ -> bump made (Printf.sprintf "%s/%s" name f) 1 | _ -> ());
          a)

    (* Records the ask and starts nothing (a valid prepare). *)
    let prepare _ f = c_counted q (fun () -> Hashtbl.replace asked f ())
  end

  let make = default_make name
  let held = Some (fun () -> c_held q)
  let changed = [ "entry"; "prepare" ]
  let broken = false
end

module Ok_lockfree : SPEC = struct
  let name = "l3-ok-lockfree"
  let refused : (Digest.t * string) list Atomic.t = Atomic.make []
  let opened : (string * int) list Atomic.t = Atomic.make []
  let stops = Atomic.make 0

  module D = struct
    include H

    let key = name

    let image d b =
      let k = Digest.string b in
      match List.assoc_opt k (Atomic.get refused) with
      | Some e -> Error e
      | None -> (
          match H.image d b with
          | Error e as r ->
              push refused (k, e);
              r
          | ok -> ok)

    let stop d ~fault =
      H.stop d ~fault;
      Atomic.incr stops
  end

  let make opener base () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = base () in
        push opened (opener, Hostmem.id d);
        d)

  let held = None
  let changed = [ "image"; "make"; "stop" ]
  let broken = false
end

module Ok_mutex_counted : SPEC = struct
  let name = "l3-ok-mutex-counted"
  let m = Mutex.create ()
  let stats : (string, int) Hashtbl.t = Hashtbl.create 16
  let note k n = counted m (fun () -> bump stats (Printf.sprintf "%s/%s" name k) n)

  module D = struct
    include H

    let key = name

    let alloc d mem n =
      note "allocs" 1;
      H.alloc d mem n

    let map_host d p n =
      let r = H.map_host d p n in
      note "mapped" n;
      r

    let unload i =
      H.unload i;
      note "unloaded" 1

    let grow d =
      let a = H.grow d in
      note (match a with Grown -> "grown" | Short _ -> "short") 1;
      a
  end

  let make = default_make name
  let held = Some (fun () -> mutex_held m)
  let changed = [ "map_host"; "unload"; "grow" ]
  let broken = false
end

(* ----------------------------------------------------------- packages *)

let specs : (module SPEC) list =
  [
    (module Entry_cqueue);
    (module Alloc_stats);
    (module Image_cache_late);
    (module Unload_early_give);
    (module Make_registry);
    (module Grow_late_hold);
    (module Ok_c_pure);
    (module Ok_c_counted);
    (module Ok_lockfree);
    (module Ok_mutex_counted);
  ]

let package (module S : SPEC) : (module Package) =
  (module struct
    module D = S.D

    let name = S.name

    let openers () =
      Prim.check_unheld (S.name ^ ".openers");
      Prim.masked (fun () ->
          List.mapi
            (fun i (o : H.t opener) ->
              let n = Printf.sprintf "%s%d" S.name i in
              { name = n; make = S.make n o.make })
            (Hostmem.openers ()))

    let kit = Hostmem.kit
  end)

let packages = List.map package specs
