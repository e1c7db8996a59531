(* Cases and findings; see case.mli. *)

type finding = { clause : string; detail : string; timing : bool }
type result = Ran of finding list | Not_applicable of string

type t = {
  name : string;
  clauses : string list;
  run : (module Rig_edge.Package) -> seed:int -> result;
}

let finding clause fmt = Printf.ksprintf (fun detail -> { clause; detail; timing = true }) fmt
let value_finding clause fmt = Printf.ksprintf (fun detail -> { clause; detail; timing = false }) fmt

let expect acc clause cond fmt =
  Printf.ksprintf (fun detail -> if not cond then acc := { clause; detail; timing = true } :: !acc) fmt

let injecting = ref false
let counting = ref false
let calls = ref []
let report_calls tally = calls := tally
let reported_calls () = !calls
let unjudged = ref []
let report_unjudged l = unjudged := l
let reported_unjudged () = !unjudged
