(** A zygote: one process, started from this very program before any driver
    code is loaded, that makes the certifier's children by copying itself
    instead of executing the program anew (a run's start was mostly the
    runtime's and the modules' initialisation, about 10 ms of CPU each).

    Each child is still the certifier's own child (made with CLONE_PARENT),
    in a process group of its own, with exactly the descriptors, the
    environment and the directory an executed child gets, and the same
    dispositions and mask (the zygote was started the way children are and
    never changed them).  The zygote loads no plugin and starts no thread: a
    child loads its driver itself.  When the zygote cannot serve (not
    started, gone, or not alone in its process), {!spawn} answers [None] and
    the caller executes the program as before; [RIG_CONFORM_ZYGOTE=off]
    turns it off. *)

(** [spawn ~argv0 ~prog ~args ~env ~fds]: the pid of a child running this
    program with [args], environment [env] and [fds.(i)] as its descriptor
    [i + 1]; [None] when [prog] is not "/proc/self/exe" or there is no
    zygote to make it. *)
val spawn :
  argv0:string -> prog:string -> args:string list -> env:string array -> fds:Unix.file_descr array -> int option

(** The zygote's pid while it runs: a child of the certifier that is not a
    stray. *)
val pid : unit -> int option

(** [serve_if_asked ~warm ~run]: in a process started as the zygote, calls
    [warm ()] once, then serves requests and never returns (each child made
    calls [run args] and exits after it); elsewhere returns at once.  [warm]
    does, once for all children, work each would do the same way (it must
    start no thread and change nothing a child observes). *)
val serve_if_asked : warm:(unit -> unit) -> run:(string list -> unit) -> unit
