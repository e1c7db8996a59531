(* The calling thread's id and a signal to it; see self_thread.mli. *)

external gettid : unit -> int = "rig_self_thread_gettid"
external kill : int -> unit = "rig_self_thread_kill"
external kill_tid : int -> int -> unit = "rig_self_thread_kill_tid"
