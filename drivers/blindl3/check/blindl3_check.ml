(* The author's check that each l3-* bug is real, and that the conforming
   drivers hold no lock uncounted, without the certifier.

   For each driver: one device opened first (d0), then, with every
   allocation sampled (Gc.Memprof, sampling rate 1: each allocation runs
   the tracker, OCaml code, on the allocating thread), a sequence of calls
   as rig makes them (signals blocked, no lock held): make, alloc, map_host,
   free, image (a taken and a refused binary), prepare, entry (twice), grow,
   unload, stop.  At each sampled allocation inside a call the tracker
   reads Rig_edge_primitives.holds () and whether the driver's own lock is
   held (a trylock: never blocks).  An allocation with the lock held and
   holds () = 0 is a window where OCaml code runs under an uncounted lock.
   Where the lock is a Stdlib Mutex, the tracker also does what a caller
   that trusts holds () = 0 may do, an alloc on d0 from the same thread:
   the OCaml 5 mutex refuses the re-take (Sys_error) instead of a deadlock.
   (With a C mutex that alloc would never return; the check does not make
   it.)

   Expected: a broken driver has windows in its changed function and
   nowhere else; a conforming one has none anywhere.  Exits 1 otherwise. *)

open Rig_edge
module Prim = Rig_edge_primitives

type obs = {
  mutable uncounted : int;  (* lock held, holds () = 0 *)
  mutable counted : int;  (* lock held, holds () > 0 *)
  mutable samples : int;
  mutable reentry : string option;
}

let new_obs () = { uncounted = 0; counted = 0; samples = 0; reentry = None }
let current : obs option ref = ref None
let held_now : (unit -> bool) ref = ref (fun () -> false)
let reenter : (unit -> string) option ref = ref None
let in_tracker = ref false

let on_alloc (_ : Gc.Memprof.allocation) : unit option =
  (match !current with
  | Some o when not !in_tracker ->
      in_tracker := true;
      let h = Prim.holds () in
      let l = !held_now () in
      o.samples <- o.samples + 1;
      if l && h = 0 then begin
        o.uncounted <- o.uncounted + 1;
        match (o.reentry, !reenter) with None, Some f -> o.reentry <- Some (f ()) | _ -> ()
      end
      else if l then o.counted <- o.counted + 1;
      in_tracker := false
  | _ -> ());
  None

let tracker = { Gc.Memprof.null_tracker with alloc_minor = on_alloc; alloc_major = on_alloc }

(* Run f as rig calls a driver function, sampling its allocations into the
   row [label] of [rows]. *)
let call rows label f =
  let o = match List.assoc_opt label !rows with Some o -> o | None -> let o = new_obs () in rows := !rows @ [ (label, o) ]; o in
  assert (Prim.holds () = 0);
  let t = Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:0 tracker in
  current := Some o;
  let r = try Ok (Prim.masked f) with e -> Error e in
  current := None;
  Gc.Memprof.stop ();
  Gc.Memprof.discard t;
  match r with Ok v -> v | Error e -> raise e

let stdlib_locked = [ "l3-alloc-stats"; "l3-make-registry"; "l3-grow-late-hold"; "l3-ok-mutex-counted" ]

