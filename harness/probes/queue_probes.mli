(** Driver-side probes of the queue clauses: grow on one thread changes
    nothing another thread's room reads (QUEUE-1, three threads in a fixed
    order, then again with rooms not yet submitted holding the queues);
    after Grown, room must not answer RIG_GROW again for the same parts,
    whatever other threads' rooms and grows do, one of them answering Short
    included (QUEUE-2); after Short n, what grow made stays, so that n bytes
    more let it answer Grown (QUEUE-3).  The room/grow fuzzer (fuzz/) tries
    many more interleavings on the fake's C functions. *)

val cases : Case.t list
