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
