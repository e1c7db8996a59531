(* The cores busy since the last look; see idle_cores.mli. *)

(* The "cpu" line of /proc/stat: ticks spent by all cores, in total and idle
   (idle and iowait: a core waiting on a disk runs nothing of ours). *)
let read_ticks () =
  match In_channel.with_open_bin "/proc/stat" In_channel.input_line with
  | exception Sys_error _ -> None
  | None -> None
  | Some line -> (
      match String.split_on_char ' ' line |> List.filter (( <> ) "") with
      | "cpu" :: fields -> (
          match List.map Int64.of_string fields with
          | exception Failure _ -> None
          | ticks when List.length ticks >= 5 ->
              (* guest and guest_nice (fields 9 and 10) are counted in user
                 and nice already *)
              let total = List.fold_left Int64.add 0L (List.filteri (fun i _ -> i < 8) ticks) in
              let idle = Int64.add (List.nth ticks 3) (List.nth ticks 4) in
              Some (total, idle)
          | _ -> None)
      | _ -> None)

type t = {
  mutable since : float;
  mutable ticks : (int64 * int64) option;
  cores : int;
  mutable own : float option;  (* the caller's children's CPU seconds at the window's start *)
  mutable others : float option;  (* the last window's busy cores less the caller's children's *)
}

let lines path = match In_channel.with_open_bin path In_channel.input_all with
  | exception Sys_error _ -> []
  | text -> String.split_on_char '\n' text

(* The cores /proc/stat's "cpu" line sums: its "cpuN" lines. *)
let stat_cores () =
  let per_core l = String.length l > 3 && String.starts_with ~prefix:"cpu" l && l.[3] >= '0' && l.[3] <= '9' in
  max 1 (List.length (List.filter per_core (lines "/proc/stat")))

(* "0-3,8,10-11": how many cores a Cpus_allowed_list names. *)
let count_list s =
  String.split_on_char ',' (String.trim s)
  |> List.fold_left
       (fun acc range ->
         match (acc, String.split_on_char '-' range) with
         | Some n, [ a ] when int_of_string_opt a <> None -> Some (n + 1)
         | Some n, [ a; b ] -> (
             match (int_of_string_opt a, int_of_string_opt b) with
             | Some a, Some b when b >= a -> Some (n + b - a + 1)
             | _ -> None)
         | _ -> None)
       (Some 0)

let count () =
  (* /proc/self/status is about 1.5 KiB: its first 4 KiB hold the line. *)
  let status = match Child_process.read_small "/proc/self/status" with
    | exception Unix.Unix_error _ -> []
    | text -> String.split_on_char '\n' text
  in
  let allowed =
    List.find_map
      (fun l ->
        match String.index_opt l ':' with
        | Some i when String.sub l 0 i = "Cpus_allowed_list" -> count_list (String.sub l (i + 1) (String.length l - i - 1))
        | _ -> None)
      status
  in
  match allowed with Some n when n >= 1 -> n | _ -> stat_cores ()

let create () = { since = Unix.gettimeofday (); ticks = read_ticks (); cores = stat_cores (); own = None; others = None }

let machine_cores m = m.cores

let busy ?(min_window = 0.1) ?own_cpu m =
  let now = Unix.gettimeofday () in
  if now -. m.since < min_window then None
  else
    let window = now -. m.since and own_cpu = Option.map (fun f -> f ()) own_cpu in
    let ticks = read_ticks () in
    let answer =
      match (m.ticks, ticks) with
      | Some (t0, i0), Some (t1, i1) when Int64.compare t1 t0 > 0 ->
          let total = Int64.to_float (Int64.sub t1 t0) and idle = Int64.to_float (Int64.sub i1 i0) in
          Some (float m.cores *. Float.max 0. (total -. idle) /. total)
      | _ -> None
    in
    m.others <-
      (match (answer, m.own, own_cpu) with
      | Some b, Some o0, Some o1 -> Some (Float.max 0. (b -. ((o1 -. o0) /. window)))
      | _ -> None);
    m.own <- own_cpu;
    m.since <- now;
    m.ticks <- ticks;
    answer

let others_busy m = m.others

(* The CPU seconds of a process's threads, from /proc/<pid>/stat (utime and
   stime, fields 14 and 15, in clock ticks of 1/100 s, Linux's USER_HZ). *)
let process_cpu pid =
  match Child_process.stat_fields pid with
  | Some fields -> (
      match (List.nth_opt fields 11, List.nth_opt fields 12) with
      | Some u, Some s -> ( match (float_of_string_opt u, float_of_string_opt s) with Some u, Some s -> (u +. s) /. 100. | _ -> 0.)
      | _ -> 0.)
  | None -> 0.

let children_cpu ~running =
  let t = Unix.times () in
  t.tms_cutime +. t.tms_cstime +. List.fold_left (fun acc pid -> acc +. process_cpu pid) 0. running
