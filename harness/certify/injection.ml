(* Injections; see injection.mli. *)

type t = { fn : string; nth : int; kind : string }

(* The failure each function can answer instead of raising, by the name a
   replay line gives it. *)
let answers =
  [ ("alloc", "none"); ("dma", "error"); ("image", "error"); ("entry", "no_memory"); ("grow", "short");
    ("sleep", "early"); ("room", "grow") ]

let kinds = [ "fault"; "raise"; "fail" ] @ List.sort_uniq compare (List.map snd answers)

let answer_of fn = List.assoc_opt fn answers

(* The driver functions a failure can be injected into (those of the fake
   driver's injection).  Any counted call may raise Fault; another exception
   may escape any OCaml function (and must lose the device only from EXC-1's
   list); the C functions fail by answering non-zero. *)
let injectable =
  [ "alloc"; "free"; "map_peer"; "map_host"; "dma"; "image"; "entry"; "prepare"; "grow"; "signaled"; "sleep";
    "unload"; "reach" ]

let kinds_for fn =
  let answer = Option.to_list (answer_of fn) in
  match fn with
  | "submit" | "commit" -> [ "fail" ]
  | "room" -> answer
  | fn when List.mem fn injectable -> [ "fault"; "raise" ] @ answer
  | _ -> []

let is_answer i = answer_of i.fn = Some i.kind

(* The points must be the same run after run (shards, replays), but two
   counts depend on timing.  rig polls signaled as often as the timing makes
   it while it waits: only its first calls, which every run makes, are
   points.  rig sleeps only when the word has not yet reached what it waits
   for: sleep's first call is a point wherever rig reads the word (it waits
   there, so it may sleep), whether the clean run slept or not, and its later
   calls are not. *)
let signaled_points = 2

let swept calls =
  let count fn = Option.value (List.assoc_opt fn calls) ~default:0 in
  let waits = count "signaled" > 0 || count "sleep" > 0 in
  List.filter_map
    (fun (fn, n) ->
      match fn with
      | "signaled" -> Some (fn, min n signaled_points)
      | "sleep" -> None
      | _ -> Some (fn, n))
    calls
  @ if waits then [ ("sleep", 1) ] else []

(* N of a kind "WHERE@N", N >= 1. *)
let point_at where i =
  match String.split_on_char '@' i.kind with
  | [ w; n ] when w = where -> ( match int_of_string_opt n with Some n when n >= 1 -> Some n | _ -> None)
  | _ -> None

(* "async@N": an asynchronous exception at the N-th allocation inside the
   call; "wait@N": the signal whose handler raises, at the N-th wait inside
   it (Async_inject). *)
let async_at = point_at "async"
let wait_at = point_at "wait"
let async ~fn ~nth ~at = { fn; nth; kind = Printf.sprintf "async@%d" at }
let wait ~fn ~nth ~at = { fn; nth; kind = Printf.sprintf "wait@%d" at }

let of_string s =
  match String.split_on_char ':' s with
  | [ fn; nth; kind ] -> (
      match int_of_string_opt nth with
      | Some nth when nth >= 1 && List.mem kind kinds && List.mem kind (List.map snd answers)
                       && answer_of fn <> Some kind ->
          Error
            (Printf.sprintf "%S: %s is the answer of %s, not of %s" s kind
               (String.concat ", " (List.filter_map (fun (f, k) -> if k = kind then Some f else None) answers))
               fn)
      | Some nth when nth >= 1 && (List.mem kind kinds || async_at { fn; nth; kind } <> None || wait_at { fn; nth; kind } <> None) ->
          Ok { fn; nth; kind }
      | _ ->
          Error
            (Printf.sprintf "%S: want FN:NTH:KIND, NTH >= 1, KIND one of %s, or async@N or wait@N with N >= 1" s
               (String.concat ", " kinds)))
  | _ -> Error (Printf.sprintf "%S: want FN:NTH:KIND" s)

let to_string i = Printf.sprintf "%s:%d:%s" i.fn i.nth i.kind
