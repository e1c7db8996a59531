(** Lock discipline and signal probes (driver side): LOCK-4, SIG-2, SIG-3,
    SIG-8.

    - [probe.LOCK-4.refused-in-lock]: the capability ([openers]) and each
      opener's [make], called while the thread holds a counted lock of the
      probe's ([Rig_edge_primitives.Lock.protect]), must raise
      Invalid_argument; a refused make must start no thread, and the same
      make outside the lock must still open.  Driver functions of the
      signature are not probed: the document's Warning says nothing checks
      them before they take a lock (rig calls them after its own check).
    - [probe.SIG-2.handler-in-waits]: each call runs inside rig's mask with
      SIGUSR1 sent to the calling thread first, so it stays pending there
      until the mask opens; its OCaml handler must run only inside a wait
      ({!Rig_edge_primitives.in_wait}) or once the call has returned.
    - [probe.SIG-3.wait-releases-runtime]: while [sleep] blocks on an idle
      device (still_ms 1 to 100, each measure after a sleep that saw the
      word move), its waits' steps must not keep the OCaml
      runtime.  It is judged on the time the sleeping thread held it inside
      its waits, as the runtime's blocking-section
      hooks show it ({!Rig_edge_primitives.time_in_waits}); where they
      cannot (or with RIG_CONFORM_SIG3_COUNTER=1, for the tests of that
      path), and for sleeps that block outside any wait, on the time
      another OCaml thread waited for the runtime, from the kernel's
      per-thread figures (schedstat); elsewhere, or with
      RIG_CONFORM_SIG3_PROXIES=1, on its turns and pauses against a free
      wait's.
    - [probe.SIG-3.busy-wait-releases-runtime]: the same sleeps with the
      kit's hang in flight, launched afresh before each measure (a step may
      keep the runtime only while work runs, or right after a submit), judged on the sleeping thread's hold inside its waits alone;
      n/a where the hooks are not the primitives'.
    - [probe.SIG-8.driver-threads-blocked]: every thread that appears in
      /proc/self/task while the devices open and run work must block (its
      SigBlk) every signal rig_mask blocks.

    Each case checks exactly one clause. *)

val cases : Case.t list
