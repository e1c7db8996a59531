(* See c_locks.mli. *)

external before_load : unit -> unit = "rig_c_locks_before_load"
external after_load : unit -> unit = "rig_c_locks_after_load"
external watch_begin : unit -> unit = "rig_c_locks_watch_begin" [@@noalloc]
external watch_end : unit -> int = "rig_c_locks_watch_end" [@@noalloc]
external first_taken : unit -> string = "rig_c_locks_first_taken"

let around_load load =
  before_load ();
  Fun.protect load ~finally:after_load

let taken_in f =
  watch_begin ();
  let result = try Ok (f ()) with e -> Error e in
  let n = watch_end () in
  (result, n, if n > 0 then first_taken () else "")
