(** [rig-conform run] by hand: the case runs in a child this process
    watches, as the certifier watches its children, so that replaying a
    hang ends with the call that hung named (and its clause), not with a
    process that waits for good and, every thread of its blocked in the
    driver, does not even answer SIGTERM.  A certifier's own children
    (which the certifier watches) are not watched again. *)

(** [fork_watched case]: in the child, returns (the case runs there); in
    this process, watches the child until it ends and exits: with the
    child's code; 1, after killing it, when a driver call has been in
    flight past its {!Runner.call_limit} (a [HUNG] record on stdout, the
    call and its clause on stderr), or when a signal killed it (named on
    stderr); 130
    or 143 when this process gets SIGINT or SIGTERM (the child killed).
    However it ends, what the driver started goes with it: the child leads
    a session of its own, killed whole, and this process is a subreaper
    that ends what was re-parented to it. *)
val fork_watched : Case.t -> unit
