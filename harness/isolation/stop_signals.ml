(* The stop signals; see stop_signals.mli. *)

external install_raw : unit -> unit = "rig_iso_catch_stop_signals"
external next_raw : unit -> int * int = "rig_iso_next_stop_signal"

let install = install_raw

let parent_of pid = Option.map fst (Child_process.parent_and_group pid)

(* A descendant: one of ours, or a process whose parents lead here. *)
let descendant ~ours pid =
  let me = Unix.getpid () in
  let rec up p depth =
    depth > 0 && p > 1 && (p = me || ours p || match parent_of p with Some q -> up q (depth - 1) | None -> false)
  in
  pid <> me && (ours pid || match parent_of pid with Some q -> up q 64 | None -> false)

let rec next ~ours =
  match next_raw () with
  | 0, _ -> None
  | s, sender when sender > 0 && descendant ~ours sender -> ignore s; next ~ours
  | s, _ -> Some s

let exit_code s =
  if s = Sys.sigint then 130 else if s = Sys.sigterm then 143 else if s = Sys.sighup then 129 else 128 + 15
