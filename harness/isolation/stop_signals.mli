(** SIGINT, SIGTERM and SIGHUP in the certifier: caught with the pid of
    their sender, so that the certifier stops (and writes its report) when a
    person or a CI sends one, and not when a driver's process does: a
    driver that signals its parent or its group does not get to interrupt
    its own certification. *)

(** [install ()]: from now on these signals are caught (and SIGPIPE
    ignored); nothing happens until {!next} is asked. *)
val install : unit -> unit

(** [next ~ours]: the first caught signal whose sender is not one of the
    certifier's descendants ([ours pid]: a child it started; a process whose
    parents lead to the certifier is one too), as OCaml's signal number. *)
val next : ours:(int -> bool) -> int option

(** The exit code for a signal: 128 + its number (130 for SIGINT, 143 for
    SIGTERM, 129 for SIGHUP). *)
val exit_code : int -> int
