(** The calling thread as the kernel sees it: the signal probes and the
    rig-side flows send a signal to the thread itself, so that, where the
    thread's mask blocks it, it stays pending until that mask opens. *)

(** The calling thread's kernel id (gettid). *)
val gettid : unit -> int

(** [kill signo]: sends the OCaml signal number [signo] to the calling
    thread only (pthread_kill). *)
val kill : int -> unit

(** [kill_tid tid signo]: sends the OCaml signal number [signo] to the
    thread of this process whose kernel id is [tid] (tgkill). *)
val kill_tid : int -> int -> unit
