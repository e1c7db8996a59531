(** Checks of the edge primitives themselves (the [edge] clauses, which this
    project implements in harness/edge): a take of a held lock, or of rig's
    inside another, is refused having taken nothing (LOCK-7); the handlers
    of signals that came during a wait run before it masks again, so their
    exception ends the wait (SIG-4); a signal that came elsewhere in a call
    runs its handler at the call's next wait or once it returned (SIG-5).
    They do not depend on the driver. *)

val cases : Case.t list
