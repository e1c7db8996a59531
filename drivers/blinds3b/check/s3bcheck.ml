(* s3bcheck: SIG-3 as another OCaml thread sees it.

   For each driver: a ticker thread wakes every millisecond (Thread.delay,
   which releases the runtime) and counts its turns and the longest gap
   between two of them, while the main thread sleeps the way rig does
   (sleep again while the word is unmoved, until the asked time is up) on an
   idle device, for a series of asks of 40, 20 and 15 ms.  A step that holds
   the runtime while it blocks leaves the ticker without a turn for that
   long: starved = a gap above 15 ms.

   Before that, quick correctness: an immediate return when the word
   differs, a return by still_ms, a wake on finished work, a Fault for a
   device that faults while sleep blocks. *)

open Rig_edge
module Prim = Rig_edge_primitives

let now = Unix.gettimeofday
let ms t = t *. 1000.

let check (name, (module P : Rig_edge.Package)) =
  let expected = List.assoc name Blinds3b.expected in
  let opens = P.openers () in
  let d0 = (List.nth opens 0).make () and d1 = (List.nth opens 1).make () in
  let problems = ref [] in
  let bad fmt = Printf.ksprintf (fun s -> problems := s :: !problems) fmt in
  let sleep d ~seen ~still_ms = Prim.masked (fun () -> P.D.sleep d ~seen ~still_ms) in
  (* rig's loop: sleep again while the word is unmoved and time is left *)
  let rig_wait d ~seen ~still_ms =
    let deadline = now () +. (float still_ms /. 1000.) in
    let rec go () =
      let left = int_of_float (ms (deadline -. now ())) in
      if left >= 1 && P.D.signaled d = seen then begin
        sleep d ~seen ~still_ms:left;
        go ()
      end
    in
    go ()
  in
  let submit d value parts =
    let q = (P.D.facts d).queue in
    let s = encode parts in
    Prim.masked (fun () ->
        if q.room s <> Room then failwith "room";
        if not (q.submit s ~value) then failwith "submit";
        if not (q.commit ()) then failwith "commit")
  in
  let entry d f =
    match Prim.masked (fun () -> P.D.image d P.kit.binary) with
    | Error e -> failwith e
    | Ok i -> (
        match Prim.masked (fun () -> P.D.entry i f) with Entry e -> e | _ -> failwith ("entry " ^ f))
  in
  (* (a) the word already differs *)
  let t = now () in
  sleep d0 ~seen:(P.D.signaled d0 + 1) ~still_ms:1000;
  if ms (now () -. t) > 20. then bad "no immediate return (%.0f ms)" (ms (now () -. t));
  (* (b) by still_ms, one call *)
  let t = now () in
  sleep d0 ~seen:(P.D.signaled d0) ~still_ms:30;
  if ms (now () -. t) > 50. then bad "sleep of 30 ms took %.0f ms" (ms (now () -. t));
  (* (c) woken by work: a spin of 40 ms, value 1 *)
  let spin = entry d0 "spin" in
  submit d0 1 [ Launch { entry = spin; args = [ 40L ] } ];
  let t = now () in
  rig_wait d0 ~seen:0 ~still_ms:1000;
  let took = ms (now () -. t) in
  if P.D.signaled d0 <> 1 || took > 150. then bad "work of 40 ms seen after %.0f ms (word %d)" took (P.D.signaled d0);
  (* (d) a fault that comes while sleep blocks *)
  let spin1 = entry d1 "spin" and flt = entry d1 "fault" in
  submit d1 1 [ Launch { entry = spin1; args = [ 30L ] }; Launch { entry = flt; args = [] } ];
  let t = now () in
  (match rig_wait d1 ~seen:0 ~still_ms:500 with
  | () -> bad "no Fault for a faulted device"
  | exception P.D.Fault _ ->
      if ms (now () -. t) > 150. then bad "Fault after %.0f ms" (ms (now () -. t)));
  (* SIG-3: the ticker's turns while d0 (idle, word 1) is slept on *)
  let stop = Atomic.make false and turns = ref 0 and gap = ref 0. in
  let ticker =
    Thread.create
      (fun () ->
        let last = ref (now ()) in
        while not (Atomic.get stop) do
          Thread.delay 0.001;
          let n = now () in
          if n -. !last > !gap then gap := n -. !last;
          last := n;
          incr turns
        done)
      ()
  in
  Thread.delay 0.01;
  let t = now () in
  List.iter (fun still_ms -> rig_wait d0 ~seen:1 ~still_ms) [ 40; 40; 40; 20; 40; 20; 15; 40 ];
  let slept = ms (now () -. t) in
  Atomic.set stop true;
  Thread.join ticker;
  Prim.masked (fun () ->
      P.D.stop d0 ~fault:None;
      P.D.stop d1 ~fault:(Some "fault"));
  let starved = ms !gap > 15. in
  let verdict = if starved then "SIG-3" else "conforming" in
  let ok = verdict = expected && !problems = [] in
  Printf.printf "%-17s slept %4.0f ms  ticker turns %4d  longest gap %5.1f ms  -> %-10s (expected %-10s) %s%s\n%!" name
    slept !turns (ms !gap) verdict expected
    (if ok then "ok" else "MISMATCH")
    (if !problems = [] then "" else "  [" ^ String.concat "; " (List.rev !problems) ^ "]");
  ok

let () =
  let results = List.map check Blinds3b.drivers in
  let k = List.length (List.filter Fun.id results) and n = List.length results in
  Printf.printf "s3bcheck: %d of %d drivers behave as the table says\n" k n;
  exit (if k = n then 0 else 1)
