(** [rig-conform sweep]: the fail-nth sweep alone (Fault_sweep) over the
    rig-side cases of the selected clauses; [rig-conform async-sweep]: an
    asynchronous exception at every allocation point and wait of the driver
    calls of the async.* cases (Async_inject, Async_cases). *)

val sweep : string list -> unit
val async_sweep : string list -> unit
