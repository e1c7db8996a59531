(* See load_exit_bracket.mli. *)

let reached = Atomic.make ignore
let done_ = Atomic.make false

let before_load () =
  if not (Atomic.exchange done_ true) then at_exit (fun () -> (Atomic.get reached) ())

let registered () = Atomic.get done_
let on_reached f = Atomic.set reached f
