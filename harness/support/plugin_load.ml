(* See plugin_load.mli. *)

let bracket_end = Atomic.make ignore
let registered = Atomic.make false
let started = Atomic.make []

(* A read may skip a thread that exits meanwhile; a thread the load
   started and that lives is in the read after it. *)
let tasks () = try Self_thread.tasks () with Sys_error _ -> []

let around load =
  if not (Atomic.exchange registered true) then at_exit (fun () -> (Atomic.get bracket_end) ());
  let before = tasks () in
  Fun.protect (fun () -> C_locks.around_load load) ~finally:(fun () ->
      let fresh = List.filter (fun t -> not (List.mem t before)) (tasks ()) in
      Atomic.set started (List.sort_uniq compare (fresh @ Atomic.get started)))

let loaded () = Atomic.get registered
let on_exit_bracket_end f = Atomic.set bracket_end f
let threads_started () = Atomic.get started
