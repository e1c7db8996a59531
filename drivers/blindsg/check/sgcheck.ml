(* sgcheck: calls every sg-* driver of Blindsg.all directly, through its
   Rig_edge.Package, in the sequences that show the bugs of the table at
   the top of ../blindsg.ml, and prints per driver what each probe saw.

   The probes look at allocation points through Gc.Memprof (sampling rate
   1: every allocation of the probed thread runs the callback), where they
   read Rig_edge_primitives' observers (blocks_rig_set, mask_as_left,
   activity, masks), or run a callback's call, or raise an exception as an
   asynchronous one would.

     sgcheck            run every probe on every driver
     sgcheck exit-probe NAME
                        (a child of the former) open a busy device of
                        NAME, exit, and report what its exit handlers did *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ---------------------------------------------------------- helpers *)

let in_thread f =
  let r = ref None in
  let t = Thread.create (fun () -> r := Some (try Ok (f ()) with e -> Error e)) () in
  Thread.join t;
  match !r with Some (Ok v) -> v | Some (Error e) -> raise e | None -> assert false

(* [f ()] on a thread of its own; None if it has not returned after [s]
   seconds (the thread is left where it is). *)
let with_timeout s f =
  let r = ref None in
  ignore (Thread.create (fun () -> r := Some (try Ok (f ()) with e -> Error e)) ());
  let rec poll n = match !r with Some v -> Some v | None -> if n = 0 then None else (Thread.delay 0.01; poll (n - 1)) in
  poll (int_of_float (s *. 100.))

(* ------------------------------------------------------ the tracer *)

type sample = { blocked : bool; as_left : bool; in_driver : bool }

let samples : sample list ref = ref []
let traced = ref (-1)
let hook : (int -> unit) ref = ref (fun _ -> ())
let count = ref 0
let want_stack = ref false

(* Whether an allocation's callstack passes through the drivers' code. *)
let in_driver (a : Gc.Memprof.allocation) =
  match Printexc.backtrace_slots a.callstack with
  | None -> false
  | Some slots ->
      Array.exists
        (fun s ->
          match Printexc.Slot.location s with
          | Some l -> Filename.basename l.Printexc.filename = "blindsg.ml"
          | None -> false)
        slots

let on_alloc a =
  if Thread.id (Thread.self ()) = !traced then begin
    incr count;
    samples := { blocked = Prim.blocks_rig_set (); as_left = Prim.mask_as_left (); in_driver = !want_stack && in_driver a } :: !samples;
    !hook !count
  end;
  None

let tracker = { Gc.Memprof.null_tracker with alloc_minor = on_alloc; alloc_major = on_alloc }

