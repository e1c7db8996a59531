(* c7check [DRIVER...]: for each c7-* driver (all by default), scenarios of
   prepares and entries on a fresh device and image of Hostmem.kit's
   scratch binary (64 KiB of scratch); after each, the Device memory still
   charged beyond what the scenario's entries need (measured by what alloc
   of Device memory can still get), then the same after unload.

   A: prepare, prepare (at once, before any entry), entry
   B: entry, prepare
   C: entry, an unrelated alloc and free of Device memory, prepare
   D: prepare ended by an asynchronous exception at its first wait
      (SIGUSR2 through Rig_edge_primitives.signal_at_wait); charge after it
      (expected 0), then entry
   E: two prepares on two threads at once, then entry (repeated 5 times)
   F: prepare ended by an exception a Gc.Memprof callback raises at its
      k-th allocation (on the calling thread), k = 1, 2, ... until prepare
      returns: after each raise, the charge must be what it was (0), and an
      entry's must then be one scratch.  Only allocations of the driver's
      own code count (a Blindc7 frame before any Rig_edge_primitives one):
      the edge's lock allocates in its take and its give (its order
      records), and an exception there is outside what a driver controls;
      C7_ALL=1 counts those too (then the drivers that commit inside
      Lock.protect, c7-ok-sync among them, raise after their commit when
      the exception comes in the give).  C7_DEBUG=1 prints where each
      exception is raised.

   Prints one line per driver and scenario: the extra charge in scratches
   (0 is right: CODE-7), and BUG where it is not 0. *)

open Rig_edge
module Prim = Rig_edge_primitives

exception Injected

let n = 64 lsl 10

let () = Sys.set_signal Sys.sigusr2 (Sys.Signal_handle (fun _ -> raise Injected))

(* Inside a memprof callback: whether the allocation is the driver's own,
   that is whether, going out from the allocation, a frame of Blindc7 comes
   before any of Rig_edge_primitives: the edge's own internals (its lock's
   take, its order records) are not the driver's code, and an exception
   injected there is the edge's business, not the driver's. *)
let in_driver () =
  Sys.getenv_opt "C7_ALL" <> None
  ||
  let name sl = Option.value (Printexc.Slot.name sl) ~default:"" in
  let starts p n = String.length n >= String.length p && String.sub n 0 (String.length p) = p in
  let ends_hit n = String.length n >= 4 && String.sub n (String.length n - 4) 4 = ".hit" in
  match Printexc.backtrace_slots (Printexc.get_callstack 40) with
  | None -> true
  | Some slots ->
      let rec out j =
        if j >= Array.length slots then true
        else
          let n = name slots.(j) in
          if starts "Blindc7" n then true else if starts "Rig_edge_primitives" n then false else out (j + 1)
      in
      let rec hit j = if j >= Array.length slots then true else if ends_hit (name slots.(j)) then out (j + 1) else hit (j + 1) in
      hit 0

