(* The calling thread's id and a signal to it; see self_thread.mli. *)

external gettid : unit -> int = "rig_self_thread_gettid"
external kill : int -> unit = "rig_self_thread_kill"
external kill_tid : int -> int -> unit = "rig_self_thread_kill_tid"

let tasks () =
  Sys.readdir "/proc/self/task" |> Array.to_list |> List.filter_map int_of_string_opt |> List.sort compare