let run (module S : Blindl3.SPEC) =
  let (module P) = Blindl3.package (module S) in
  let module D = P.D in
  let ops = P.openers () in
  let d0 = (List.nth ops 0).make () in
  held_now := (match S.held with Some f -> f | None -> fun () -> false);
  reenter :=
    if List.mem S.name stdlib_locked then
      Some
        (fun () ->
          match D.alloc d0 Device 64 with
          | Some _ -> "a re-entrant alloc on d0 returned"
          | None -> "a re-entrant alloc on d0 answered None"
          | exception Sys_error e -> "a re-entrant alloc on d0 raised Sys_error " ^ String.escaped e
          | exception e -> "a re-entrant alloc on d0 raised " ^ Printexc.to_string e)
    else None;
  let rows = ref [] in
  let call l f = call rows l f in
  let d = call "make" (fun () -> (List.nth ops 1).make ()) in
  let r = match call "alloc" (fun () -> D.alloc d Device 64) with Some r -> r | None -> failwith "alloc None" in
  let page = Blindl3.test_page () in
  let m = call "map_host" (fun () -> D.map_host d page 100) in
  call "free" (fun () -> D.free d r);
  call "free" (fun () -> D.free d m);
  let i = match call "image" (fun () -> D.image d P.kit.binary) with Ok i -> i | Error e -> failwith e in
  (match P.kit.refused_binary with
  | Some b ->
      for _ = 1 to 2 do
        match call "image" (fun () -> D.image d b) with Ok _ -> failwith "refused binary taken" | Error _ -> ()
      done
  | None -> ());
  call "prepare" (fun () -> D.prepare i "nop");
  for _ = 1 to 2 do
    match call "entry" (fun () -> D.entry i "nop") with Entry _ -> () | _ -> failwith "no entry for nop"
  done;
  (match call "grow" (fun () -> D.grow d) with Grown -> () | Short n -> Printf.printf "  (grow: Short %d)\n" n);
  call "unload" (fun () -> D.unload i);
  call "stop" (fun () -> D.stop d ~fault:None);
  D.stop d0 ~fault:None;
  reenter := None;
  let windows = List.filter (fun (_, o) -> o.uncounted > 0) !rows |> List.map fst in
  let ok =
    if S.broken then windows <> [] && List.for_all (fun w -> List.mem w S.changed) windows
    else windows = []
  in
  Printf.printf "%s  (%s; changed: %s)\n" S.name (if S.broken then "broken" else "conforming")
    (String.concat ", " S.changed);
  List.iter
    (fun (l, o) ->
      if o.uncounted > 0 || o.counted > 0 || List.mem l S.changed then
        Printf.printf "  %-9s %5d allocations sampled; lock held with holds () = 0 at %d, with holds () > 0 at %d%s\n" l
          o.samples o.uncounted o.counted
          (match o.reentry with Some s -> "; " ^ s | None -> ""))
    !rows;
  Printf.printf "  => %s\n"
    (if ok then if S.broken then "bug shown: OCaml code ran under the uncounted lock in " ^ String.concat ", " windows
       else "no allocation under an uncounted lock"
     else "UNEXPECTED: windows in [" ^ String.concat ", " windows ^ "]");
  ok

(* Two threads, each 20000 rounds of alloc, free, entry (and map_host, grow,
   unload where changed) on one device of a conforming driver: the counted
   and the pure-C locks must let both through (the C take waits outside the
   runtime, so a holder running OCaml code gets it back). *)
let concurrent (module S : Blindl3.SPEC) =
  let (module P) = Blindl3.package (module S) in
  let module D = P.D in
  let d = (List.hd (P.openers ())).make () in
  let page = Blindl3.test_page () in
  let errors = Atomic.make 0 in
  let work () =
    try
      for _ = 1 to 20000 do
        Prim.masked (fun () ->
            (match D.alloc d Device 64 with Some r -> D.free d r | None -> ());
            let m = D.map_host d page 64 in
            D.free d m;
            match D.image d P.kit.binary with
            | Ok i ->
                D.prepare i "nop";
                ignore (D.entry i "nop");
                ignore (D.grow d);
                D.unload i
            | Error _ -> Atomic.incr errors)
      done
    with _ -> Atomic.incr errors
  in
  let t0 = Unix.gettimeofday () in
  let ts = List.init 2 (fun _ -> Thread.create work ()) in
  List.iter Thread.join ts;
  D.stop d ~fault:None;
  let ok = Atomic.get errors = 0 && Prim.holds () = 0 in
  Printf.printf "%s: two threads x 20000 rounds in %.2f s, %d errors%s\n" S.name (Unix.gettimeofday () -. t0)
    (Atomic.get errors) (if ok then "" else "  UNEXPECTED");
  ok

let () =
  let results = List.map run Blindl3.specs in
  let results = results @ List.map concurrent (List.filter (fun (module S : Blindl3.SPEC) -> not S.broken) Blindl3.specs) in
  Printf.printf "log lines kept by the drivers' hooks: %d\n" (List.length (Blindl3.log ()));
  let bad = List.length (List.filter not results) in
  Printf.printf "%d checks (10 drivers, 4 concurrent runs), %d as expected\n" (List.length results) (List.length results - bad);
  exit (if bad = 0 then 0 else 1)
