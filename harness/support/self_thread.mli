(** The calling thread as the kernel sees it: the signal probes and the
    rig-side flows send a signal to the thread itself, so that, where the
    thread's mask blocks it, it stays pending until that mask opens. *)

(** The calling thread's kernel id (gettid). *)
val gettid : unit -> int

(** [kill signo]: sends the OCaml signal number [signo] to the calling
    thread only (pthread_kill). *)
val kill : int -> unit

(** The kernel ids of this process's threads, sorted, from one read of
    /proc/self/task (which may skip a thread that exits meanwhile).
    Raises Sys_error where it cannot be read. *)
val tasks : unit -> int list

(** [kill_tid tid signo]: sends the OCaml signal number [signo] to the
    thread of this process whose kernel id is [tid] (tgkill). *)
val kill_tid : int -> int -> unit
