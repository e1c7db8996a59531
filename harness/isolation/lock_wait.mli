(** Whether a thread of a child waits for good on a pthread mutex: it
    sleeps in the kernel on the mutex's futex, and the mutex's owner is the
    thread itself, or a thread that waits for good in turn (a cycle).

    That lets a hang of a call that deadlocked be reported as soon as it is
    certain, where a call that is only slow is given its whole bound.  It
    reads /proc/[pid]/task/[tid]/syscall, its status and /proc/[pid]/mem, so
    it needs to be the child's ancestor or root, and it knows glibc's
    mutex layout on Linux x86-64 (the lock word, then the owner's tid at
    byte 8; in a child the zygote made, the main thread's locks name the
    zygote); anywhere it cannot read or the layout does not match, it
    answers [false] and the bound stands. *)

(** [forever ~pid tid]: [true] only when [tid] of process [pid] waits on a
    mutex whose chain of owners comes back on itself, and no thread of the
    chain woke while it was read (its voluntary context switches and its
    syscall unchanged from before to after). *)
val forever : pid:int -> int -> bool
