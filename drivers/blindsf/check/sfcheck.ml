(* sfcheck: for each sf-* driver, opens a device, runs 0, 1 or 3 good fills
   to completion, submits a launch of the refused function (the submit must
   fail, which loses the device), stops it as rig would at its close, and
   prints the word as stop returns and 500 ms later against the last value
   given to submit (STOP-3: "also when that submit failed", and "If no work
   runs when stop is called, the driver writes it before stop returns").
   A last case does the same with a 300 ms spin still running at the stop,
   where the word may reach the value after stop returns.  A side line shows
   whether the refused launch is also refused with a fill beside it. *)

open Rig_edge
module Prim = Rig_edge_primitives

let call f = Prim.masked f
let now () = Unix.gettimeofday ()

type outcome = { accepted : bool; at_return : int; later : int; last : int }

let scenario (module P : Package) refused ~fills ~busy =
  let op = List.hd (call P.openers) in
  let d = call op.make in
  let q = (P.D.facts d).queue in
  let r = Option.get (call (fun () -> P.D.alloc d Device 64)) in
  let h = (P.D.locate d r).handle in
  let img = match call (fun () -> P.D.image d P.kit.binary) with Ok i -> i | Error e -> failwith e in
  let entry f = match call (fun () -> P.D.entry img f) with Entry e -> e | _ -> failwith ("no entry " ^ f) in
  let refuse = entry refused and spin = entry (Option.get P.kit.spin) in
  let submit parts value =
    let s = encode parts in
    let rec room k =
      match q.room s with
      | Room -> ()
      | Grow when k < 4 -> ( match call (fun () -> P.D.grow d) with Grown | Short _ -> room (k + 1))
      | Grow -> failwith "no room"
    in
    room 0;
    q.submit s ~value
  in
  let wait_for v =
    let until = now () +. 2.0 in
    while P.D.signaled d < v && now () < until do
      call (fun () -> P.D.sleep d ~seen:(P.D.signaled d) ~still_ms:100)
    done
  in
  for i = 1 to fills do
    assert (submit [ Fill { dst = h; off = 0; len = 64; byte = i } ] i);
    assert (q.commit ());
    wait_for i
  done;
  let last =
    if busy then begin
      let v = fills + 1 in
      assert (submit [ Launch { entry = spin; args = [ 300L ] } ] v);
      assert (q.commit ());
      Thread.delay 0.05 (* the worker runs the spin now *);
      v + 1
    end
    else fills + 1
  in
  let accepted = submit [ Launch { entry = refuse; args = [] } ] last in
  (* The submit failed: rig has lost the device and stops it at its close. *)
  call (fun () -> P.D.stop d ~fault:None);
  let at_return = P.D.signaled d in
  let until = now () +. (if busy then 1.0 else 0.5) in
  while now () < until do
    Thread.delay 0.01
  done;
  let later = P.D.signaled d in
  (* rig frees and unloads only once the word reads the last value. *)
  if later = last then begin
    call (fun () -> P.D.free d r);
    call (fun () -> P.D.unload img)
  end;
  { accepted; at_return; later; last }

(* Is the refused launch refused with a fill beside it?  (sf-alone-only
   refuses it only alone.) *)
let beside (module P : Package) refused =
  let op = List.hd (call P.openers) in
  let d = call op.make in
  let q = (P.D.facts d).queue in
  let r = Option.get (call (fun () -> P.D.alloc d Device 64)) in
  let h = (P.D.locate d r).handle in
  let img = match call (fun () -> P.D.image d P.kit.binary) with Ok i -> i | Error e -> failwith e in
  let e = match call (fun () -> P.D.entry img refused) with Entry e -> e | _ -> failwith "no entry" in
  let s = encode [ Fill { dst = h; off = 0; len = 64; byte = 7 }; Launch { entry = e; args = [] } ] in
  let ok = q.room s = Room && q.submit s ~value:1 && q.commit () in
  call (fun () -> P.D.stop d ~fault:None);
  let until = now () +. 1.0 in
  while P.D.signaled d <> 1 && now () < until do
    Thread.delay 0.01
  done;
  ok

let () =
  let failures = ref 0 in
  List.iter
    (fun (name, p) ->
      let _, refused = Option.get (Rig_edge.refused_launch (Blindsf.kit_more name)) in
      let expect = match Blindsf.breaks name with Some c -> "breaks " ^ c | None -> "conforming" in
      Printf.printf "%s (%s; refused_launch %S)\n" name expect refused;
      let seen_broken = ref false in
      List.iter
        (fun (fills, busy) ->
          let o = scenario p refused ~fills ~busy in
          (* busy: the stop came while work ran, so the word may move after
             stop returned; idle: it must read the value as stop returns. *)
          let ok = (not o.accepted) && o.later = o.last && (busy || o.at_return = o.last) in
          if not ok then seen_broken := true;
          Printf.printf "  %-20s submit %-8s word at stop's return %d, 500+ ms later %d, last value %d: %s\n"
            (if busy then Printf.sprintf "%d fills + spin" fills else Printf.sprintf "%d fills" fills)
            (if o.accepted then "ACCEPTED" else "failed")
            o.at_return o.later o.last
            (if ok then "ok"
             else if o.later = o.last then "WRONG (written only after stop returned)"
             else "WRONG (never written)"))
        [ (0, false); (1, false); (3, false); (1, true) ];
      Printf.printf "  refused launch with a fill beside it: submit %s\n"
        (if beside p refused then "accepted" else "failed");
      let agrees = !seen_broken = (Blindsf.breaks name <> None) in
      if not agrees then incr failures;
      Printf.printf "  => %s, as expected: %s\n%!" (if !seen_broken then "BROKEN" else "conforms")
        (if agrees then "yes" else "NO"))
    Blindsf.drivers;
  exit (if !failures = 0 then 0 else 1)
