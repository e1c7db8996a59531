(* The binding of fuzz/room_grow_schedule.c (schedule_stubs.c); see schedule.mli. *)

type violation = { step : int; clause : string; message : string }

external c_run : string -> int -> bool -> (int * string * string) option = "caml_rig_schedule_run"
external c_mutant_code : string -> int = "caml_rig_schedule_mutant_code"
external c_mutant_name : int -> string option = "caml_rig_schedule_mutant_name"

let run ?(trace = false) ~mutant input =
  match c_run input mutant trace with
  | None -> Ok None
  | Some (step, clause, message) -> Ok (Some { step; clause; message })
  | exception Failure why -> Error why

let mutant_code name = match c_mutant_code name with -1 -> None | n -> Some n

let mutant_names =
  let rec from i = match c_mutant_name i with Some n -> n :: from (i + 1) | None -> [] in
  from 0
