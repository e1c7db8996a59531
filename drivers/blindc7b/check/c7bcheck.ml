(* c7bcheck: shows that each broken c7b-* driver's prepare, ended early,
   changed the image's other functions, and that the conforming ones did
   not.

   How a prepare is ended (the test hook): an asynchronous exception of our
   own, Cut, raised by an OCaml handler of SIGUSR2, which
   Rig_edge_primitives.signal_at_wait n sends to this thread as it enters
   the n-th wait from now; the handler runs as that wait ends (rig_block),
   so that the prepare raises Cut out of its wait, as it would for any
   signal rig lets through a wait.  The prepare is called inside
   Rig_edge_primitives.masked, as rig calls it.  n runs 1, 2, ... until a
   prepare completes without meeting its n-th wait.  A second pass cuts at
   the k-th allocation instead (Gc.Memprof sampling every word, its
   callback raising Cut at the k-th block the driver's own code allocates
   inside the prepare's call: see drivers_own), k = 1, 2, ... until the
   prepare completes.

   What is compared, per scenario (an image of three functions work0,
   work1, work2 of distinct scratch sizes, on a fresh device each run):
     setup (prepares / entries / a filler leaving a given free memory);
     F0 = free device memory (the largest Device alloc that succeeds);
     prepare of the target, cut;  F1 = free device memory;
     entry of each other function g, then free memory after each.
   A cut prepare (one that raised) must give F1 = F0, and the entries after
   it must answer and leave free memory as in a reference run of the same
   setup with no prepare of the target at all. *)

open Rig_edge
module Prim = Rig_edge_primitives

exception Cut

let sizes = [ 96 * 1024; 128 * 1024; 160 * 1024 ]

type step = Prep of int | Ent of int | Fill_to of int (* leave that many bytes free *)

type scenario = { sname : string; setup : step list; target : int; after : int list }

let scenarios =
  [
    { sname = "S0 cut prep w0 (nothing else)"; setup = []; target = 0; after = [ 1; 2 ] };
    { sname = "S1 prep w0,w1; cut prep w2"; setup = [ Prep 0; Prep 1 ]; target = 2; after = [ 0; 1 ] };
    { sname = "S2 prep w0; cut prep w1"; setup = [ Prep 0 ]; target = 1; after = [ 0; 2 ] };
    { sname = "S3 prep w0; fill to 64K free; cut prep w1"; setup = [ Prep 0; Fill_to 65536 ]; target = 1; after = [ 0; 2 ] };
    { sname = "S4 entry w0, prep w1; cut prep w2"; setup = [ Ent 0; Prep 1 ]; target = 2; after = [ 0; 1 ] };
    { sname = "S5 entry w0; cut prep w1"; setup = [ Ent 0 ]; target = 1; after = [ 0; 2 ] };
  ]

type cut = No_prepare | At_wait of int | At_alloc of int

(* The k-th block the driver's own code allocates while armed raises Cut.
   An allocation is the driver's own when the innermost frame of its call
   stack outside the standard library is in blindc7b.ml: the allocations of
   Rig_edge_primitives (Lock.protect's bookkeeping as it takes and gives
   the lock, Prim.wait's) are rig's, not the prepare's own, and a wait is
   cut through signal_at_wait instead.  Needs the code built with -g. *)
let alloc_countdown = ref 0

let drivers_own (a : Gc.Memprof.allocation) =
  match Printexc.backtrace_slots a.callstack with
  | None -> false
  | Some slots ->
      let rec first k =
        if k >= Array.length slots then false
        else
          match Printexc.Slot.location slots.(k) with
          | Some { filename; _ } when Filename.basename filename = "blindc7b.ml" -> true
          | Some { filename; _ } when Filename.basename filename = "rig_edge_primitives.ml" -> false
          | _ -> first (k + 1)
      in
      first 0

let arm_alloc k =
  alloc_countdown := k;
  let cb a =
    if drivers_own a then begin
      decr alloc_countdown;
      if !alloc_countdown = 0 then raise Cut
    end;
    None
  in
  ignore (Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:32 { Gc.Memprof.null_tracker with alloc_minor = cb; alloc_major = cb })

let disarm_alloc () = Gc.Memprof.stop ()

let answer_text = function Entry _ -> "Entry" | Absent -> "Absent" | No_memory n -> Printf.sprintf "No_memory %d" n

type outcome = { raised : bool; f0 : int; f1 : int; ents : (string * int) list (* answer, free memory after *) }

let run (module P : Package) sc cut =
  let call f = Prim.masked f in
  let d = (List.hd (P.openers ())).make () in
  let bin, names = Option.get (Rig_edge.scratch_functions Blindc7b.kit_more) sizes in
  let names = Array.of_list names in
  let i = match call (fun () -> P.D.image d bin) with Ok i -> i | Error e -> failwith e in
  let free_mem () =
    (* the largest Device allocation that succeeds, to the word *)
    let lo = ref 0 and hi = ref (Hostmem.capacity / word) in
    while !lo < !hi do
      let mid = (!lo + !hi + 1) / 2 in
      match call (fun () -> P.D.alloc d Device (mid * word)) with
      | Some r ->
          call (fun () -> P.D.free d r);
          lo := mid
      | None -> hi := mid - 1
    done;
    !lo * word
  in
  let fillers = ref [] in
  List.iter
    (function
      | Prep j -> call (fun () -> P.D.prepare i names.(j))
      | Ent j -> ignore (call (fun () -> P.D.entry i names.(j)))
      | Fill_to x ->
          let n = free_mem () - x in
          if n > 0 then fillers := Option.get (call (fun () -> P.D.alloc d Device n)) :: !fillers)
    sc.setup;
  let f0 = free_mem () in
  let prepare () = call (fun () -> P.D.prepare i names.(sc.target)) in
  let raised =
    match cut with
    | No_prepare -> false
    | At_wait n -> (
        Prim.signal_at_wait n;
        match prepare () with
        | () ->
            Prim.signal_at_wait 0;
            false
        | exception Cut -> true)
    | At_alloc k -> (
        (* armed inside rig's mask, around the driver's call only *)
        match
          call (fun () ->
              arm_alloc k;
              match P.D.prepare i names.(sc.target) with
              | () -> disarm_alloc ()
              | exception e ->
                  disarm_alloc ();
                  raise e)
        with
        | () -> false
        | exception Cut -> true)
  in
  let f1 = free_mem () in
  let ents =
    List.map
      (fun j ->
        let a = call (fun () -> P.D.entry i names.(j)) in
        (answer_text a, free_mem ()))
      sc.after
  in
  List.iter (fun r -> call (fun () -> P.D.free d r)) !fillers;
  call (fun () -> P.D.unload i);
  P.D.stop d ~fault:None;
  { raised; f0; f1; ents }

let diff_text sc (r : outcome) (ref_ : outcome) =
  let b = Buffer.create 80 in
  if r.f1 <> r.f0 then Printf.bprintf b "free memory %+d bytes across the cut prepare; " (r.f1 - r.f0);
  List.iteri
    (fun k ((a, f), (a', f')) ->
      let g = List.nth sc.after k in
      if a <> a' || f - r.f0 <> f' - ref_.f0 then
        Printf.bprintf b "entry work%d: %s, free %+d (without the prepare: %s, free %+d); " g a (f - r.f0) a' (f' - ref_.f0))
    (List.combine r.ents ref_.ents);
  Buffer.contents b

(* Cuts the target's prepare at its 1st, 2nd, ... wait (or allocation)
   until one completes; the findings of the cuts that raised. *)
let sweep pkg sc ~mk ~limit =
  let ref_ = run pkg sc No_prepare in
  let rec go n acc =
    if n > limit then (n - 1, List.rev acc)
    else
      let r = run pkg sc (mk n) in
      if not r.raised then (n - 1, List.rev acc)
      else
        let t = diff_text sc r ref_ in
        go (n + 1) (if t = "" then acc else (n, t) :: acc)
  in
  go 1 []

(* The rest of the contract the drivers keep: prepare then entry of every
   function answers Entry; a second entry the same handle and no memory;
   a second prepare changes nothing; unload gives every byte back. *)
let sanity (module P : Package) =
  let call f = Prim.masked f in
  let d = (List.hd (P.openers ())).make () in
  let bin, names = Option.get (Rig_edge.scratch_functions Blindc7b.kit_more) sizes in
  let i = match call (fun () -> P.D.image d bin) with Ok i -> i | Error e -> failwith e in
  let free_mem () =
    let lo = ref 0 and hi = ref (Hostmem.capacity / word) in
    while !lo < !hi do
      let mid = (!lo + !hi + 1) / 2 in
      match call (fun () -> P.D.alloc d Device (mid * word)) with
      | Some r ->
          call (fun () -> P.D.free d r);
          lo := mid
      | None -> hi := mid - 1
    done;
    !lo * word
  in
  let problems = ref [] in
  let say fmt = Printf.ksprintf (fun s -> problems := s :: !problems) fmt in
  let empty = free_mem () in
  List.iter
    (fun f ->
      call (fun () -> P.D.prepare i f);
      let a = free_mem () in
      call (fun () -> P.D.prepare i f);
      if free_mem () <> a then say "second prepare of %s changed free memory" f)
    names;
  let used = ref 0 in
  List.iter2
    (fun f n ->
      match call (fun () -> P.D.entry i f) with
      | Entry h -> (
          used := !used + n;
          let m = free_mem () in
          match call (fun () -> P.D.entry i f) with
          | Entry h' when h' = h -> if free_mem () <> m then say "second entry of %s made memory" f
          | _ -> say "second entry of %s answered otherwise" f)
      | a -> say "entry of %s answered %s" f (answer_text a))
    names sizes;
  if free_mem () <> empty - !used then say "after the entries, %d bytes used, expected %d" (empty - free_mem ()) !used;
  if call (fun () -> P.D.entry i "nosuch") <> Absent then say "entry of an absent function";
  call (fun () -> P.D.unload i);
  if free_mem () <> empty then say "unload left %d bytes" (empty - free_mem ());
  P.D.stop d ~fault:None;
  List.rev !problems

let () =
  Sys.set_signal Sys.sigusr2 (Sys.Signal_handle (fun _ -> raise Cut));
  Printf.printf "sizes: work0 %d, work1 %d, work2 %d bytes; device %d bytes\n\n" (List.nth sizes 0) (List.nth sizes 1)
    (List.nth sizes 2) Hostmem.capacity;
  let all_ok = ref true in
  List.iter
    (fun (name, pkg) ->
      let conforming, clause = match List.find_opt (fun (n, _, _) -> n = name) Blindc7b.table with
        | Some (_, c, cl) -> (c, cl) | None -> (true, "?") in
      Printf.printf "== %s (%s)\n" name clause;
      (match sanity pkg with
      | [] -> Printf.printf "   sanity (prepare, entry twice, unload): ok\n"
      | ps -> all_ok := false; List.iter (Printf.printf "   sanity: %s\n") ps);
      let seen = ref false in
      List.iter
        (fun sc ->
          let waits, fw = sweep pkg sc ~mk:(fun n -> At_wait n) ~limit:6 in
          let allocs, fa = sweep pkg sc ~mk:(fun k -> At_alloc k) ~limit:400 in
          let show kind (n, t) = Printf.printf "     cut at %s %d: CHANGED %s\n" kind n t in
          Printf.printf "   %-42s waits cut: %d, allocations cut: %d -> %s\n" sc.sname waits allocs
            (if fw = [] && fa = [] then "nothing changed" else "CHANGED");
          List.iter (show "wait") fw;
          (* allocation cuts: the first and last finding are enough *)
          (match fa with
          | [] -> ()
          | [ x ] -> show "allocation" x
          | x :: rest ->
              show "allocation" x;
              if List.length rest > 1 then Printf.printf "     ... (%d more allocation cuts)\n" (List.length rest - 1);
              show "allocation" (List.nth rest (List.length rest - 1)));
          if fw <> [] || fa <> [] then seen := true)
        scenarios;
      let ok = if conforming then not !seen else !seen in
      if not ok then all_ok := false;
      Printf.printf "   => %s\n\n"
        (match (conforming, !seen) with
        | false, true -> "broken as documented: a prepare that raised changed another function (CODE-7)"
        | false, false -> "UNEXPECTED: no change seen"
        | true, false -> "conforming: every cut prepare left the image's other functions as they were"
        | true, true -> "UNEXPECTED: a cut prepare changed something"))
    Blindc7b.drivers;
  Printf.printf "%s\n" (if !all_ok then "c7bcheck: all as documented" else "c7bcheck: SOME NOT AS DOCUMENTED");
  exit (if !all_ok then 0 else 1)
