(** How many of the machine's cores were idle lately, read from /proc/stat.

    The runner starts runs beyond its [-j] while the machine has cores to
    spare: most runs of a certification only wait (a hang bound, a hold, a
    sleep), and a core that waits certifies nothing.  The measure is the
    whole machine's, not the runner's children alone, so that other work on
    it (a second certification, a test suite) takes the spare cores first. *)

type t

(** A meter whose first window starts now. *)
val create : unit -> t

(** [busy m]: the number of cores that were busy on average since the last
    call (or since [create]), and starts a new window; [None] when the
    window is shorter than [min_window] seconds (then the window goes on) or
    /proc/stat cannot be read (then no core is ever taken for spare). *)
val busy : ?min_window:float -> ?own_cpu:(unit -> float) -> t -> float option

(** [others_busy m]: of the cores busy in the last window [busy] closed,
    those the caller's own children did not keep busy (their CPU seconds,
    [own_cpu ()] at that window's start and end, as {!children_cpu} gives
    them); None unless both ends were given. *)
val others_busy : t -> float option

(** [children_cpu ~running]: the CPU seconds so far of this process's
    children: those it waited for, and those still [running] (their pids),
    read from /proc. *)
val children_cpu : running:int list -> float

(** The cores this process may run on (its affinity, as nproc counts them),
    at least 1. *)
val count : unit -> int

(** The machine's cores, all of them: what [busy] counts in. *)
val machine_cores : t -> int
