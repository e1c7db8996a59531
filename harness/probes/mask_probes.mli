(** Driver-side probes at every allocation point of a driver's calls and
    finalisers, and of the quiet of locate and peer: SIG-6, SIG-9, SIG-7,
    LOCK-3, LOCK-6.  Linux (signal masks); a Gc.Memprof profile at sampling
    rate 1.0 sees every allocation the probing thread makes inside a call,
    where a signal's handler (or an asynchronous exception) could run.

    - [probe.own-calls-masked] (SIG-6 and SIG-9): each function of the driver
      (capability, make, alloc, image, entry, prepare, sleep, free, unload,
      stop) is called first inside a counted lock of the probe's; one that
      raises Invalid_argument there starts with the check of rig_holds () and
      is called again from a thread with all signals unblocked.  SIG-6: such
      a call blocks rig_mask's signals for its run (the closures it
      allocates before its mask and what it allocates after giving it back
      are not judged; a call that never blocks them, or opens them between
      two blocked allocations outside a wait, is).  SIG-9: at no allocation
      is the thread's mask other than the one the primitives last left it
      with ({!Rig_edge_primitives.mask_as_left}).
    - [probe.SIG-7.finalisers-shielded]: devices and regions dropped without
      stop or free, then Gc.full_major from an unmasked thread: finalisers
      that allocate there without any rig_shield are a violation; a driver
      none of whose finalisers allocate is n/a.
    - [probe.SIG-7.exit-handlers-shielded]: the exit handlers the driver
      registers while its devices open, run by Stdlib.do_at_exit from an
      unmasked thread between two handlers of the probe's: allocations
      there without any rig_shield are a violation; none is n/a (a handler
      registered at the plugin's load is not reached).
    - [probe.locks-counted]: the same functions called as rig does;
      at each allocation inside them where rig_holds () is 0, the thread
      asks alloc (then free) of the same device: a lock of the driver's held
      there uncounted makes that take raise Sys_error (OCaml 5's mutexes
      refuse a re-take by their owner) or hang (the runner's timeout).
    - [probe.locate-peer-quiet]: locate and peer right after the opens,
      with work in flight, after the device's work faulted and after stop,
      inside a counted lock and outside: no counted lock taken, no wait
      entered ({!Rig_edge_primitives.activity}), no exception, no sleep of
      150 ms (the thread's schedstat) that two more calls like it confirm.
      A locate or peer that blocks for good ends as the runner's
      timeout. *)

val cases : Case.t list
