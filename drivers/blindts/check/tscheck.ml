(* tscheck: drives every ts-* driver directly (no certifier, no rig) through
   four sequences, one per clause of the set, and prints per driver what it
   saw.  Each broken driver should show its own clause's bug and be clean on
   the other three; each ts-ok-* driver clean on all four.

   - TIME-6: a thread sleeps (seen = the word, still_ms 1500); 100 ms later
     the main thread submits and commits a Fill.  Bug: submit or commit
     does not return until the sleep ends (> 500 ms).
   - STOP-2: a launch of the kit's hang function committed; stop ~fault:
     (Some "hang") on a thread of its own.  Bug: stop not back within 500 ms
     (watched for 1 s; a stop still in flight then is left behind).
   - STOP-4: a Fill (0x5a) of a Mapped region encoded (room, submit), not
     committed; stop ~fault:None on the same thread.  Bug: the region's
     bytes show the Fill after the stop.
   - CODE-2: an image whose function "work" needs 4096 bytes of scratch:
     prepare, entry, entry, then a launch of it; the Device budget measured
     between (in 4096-byte allocations).  Bug: the second entry answers
     another handle or takes budget, or the launch's submit takes budget. *)

open Rig_edge
module Prim = Rig_edge_primitives

let now = Unix.gettimeofday
let ms t = int_of_float (t *. 1000.)

module Check (P : Rig_edge.Package) = struct
  module D = P.D

  let opened () =
    let o = List.hd (P.openers ()) in
    o.make ()

  let handle d r = (D.locate d r).handle

  let put d parts ~value =
    let q = (D.facts d).queue in
    let s = encode parts in
    let rec room k =
      match q.room s with
      | Room -> ()
      | Grow ->
          if k > 4 then failwith "room keeps answering Grow";
          ignore (Prim.masked (fun () -> D.grow d));
          room (k + 1)
    in
    room 0;
    if not (q.submit s ~value) then failwith "submit failed"

  let commit d = if not ((D.facts d).queue.commit ()) then failwith "commit failed"

  let wait_word d v ~for_s =
    let until = now () +. for_s in
    while D.signaled d < v && now () < until do
      Thread.delay 0.002
    done

  let stop d fault = Prim.masked (fun () -> D.stop d ~fault)

  (* ---------------------------------------------------------- TIME-6 *)
  let time6 () =
    let d = opened () in
    let r = Option.get (Prim.masked (fun () -> D.alloc d Device 64)) in
    let h = handle d r in
    let slept = ref 0. in
    let t0 = now () in
    let th =
      Thread.create
        (fun () ->
          Prim.masked (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:1500);
          slept := now () -. t0)
        ()
    in
    Thread.delay 0.1;
    let a = now () in
    put d [ Fill { dst = h; off = 0; len = 64; byte = 1 } ] ~value:1;
    let b = now () in
    commit d;
    let c = now () in
    Thread.join th;
    wait_word d 1 ~for_s:2.;
    stop d None;
    let sub = b -. a and com = c -. b in
    let what =
      Printf.sprintf "submit %d ms, commit %d ms, sleep returned after %d ms" (ms sub) (ms com) (ms !slept)
    in
    if sub > 0.5 || com > 0.5 then Error what else Ok what

  (* ---------------------------------------------------------- STOP-2 *)
  let stop2 () =
    let d = opened () in
    let i =
      match Prim.masked (fun () -> D.image d P.kit.binary) with Ok i -> i | Error e -> failwith e
    in
    let e =
      match Prim.masked (fun () -> D.entry i (Option.get P.kit.hang)) with
      | Entry e -> e
      | _ -> failwith "no entry for hang"
    in
    put d [ Launch { entry = e; args = [] } ] ~value:1;
    commit d;
    Thread.delay 0.05;
    let fin = Atomic.make 0. in
    let t0 = now () in
    ignore (Thread.create (fun () -> stop d (Some "hang: tscheck"); Atomic.set fin (now () -. t0)) ());
    let until = t0 +. 1.0 in
    while Atomic.get fin = 0. && now () < until do
      Thread.delay 0.005
    done;
    match Atomic.get fin with
    | 0. -> Error "stop still in flight after 1000 ms (hang launched, fault Some)"
    | t when t > 0.5 -> Error (Printf.sprintf "stop took %d ms while a hang ran" (ms t))
    | t -> Ok (Printf.sprintf "stop took %d ms while a hang ran; word %d" (ms t) (D.signaled d))

  (* ---------------------------------------------------------- STOP-4 *)
  let stop4 () =
    let d = opened () in
    let r = Option.get (Prim.masked (fun () -> D.alloc d Mapped 64)) in
    let pl = D.locate d r in
    let reach = Option.get pl.reach in
    Prim.masked (fun () -> reach (Write { off = 0; from = String.make 64 '\000' }));
    put d [ Fill { dst = pl.handle; off = 0; len = 64; byte = 0x5a } ] ~value:1;
    stop d None;
    let into = Bytes.create 64 in
    Prim.masked (fun () -> reach (Read { off = 0; into }));
    let filled = Bytes.exists (fun c -> c = '\x5a') into in
    let what = Printf.sprintf "region %s after stop; word %d" (if filled then "filled" else "untouched") (D.signaled d) in
    if filled then Error ("uncommitted Fill landed: " ^ what) else Ok what

  (* ---------------------------------------------------------- CODE-2 *)
  let budget d =
    let rec go acc k =
      if k >= 1100 then acc
      else match Prim.masked (fun () -> D.alloc d Device 4096) with None -> acc | Some r -> go (r :: acc) (k + 1)
    in
    let rs = go [] 0 in
    List.iter (fun r -> Prim.masked (fun () -> D.free d r)) rs;
    List.length rs

  let code2 () =
    let d = opened () in
    let bin, f = (Option.get P.kit.scratch) 4096 in
    let i = match Prim.masked (fun () -> D.image d bin) with Ok i -> i | Error e -> failwith e in
    let b0 = budget d in
    Prim.masked (fun () -> D.prepare i f);
    let e1 = Prim.masked (fun () -> D.entry i f) in
    let b1 = budget d in
    let e2 = Prim.masked (fun () -> D.entry i f) in
    let b2 = budget d in
    let h = match e2 with Entry h -> h | _ -> failwith "second entry is no Entry" in
    put d [ Launch { entry = h; args = [] } ] ~value:1;
    commit d;
    wait_word d 1 ~for_s:2.;
    let b3 = budget d in
    stop d None;
    let what =
      Printf.sprintf "budget %d -> entry %d -> entry %d -> launch %d; same handle %b" b0 b1 b2 b3 (e1 = e2)
    in
    if e1 <> e2 || b2 <> b1 then Error ("second entry made something: " ^ what)
    else if b3 <> b2 then Error ("submit took memory to launch f: " ^ what)
    else Ok what
end

let () =
  let names = Rig_edge_registry.names () in
  let clauses = [ "TIME-6"; "STOP-2"; "STOP-4"; "CODE-2" ] in
  let wrong = ref 0 in
  List.iter
    (fun name ->
      match Rig_edge_registry.find name with
      | None -> ()
      | Some p ->
          let module P = (val p : Rig_edge.Package) in
          let module C = Check (P) in
          let expect = Blindts.clause_of name in
          Printf.printf "%s  (expected: %s)\n%!" name expect;
          List.iter2
            (fun clause run ->
              let res = try run () with e -> Error ("raised " ^ Printexc.to_string e) in
              let shown = Result.is_error res in
              let ok = shown = (clause = expect) in
              if not ok then incr wrong;
              Printf.printf "  %-6s %s: %s%s\n%!" clause
                (if shown then "bug shown" else "clean")
                (match res with Ok s | Error s -> s)
                (if ok then "" else "   <-- UNEXPECTED"))
            clauses
            [ C.time6; C.stop2; C.stop4; C.code2 ])
    names;
  Printf.printf "%d drivers, %d unexpected outcomes\n%!" (List.length names) !wrong;
  Unix._exit (if !wrong = 0 then 0 else 1)