let run (name, (module P : Blindc7.S)) =
  let bin, f = (Option.get P.kit.scratch) n in
  let fresh () =
    let d = Prim.masked (fun () -> (List.hd (P.openers ())).make ()) in
    let i = match Prim.masked (fun () -> P.D.image d bin) with Ok i -> i | Error e -> failwith e in
    (d, i)
  in
  (* What alloc of Device memory can still get (a binary search). *)
  let avail d =
    let ok k =
      k = 0
      ||
      match Prim.masked (fun () -> P.D.alloc d Device k) with
      | None -> false
      | Some r ->
          Prim.masked (fun () -> P.D.free d r);
          true
    in
    let lo = ref 0 and hi = ref (Blindc7.capacity / word) in
    while !lo < !hi do
      let mid = (!lo + !hi + 1) / 2 in
      if ok (mid * word) then lo := mid else hi := mid - 1
    done;
    !lo * word
  in
  let entry d i =
    match Prim.masked (fun () -> P.D.entry i f) with
    | Entry _ -> ()
    | _ -> ignore d; failwith "entry: no Entry"
  in
  let prepare i = Prim.masked (fun () -> P.D.prepare i f) in
  let report what ~expect a0 a1 =
    let extra = float_of_int (a0 - a1 - (expect * n)) /. float_of_int n in
    Printf.printf "%-22s %-34s extra %5.2f scratches  %s\n%!" name what extra
      (if a0 - a1 = expect * n then "ok" else "BUG")
  in
  let finish what d i a0 =
    Prim.masked (fun () -> P.D.unload i);
    let a2 = avail d in
    report (what ^ ", after unload") ~expect:0 a0 a2;
    Prim.masked (fun () -> P.D.stop d ~fault:None)
  in
  (* A *)
  (let d, i = fresh () in
   let a0 = avail d in
   prepare i;
   prepare i;
   entry d i;
   report "A prepare prepare entry" ~expect:1 a0 (avail d);
   finish "A" d i a0);
  (* B *)
  (let d, i = fresh () in
   let a0 = avail d in
   entry d i;
   prepare i;
   Thread.delay 0.4;
   report "B entry prepare" ~expect:1 a0 (avail d);
   finish "B" d i a0);
  (* C *)
  (let d, i = fresh () in
   let a0 = avail d in
   entry d i;
   (match Prim.masked (fun () -> P.D.alloc d Device 4096) with
   | Some r -> Prim.masked (fun () -> P.D.free d r)
   | None -> ());
   prepare i;
   Thread.delay 0.4;
   let a1 = avail d in
   report "C entry free prepare" ~expect:1 a0 a1;
   finish "C" d i a0);
  (* D *)
  (let d, i = fresh () in
   let a0 = avail d in
   Prim.signal_at_wait 1;
   let raised = match prepare i with () -> false | exception Injected -> true in
   Prim.signal_at_wait 0;
   Thread.delay 0.4;
   let a1 = avail d in
   if raised then report "D prepare raised" ~expect:0 a0 a1
   else Printf.printf "%-22s %-34s (no wait in prepare: nothing to judge)\n%!" name "D prepare returned";
   entry d i;
   report "D ... then entry" ~expect:1 a0 (avail d);
   finish "D" d i a0);
  (* E *)
  let bad = ref 0 in
  for _ = 1 to 5 do
    let d, i = fresh () in
    let a0 = avail d in
    let t = Thread.create (fun () -> prepare i) () in
    prepare i;
    Thread.join t;
    entry d i;
    if a0 - avail d <> n then incr bad;
    Prim.masked (fun () -> P.D.unload i);
    Prim.masked (fun () -> P.D.stop d ~fault:None)
  done;
  Printf.printf "%-22s %-34s %d/5 runs with extra charge  %s\n%!" name "E two prepares at once, entry" !bad
    (if !bad = 0 then "ok" else "BUG");
  (* F *)
  let raised_at = ref [] and leaked_at = ref [] and k = ref 1 and go_on = ref true in
  while !go_on && !k <= 80 do
    let d, i = fresh () in
    let a0 = avail d in
    if Sys.getenv_opt "C7_DEBUG" <> None then Printf.eprintf "F k=%d\n%!" !k;
    let me = Thread.id (Thread.self ()) in
    let count = ref 0 in
    let hit _ =
      if Thread.id (Thread.self ()) = me && in_driver () then begin
        incr count;
        if !count = !k then begin
          if Sys.getenv_opt "C7_DEBUG" <> None then
            Printexc.print_raw_backtrace stderr (Printexc.get_callstack 12);
          raise Injected
        end
      end;
      None
    in
    let tracker = { Gc.Memprof.null_tracker with alloc_minor = hit; alloc_major = hit } in
    let raised =
      Prim.masked (fun () ->
          let _ = Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:0 tracker in
          match P.D.prepare i f with
          | () ->
              Gc.Memprof.stop ();
              false
          | exception Injected ->
              Gc.Memprof.stop ();
              true)
    in
    if raised then begin
      raised_at := !k :: !raised_at;
      Thread.delay 0.35;
      let a1 = avail d in
      entry d i;
      let a2 = avail d in
      if a1 <> a0 || a0 - a2 <> n then leaked_at := !k :: !leaked_at
    end
    else go_on := false;
    Prim.masked (fun () -> P.D.unload i);
    Prim.masked (fun () -> P.D.stop d ~fault:None);
    incr k
  done;
  Printf.printf "%-22s %-34s raised at %d allocations, charge left at %d [%s]  %s\n%!" name
    "F exception at prepare's k-th alloc" (List.length !raised_at) (List.length !leaked_at)
    (String.concat "," (List.rev_map string_of_int !leaked_at))
    (if !leaked_at = [] then "ok" else "BUG")

let () =
  let names = List.tl (Array.to_list Sys.argv) in
  let chosen = if names = [] then Blindc7.drivers else List.filter (fun (n, _) -> List.mem n names) Blindc7.drivers in
  List.iter run chosen
