(* st6check: for each st6-* driver and each of five stop scenarios, calls
   the driver as rig would (open, image, entry, room/submit/commit, stop)
   and watches the word for 600 ms after stop returned, reading it every
   0.1 ms: does a write land after the word showed the last value L and
   stop returned?  Also prints the stubs' own count of stores made after
   the one of L (which sees writes of L's own value too).

   Scenarios (values are 1, 2, ...):
   R1  a hang (1) running at stop;                       completed 0, L 1
   R2  a nop (1) retired, then a hang (2) running;        completed 1, L 2
   R3  a hang (1) running, a nop (2) committed behind it; v_run 1 < L 2
   F   a nop (1) retired, a nop (2) encoded, not committed; completed 1, L 2
   I   a nop (1) retired, nothing else;                   completed = L = 1

   Exit 1 when a driver's outcome differs from the table's expectation. *)

open Rig_edge

let scenarios = [ "R1"; "R2"; "R3"; "F"; "I" ]

(* The table's expectation: the scenarios where a late write changes the
   word after it showed L. *)
let expected = function
  | "st6-irq-exit-flush" -> [ "R1"; "R2"; "R3" ]
  | "st6-wb-timer" -> [ "R1"; "R2"; "R3"; "F" ]
  | "st6-release-reset" -> [ "R1"; "R2"; "R3"; "F"; "I" ]
  | "st6-release-blip" -> [ "R1"; "R2"; "R3"; "F" ]
  | "st6-posted-fence" -> [ "R3" ]
  | _ -> []

let watch_ms = 600

let run (name, (module P : Blindst6.S)) scen =
  let o = List.hd (P.openers ()) in
  let d = o.make () in
  let img = match P.D.image d P.kit.binary with Ok i -> i | Error e -> failwith e in
  let ent f = match P.D.entry img f with Entry h -> h | _ -> failwith ("no entry " ^ f) in
  let hang = ent "hang" and nop = ent "nop" in
  let q = (P.D.facts d).queue in
  let sub ?(commit = true) e v =
    let s = encode [ Launch { entry = e; args = [] } ] in
    (match q.room s with Room -> () | Grow -> failwith "room: grow");
    if not (q.submit s ~value:v) then failwith "submit failed";
    if commit && not (q.commit ()) then failwith "commit failed"
  in
  let wait_word v =
    let t0 = Unix.gettimeofday () in
    while P.D.signaled d < v do
      if Unix.gettimeofday () -. t0 > 5. then failwith "work never retired";
      Thread.delay 0.0002
    done
  in
  let settle () = Thread.delay 0.02 in
  let last =
    match scen with
    | "R1" -> sub hang 1; settle (); 1
    | "R2" -> sub nop 1; wait_word 1; sub hang 2; settle (); 2
    | "R3" -> sub hang 1; sub nop 2; settle (); 2
    | "F" -> sub nop 1; wait_word 1; sub ~commit:false nop 2; 2
    | "I" -> sub nop 1; wait_word 1; 1
    | _ -> assert false
  in
  let before = P.D.signaled d in
  let t0 = P.now_us () in
  P.D.stop d ~fault:None;
  let t1 = P.now_us () in
  let at_return = P.D.signaled d in
  (* Watch: the transitions of the word after stop returned. *)
  let trans = ref [ (0, at_return) ] in
  let cur = ref at_return in
  while P.now_us () - t1 < watch_ms * 1000 do
    let w = P.D.signaled d in
    if w <> !cur then begin
      trans := (P.now_us () - t1, w) :: !trans;
      cur := w
    end;
    Thread.delay 0.0001
  done;
  let trans = List.rev !trans in
  (* A late write: a change of the word after it showed L (stop has
     returned throughout the watch). *)
  let rec late seen_l = function
    | [] -> None
    | (t, w) :: rest -> if seen_l && w <> last then Some (t, w) else late (seen_l || w = last) rest
  in
  let late = late false trans in
  let shown_l = List.exists (fun (_, w) -> w = last) trans in
  let after = P.writes_after_final d in
  let ok = Option.is_some late = List.mem scen (expected name) && shown_l in
  Printf.printf "%-20s %-3s L=%d before=%d stop=%4dus at-return=%d  %s  late=%s  stores-after-L=%d%s\n%!" name scen last
    before (t1 - t0) at_return
    (String.concat " " (List.map (fun (t, w) -> Printf.sprintf "%d@%.1fms" w (float t /. 1000.)) trans))
    (match late with None -> "none" | Some (t, w) -> Printf.sprintf "%d at %.1f ms" w (float t /. 1000.))
    after
    (if ok then "" else "   <-- differs from the table");
  ok

let () =
  let only = Array.to_list Sys.argv |> List.tl in
  let all = List.filter (fun (n, _) -> only = [] || List.mem n only) Blindst6.all in
  let bad = ref 0 in
  List.iter (fun drv -> List.iter (fun s -> if not (run drv s) then incr bad) scenarios) all;
  Printf.printf "%s\n" (if !bad = 0 then "all as the table says" else Printf.sprintf "%d outcome(s) differ" !bad);
  exit (if !bad = 0 then 0 else 1)
