(* The stop signals; see stop_signals.mli. *)

external install_raw : unit -> unit = "rig_iso_catch_stop_signals"
external next_raw : unit -> int * int = "rig_iso_next_stop_signal"

let install = install_raw

let parent_of pid =
  match In_channel.with_open_bin (Printf.sprintf "/proc/%d/stat" pid) In_channel.input_all with
  | s -> (
      match String.rindex_opt s ')' with
      | Some i -> (
          match String.split_on_char ' ' (String.sub s (i + 2) (String.length s - i - 2)) with
          | _ :: ppid :: _ -> int_of_string_opt ppid
          | _ -> None)
      | None -> None)
  | exception _ -> None

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
