(** Driver-side probes of the queue clauses a single thread can observe:
    after Grown, room must not answer RIG_GROW again for the same parts
    (QUEUE-2); after Short n, what grow made stays, so that n bytes more
    let it answer Grown (QUEUE-3).  The interleavings of several threads
    (QUEUE-1) are the fuzzer's. *)

val cases : Case.t list
