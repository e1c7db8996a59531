(** Asynchronous exceptions at every allocation point and at every wait
    (ASYNC-1, ASYNC-2), and
    calls from a callback at every allocation point (LOCK-5, LOCK-9): the
    rig-side flows of {!Scenarios}, run with {!Async_inject} between the
    validation layer and the driver (rig -> Validate -> Async_inject ->
    driver).  Each case is ["async." ^ flow].

    A plain run (certify, selftest) counts the allocations of every driver
    call with the probes on (locate, peer and signaled called from the
    Memprof callback at each allocation inside a call: an Invalid_argument
    or Sys_error from a lock re-take, a change of rig_holds, or a hang is
    LOCK-5; another exception is LOCK-9), reports that census as CALLS lines
    ["fn#nth"] (allocations) and ["wait:fn#nth"] (waits entered), then,
    in-process, raises an asynchronous exception at every allocation of the
    first call of each function, and from a SIGUSR2 handler at every wait
    of it, up to a bound.  A run with [--inject FN:NTH:async@N] (or
    [wait@N]) tries just that point.

    After each point: the thread's lock count must be 0 and a later run with
    nothing injected must end normally (ASYNC-2); the reference rig must
    have stopped every device and, where the word read the last value,
    freed every region and unloaded every image (ASYNC-1), and broken no
    rig clause the validation layer checks (a break is that clause's
    finding, its evidence naming the point).  A watchdog turns a hang into a
    finding. *)

val cases : Case.t list

(** Whether a case is one of these (takes [--inject FN:NTH:async@N] or
    [FN:NTH:wait@N]). *)
val is_async_case : string -> bool

(** [flow_of name]: the rig flow (Scenarios) an async case runs. *)
val flow_of : string -> string option

(** [points_of_census ~max_alloc calls]: every injection point of a census
    (the CALLS lines of a plain run), allocations and waits, at most
    [max_alloc] of each per call. *)
val points_of_census : max_alloc:int -> (string * int) list -> Async_inject.target list
