(** The lock functions (pthread_mutex_lock, its try and timed forms, rwlocks,
    spin locks, C11 mtx_*, semaphores' waits) that a plugin's own C code
    calls, counted per thread while the thread watches.  LOCK-5's probe
    watches locate, peer and signaled: a C lock those take and give within
    a few instructions is never contended in a run, so it shows nowhere
    else.

    {!around_load} redirects the calls of the objects the plugin's load
    brought in (the plugin and the libraries it needs); the program's own
    code (the OCaml runtime, the harness, a driver linked into the program)
    is never counted. *)

(** [around_load load]: runs [load ()], then redirects the lock calls of
    every object that appeared meanwhile. *)
val around_load : (unit -> 'a) -> 'a

(** [taken_in f]: [f ()]'s result (or exception), with the number of lock
    calls the redirected code made on this thread meanwhile and the name of
    the first. *)
val taken_in : (unit -> 'a) -> ('a, exn) result * int * string