(* [trace ?at f]: f () with every allocation of this thread sampled; [at n]
   runs at the n-th.  The samples in order, and f's outcome. *)
let trace ?(stack = false) ?(at = fun _ -> ()) f =
  samples := [];
  count := 0;
  hook := at;
  want_stack := stack;
  traced := Thread.id (Thread.self ());
  let p = Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:(if stack then 64 else 0) tracker in
  let r = try Ok (f ()) with e -> Error e in
  Gc.Memprof.stop ();
  Gc.Memprof.discard p;
  traced := -1;
  hook := (fun _ -> ());
  (List.rev !samples, r)

(* ------------------------------------------------------- reporting *)

let found : (string * string) list ref = ref []  (* driver, clause *)

let say drv what ok clause =
  Printf.printf "%s: %s: %s\n%!" drv what (if ok then "fine" else "BUG (" ^ clause ^ ")");
  if not ok then found := (drv, clause) :: !found

let note drv what = Printf.printf "%s: %s\n%!" drv what

(* ------------------------------------------------------ the probes *)

let binary = Hostmem.kit.binary

(* rig's way: a driver call with signals blocked (SIG-1). *)
let rig f = Prim.masked f

(* Does [f] start with the check of rig_holds ()?  Called inside a lock of
   our own, it must raise Invalid_argument. *)
let checks f =
  let l = Prim.Lock.create "sgcheck.probe" in
  match Prim.Lock.protect l f with _ -> false | exception Invalid_argument _ -> true

(* SIG-6 and SIG-9 on make and openers: called with signals open, as
   another caller may. *)
let probe_masks drv (module P : Package) =
  let judge what checked (s, r) =
    (match r with Error e -> note drv (what ^ " raised " ^ Printexc.to_string e) | Ok _ -> ());
    let n = List.length s in
    let idx = List.mapi (fun i x -> (i, x)) s in
    let blocked = List.filter (fun (_, x) -> x.blocked) idx in
    let not_left = List.length (List.filter (fun x -> not x.as_left) s) in
    let after = not (Prim.mask_as_left ()) in
    if Sys.getenv_opt "SGCHECK_SEQ" <> None then
      note drv (what ^ " sequence (b blocked, o open; upper case: mask as the primitives left it): "
        ^ String.concat "" (List.map (fun x -> match x.blocked, x.as_left with true, true -> "B" | true, false -> "b" | false, true -> "O" | false, false -> "o") s));
    say drv
      (Printf.sprintf "%s: %d allocations, %d with the mask not as the primitives left it%s" what n not_left
         (if after then ", and after it returned" else ""))
      (not_left = 0 && not after) "SIG-9";
    if not checked then note drv (Printf.sprintf "%s: no check of rig_holds (): need not block signals (%d of %d allocations blocked)" what (List.length blocked) n)
    else
      match blocked with
      | [] -> say drv (Printf.sprintf "%s: checks rig_holds (), %d allocations, none blocked" what n) (n = 0) "SIG-6"
      | (first, _) :: _ ->
          let last = fst (List.nth blocked (List.length blocked - 1)) in
          let opened = List.filter (fun (i, x) -> i > first && i < last && not x.blocked) idx in
          say drv
            (Printf.sprintf "%s: checks rig_holds (); %d allocations, %d blocked; open between the first and last blocked: %d" what n
               (List.length blocked) (List.length opened))
            (opened = []) "SIG-6"
  in
  in_thread (fun () ->
      let oc = checks (fun () -> P.openers ()) in
      judge "openers" oc (trace (fun () -> P.openers ()));
      let o = List.hd (rig P.openers) in
      let mc = checks o.make in
      judge "make" mc (trace o.make))

(* Work that keeps d busy for [ms] milliseconds: a launch of the kit's spin. *)
let make_busy (type t) (module P : Package with type D.t = t) (d : t) ms =
  let f = P.D.facts d in
  match rig (fun () -> P.D.image d binary) with
  | Error e -> failwith e
  | Ok i -> (
      match rig (fun () -> P.D.entry i "spin") with
      | Entry h ->
          let s = encode [ Launch { entry = h; args = [ Int64.of_int ms ] } ] in
          if f.queue.room s <> Room || not (f.queue.submit s ~value:1) || not (f.queue.commit ()) then failwith "no room"
      | _ -> failwith "no spin")

(* SIG-7's judgement of a finaliser's or exit handler's allocations (those
   whose callstack passes through the driver): blocked at all if any, and
   from the first blocked one to the last (closures made before the shield
   and results boxed after it aside).  The number of them and of those
   with signals open that count. *)
let judge_shield s =
  let s = List.filter (fun x -> x.in_driver) s in
  let idx = List.mapi (fun i x -> (i, x)) s in
  let blocked = List.filter (fun (_, x) -> x.blocked) idx in
  let opened =
    match blocked with
    | [] -> List.length s
    | (first, _) :: _ ->
        let last = fst (List.nth blocked (List.length blocked - 1)) in
        List.length (List.filter (fun (i, x) -> i > first && i < last && not x.blocked) idx)
  in
  (List.length s, opened)

(* SIG-7: a dropped device's finalisers, reached by Gc.full_major. *)
let probe_finaliser drv (module P : Package) =
  in_thread (fun () ->
      Gc.full_major ();
      let open_one () =
        let d = rig (List.hd (rig P.openers)).make in
        make_busy (module P) d 200;
        ignore (Sys.opaque_identity d)
      in
      open_one ();
      let log0 = Blindsg.last_log () and m0 = Prim.masks () and w0 = Prim.waits () in
      let s, _ = trace ~stack:true (fun () -> Gc.full_major ()) in
      let ran = Blindsg.last_log () <> log0 in
      let n, opened = judge_shield s in
      if not ran && n = 0 then note drv "finaliser: none of the driver's ran at Gc.full_major on a dropped device"
      else
        say drv
          (Printf.sprintf "finaliser of a dropped busy device: %d allocations, %d with signals open where they must be blocked, %d waits, shielded %d time(s) (log %S)" n opened
             (Prim.waits () - w0) (Prim.masks () - m0) (Blindsg.last_log ()))
          (opened = 0) "SIG-7")

(* SIG-7 for exit handlers: in a child that exits (see exit_child). *)
let probe_exit drv =
  let ic = Unix.open_process_args_in Sys.executable_name [| Sys.executable_name; "exit-probe"; drv |] in
  let lines = In_channel.input_all ic in
  ignore (Unix.close_process_in ic);
  match String.split_on_char '\n' (String.trim lines) |> List.rev with
  | last :: _ when String.length last > 5 && String.sub last 0 5 = "EXIT " -> (
      match String.split_on_char ' ' last with
      | [ _; n; opened; masks; waits ] ->
          let n = int_of_string n and opened = int_of_string opened and masks = int_of_string masks in
          if n = 0 && int_of_string waits = 0 then note drv "exit handlers: none of the driver's ran (or they did nothing)"
          else
            say drv
              (Printf.sprintf "exit handlers (child process): %d allocations, %d with signals open where they must be blocked, %s waits, shielded %d time(s)" n
                 opened waits masks)
              (opened = 0) "SIG-7"
      | _ -> note drv ("exit probe: bad report " ^ last))
  | _ -> note drv ("exit probe: no report: " ^ lines)

let exit_child drv =
  let _, _, (module P : Package) = List.find (fun (n, _, _) -> n = drv) Blindsg.all in
  let m0 = ref 0 and w0 = ref 0 in
  (* registered first: runs last *)
  at_exit (fun () ->
      Gc.Memprof.stop ();
      let n, opened = judge_shield (List.rev !samples) in
      Printf.printf "EXIT %d %d %d %d\n%!" n opened (Prim.masks () - !m0) (Prim.waits () - !w0));
  let d = rig (List.hd (rig P.openers)).make in
  make_busy (module P) d 300;
  (* registered last: runs first, before the driver's *)
  at_exit (fun () ->
      m0 := Prim.masks ();
      w0 := Prim.waits ();
      samples := [];
      want_stack := true;
      traced := Thread.id (Thread.self ());
      ignore (Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:64 tracker));
  exit 0

exception Injected

(* ASYNC-2: an asynchronous exception at each allocation point of entry in
   turn (as a memprof callback raises it), then: does the thread still
   count a lock, and does another entry on the image ever return? *)
let probe_async drv (module P : Package) =
  let d = rig (List.hd (rig P.openers)).make in
  let rec go k leaks stuck =
    let r =
      in_thread (fun () ->
          match rig (fun () -> P.D.image d binary) with
          | Error e -> failwith e
          | Ok i ->
              let _, r = trace ~at:(fun n -> if n = k then raise Injected) (fun () -> rig (fun () -> P.D.entry i "nop")) in
              let held = Prim.holds () in
              (i, r, held))
    in
    let i, r, held = r in
    match r with
    | Ok _ -> (k - 1, leaks, stuck) (* entry made fewer than k allocations: done *)
    | Error _ ->
        let leaks = if held <> 0 then k :: leaks else leaks in
        let stuck =
          match with_timeout 2.0 (fun () -> rig (fun () -> P.D.entry i "nop")) with None -> k :: stuck | Some _ -> stuck
        in
        if k >= 200 then (k, leaks, stuck) else go (k + 1) leaks stuck
  in
  let n, leaks, stuck = go 1 [] [] in
  let l = List.rev_map string_of_int in
  say drv
    (Printf.sprintf
       "entry with an exception at each of its %d allocations: lock count left up after %d (at %s), next entry blocked for good after %d (at %s)"
       n (List.length leaks) (String.concat "," (l leaks)) (List.length stuck) (String.concat "," (l stuck)))
    (leaks = [] && stuck = []) "ASYNC-2";
  rig (fun () -> P.D.stop d ~fault:None)

(* LOCK-5: locate, peer and signaled take no lock (and enter no wait). *)
let probe_lock5 drv (module P : Package) =
  let ops = rig P.openers in
  let d0 = rig (List.nth ops 0).make and d1 = rig (List.nth ops 1).make in
  let r = Option.get (rig (fun () -> P.D.alloc d0 Device 64)) in
  List.iter
    (fun (what, f) ->
      let a0 = Prim.activity () in
      f ();
      let a = Prim.activity () - a0 in
      say drv (Printf.sprintf "%s: %d locks taken or waits entered" what a) (a = 0) "LOCK-5")
    [
      ("locate", fun () -> ignore (P.D.locate d0 r));
      ("peer", fun () -> ignore (P.D.peer d0 d1));
      ("signaled", fun () -> ignore (P.D.signaled d0));
    ];
  rig (fun () -> P.D.free d0 r);
  rig (fun () -> P.D.stop d0 ~fault:None);
  rig (fun () -> P.D.stop d1 ~fault:None)

(* LOCK-9: locate, a lock-free function, called from a callback at each
   allocation point of alloc and of locate; afterwards each region must
   still be located at its own handle. *)
let probe_lock9 drv (module P : Package) =
  in_thread (fun () ->
      let d = rig (List.hd (rig P.openers)).make in
      let r0 = Option.get (rig (fun () -> P.D.alloc d Device 64)) in
      let h0 = (P.D.locate d r0).handle in
      let bad = ref [] in
      let run what outer =
        let rec go k =
          let inner = ref None in
          let s, res = trace ~at:(fun n -> if n = k then inner := Some (P.D.locate d r0).handle) (fun () -> outer ()) in
          (match res with
          | Error e -> bad := Printf.sprintf "%s@%d raised %s" what k (Printexc.to_string e) :: !bad
          | Ok r1 ->
              let h1 = (P.D.locate d r1).handle and h0' = (P.D.locate d r0).handle in
              let hi = Option.value !inner ~default:h0 in
              if h0' <> h0 || hi <> h0 || h1 = h0 then
                bad := Printf.sprintf "%s@%d: r0 at %Lx (was %Lx, in the callback %Lx), r1 at %Lx" what k h0' h0 hi h1 :: !bad;
              rig (fun () -> P.D.free d r1));
          if k < List.length s && k < 100 then go (k + 1)
        in
        go 1
      in
      run "alloc" (fun () -> Option.get (rig (fun () -> P.D.alloc d Device 64)));
      run "locate" (fun () ->
          let r1 = Option.get (rig (fun () -> P.D.alloc d Device 64)) in
          ignore (P.D.locate d r0);
          ignore (P.D.locate d r1);
          r1);
      (* signaled from a callback inside signaled (for information: what a
         lock in signaled does to a caller that believes it lock-free) *)
      let errs = ref 0 and calls = ref 0 in
      let rec sig_go k =
        let s, _ =
          trace ~at:(fun n -> if n = k then (incr calls; try ignore (P.D.signaled d) with _ -> incr errs)) (fun () -> P.D.signaled d)
        in
        if k < List.length s && k < 50 then sig_go (k + 1)
      in
      sig_go 1;
      note drv (Printf.sprintf "signaled from a callback inside signaled: %d calls, %d raised" !calls !errs);
      say drv
        (Printf.sprintf "locate from a callback inside alloc and locate: %d wrong answers%s" (List.length !bad)
           (match !bad with [] -> "" | b -> " (first: " ^ List.nth b (List.length b - 1) ^ ")"))
        (!bad = []) "LOCK-9";
      rig (fun () -> P.D.free d r0);
      rig (fun () -> P.D.stop d ~fault:None))

(* SIG-8: every thread that appeared during make blocks rig_mask's set. *)
let sigblk tid =
  let ic = open_in (Printf.sprintf "/proc/self/task/%s/status" tid) in
  let rec find () =
    match input_line ic with
    | l when String.length l > 7 && String.sub l 0 7 = "SigBlk:" -> Int64.of_string ("0x" ^ String.trim (String.sub l 7 (String.length l - 7)))
    | _ -> find ()
    | exception End_of_file -> 0L
  in
  let v = try find () with _ -> 0L in
  close_in ic;
  v

let tasks () = Array.to_list (Sys.readdir "/proc/self/task")

let probe_threads drv (module P : Package) =
  let set =
    in_thread (fun () ->
        Prim.masked (fun () ->
            let ic = open_in "/proc/thread-self/status" in
            let rec find () =
              let l = input_line ic in
              if String.length l > 7 && String.sub l 0 7 = "SigBlk:" then
                Int64.of_string ("0x" ^ String.trim (String.sub l 7 (String.length l - 7)))
              else find ()
            in
            let v = find () in
            close_in ic;
            v))
  in
  let before = tasks () in
  let d = rig (List.hd (rig P.openers)).make in
  make_busy (module P) d 10;
  Thread.delay 0.1;
  let fresh = List.filter (fun t -> not (List.mem t before)) (tasks ()) in
  let open_ = List.filter (fun t -> Int64.logand (sigblk t) set <> set) fresh in
  say drv
    (Printf.sprintf "threads started by make: %d, of which %d do not block rig_mask's signals" (List.length fresh) (List.length open_))
    (open_ = []) "SIG-8";
  (match drv with
  | "sg-helper-thread" ->
      let b0 = Blindsg.Helper_thread.beats () in
      Thread.delay 0.1;
      note drv
        (Printf.sprintf "helper thread: %d looks in 100 ms, heartbeats of the live devices [%s] (this one's word %d)"
           (Blindsg.Helper_thread.beats () - b0)
           (String.concat ";" (List.map string_of_int (Blindsg.Helper_thread.heartbeats ())))
           (P.D.signaled d))
  | _ -> ());
  rig (fun () -> P.D.stop d ~fault:None)

(* LOCK-4 behaviour of make (no lock taken by a caller inside one). *)
let probe_check drv (module P : Package) =
  let o = List.hd (rig P.openers) in
  say drv "make inside a lock raises Invalid_argument" (checks o.make) "LOCK-4"

(* -------------------------------------------------------------- main *)

let () =
  match Sys.argv with
  | [| _; "exit-probe"; drv |] -> exit_child drv
  | args ->
      let only = List.tl (Array.to_list args) in
      let all = List.filter (fun (n, _, _) -> only = [] || List.mem n only) Blindsg.all in
      List.iter
        (fun (drv, expected, p) ->
          Printf.printf "---- %s (expected: %s)\n%!" drv expected;
          let guard what f = try f () with e -> note drv (Printf.sprintf "%s probe raised %s" what (Printexc.to_string e)) in
          (* first: the first open of a driver starts what it starts once *)
          guard "threads" (fun () -> probe_threads drv p);
          guard "mask" (fun () -> probe_masks drv p);
          guard "check" (fun () -> probe_check drv p);
          guard "finaliser" (fun () -> probe_finaliser drv p);
          guard "exit" (fun () -> probe_exit drv);
          guard "async" (fun () -> probe_async drv p);
          guard "lock5" (fun () -> probe_lock5 drv p);
          guard "lock9" (fun () -> probe_lock9 drv p);
          ())
        all;
      print_endline "==== summary";
      let ok = ref true in
      List.iter
        (fun (drv, expected, _) ->
          let got = List.sort_uniq compare (List.filter_map (fun (d, c) -> if d = drv then Some c else None) !found) in
          let want = if expected = "conforming" then [] else [ expected ] in
          let fine = got = want in
          if not fine then ok := false;
          Printf.printf "%-22s expected %-10s observed %-20s %s\n" drv expected
            (if got = [] then "nothing" else String.concat "," got)
            (if fine then "as expected" else "UNEXPECTED"))
        all;
      print_endline (if !ok then "sgcheck: every driver as expected" else "sgcheck: some driver NOT as expected");
      exit (if !ok then 0 else 1)
