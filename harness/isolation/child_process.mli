(** A child process of the certifier, isolated from it: its own process
    group (the terminal's Ctrl-C and a kill of the group reach it alone, and
    everything it starts there ends with it), stdin from /dev/null, stdout
    and stderr into one pipe kept bounded, a {!Channel} of its own, and a
    {!Call_trace} page.  Nothing it writes can be taken for a record, and
    nothing it does blocks the certifier. *)

type t

(** How a child ended. *)
type ended = Exited of int | Killed of int  (** OCaml's signal number *) | Stopped of int

(** [spawn ~prog ~args]: starts [prog] with [args] (argv.(0) is [prog]).
    [prog] "/proc/self/exe" with [argv0] starts this very program, also
    when its file was replaced since it started (a rebuild). *)
val spawn : ?argv0:string -> prog:string -> args:string list -> unit -> t

val pid : t -> int

(** The descriptors to wait on with [Unix.select] for this child. *)
val descriptors : t -> Unix.file_descr list

(** [drain c]: reads what is there now on the child's descriptors, never
    blocking. *)
val drain : t -> unit

(** [ended c]: how the child ended, or [None] while it runs.  Does not reap
    it. *)
val ended : t -> ended option

(** [finish c]: kills the child's process group (the child itself if it
    still runs), reaps it, reads what is left on its pipes and the call page,
    and closes them.  Answers how it ended ([None]: it was killed here). *)
val finish : t -> ended option

(** What was read on the channel (valid after [finish], or so far). *)
val records : t -> string list

(** Bytes on the channel that were not this child's records. *)
val foreign_bytes : t -> int

(** The calls in flight when it ended (after [finish]), or now (before). *)
val in_flight : t -> (int * (string * float) list) list

(** The driver functions it entered (after [finish]), or so far (before). *)
val entered : t -> string list

(** The start of what it wrote on stdout and stderr, and its end, each
    bounded; and how many bytes it wrote in all. *)
val output : t -> string * string * int

(** [last_lines c n]: its last [n] lines of output, joined by " | ". *)
val last_lines : t -> int -> string

(** {1 What a driver leaves behind} *)

(** [read_small path]: the first 4 KiB of a file, read without the 64-KiB
    buffer In_channel.input_all starts with (for the small /proc files read
    often); raises Unix_error as Unix.openfile does. *)
val read_small : string -> string

(** [stat_fields pid]: the fields of /proc/<pid>/stat after the command
    name, from the state (field 3) on; None once the process is gone. *)
val stat_fields : int -> string list option

(** [parent_and_group pid]: the parent and the process group of a process
    (from /proc), or [None] when it is gone. *)
val parent_and_group : int -> (int * int) option

(** [become_subreaper ()]: processes orphaned below the certifier are
    re-parented to it, not to init. *)
val become_subreaper : unit -> unit

(** [end_strays ~keep]: kills and reaps every child of the certifier that is
    not one of [keep] (pids of children it runs) nor in one of their process
    groups: what a driver started and left, re-parented here.  Repeats until
    none is found.  Answers how many it ended. *)
val end_strays : keep:int list -> int
