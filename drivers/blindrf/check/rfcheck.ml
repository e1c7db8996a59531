(* rfcheck: shows each broken rf-* driver's bug is real, and each conforming
   one behaves under its simulated refusals.  Calls are made as rig makes
   them: holding no lock, with signals blocked (Prim.masked). *)

open Rig_edge
module Prim = Rig_edge_primitives
module R = Blindrf.Refuse

let passed = ref 0
let failed = ref 0

let check drv what ok =
  if ok then incr passed else incr failed;
  Printf.printf "%s %-22s %s\n%!" (if ok then "PASS" else "FAIL") drv what

let call f = Prim.masked f
let raises f = match call f with _ -> None | exception e -> Some e
let is_failure = function Some (Failure _) -> true | _ -> false
let is_invalid = function Some (Invalid_argument _) -> true | _ -> false
let ms = Thread.delay

(* a b c: 1 MiB of scratch each; d e f: 64 bytes; spin. *)
let bin =
  String.concat "\n"
    [ "hostmem-image 1"; "a nop 1048576"; "b nop 1048576"; "c nop 1048576"; "d nop 64"; "e nop 64"; "f nop 64";
      "spin spin 0"; "" ]

module C (P : Package) = struct
  module D = P.D

  let n = P.name
  let opener k = List.nth (call P.openers) k
  let dev k = (opener k).make ()

  let img d = match call (fun () -> D.image d bin) with Ok i -> i | Error e -> failwith e
  let entry i f = call (fun () -> D.entry i f)
  let prepare i f = call (fun () -> D.prepare i f)
  let unload i = call (fun () -> D.unload i)
  let is_entry = function Entry _ -> true | _ -> false

  (* Free Device bytes, to 64 KiB. *)
  let budget d =
    let u = 65536 in
    let rec bs lo hi =
      if hi - lo <= 1 then lo * u
      else
        let mid = (lo + hi) / 2 in
        match call (fun () -> D.alloc d Device (mid * u)) with
        | Some r -> call (fun () -> D.free d r); bs mid hi
        | None -> bs lo mid
    in
    bs 0 ((Hostmem.capacity / u) + 1)

  let attempts what = R.attempts (n ^ "/" ^ what)
  let refused what = R.refused (n ^ "/" ^ what)

  (* Runs f on a thread (masked there); Some result if done within [s]. *)
  let within s f =
    let res = ref None in
    let _ = Thread.create (fun () -> res := Some (call f)) () in
    let t0 = Unix.gettimeofday () in
    while !res = None && Unix.gettimeofday () -. t0 < s do ms 0.01 done;
    !res

  (* Work that runs [ms] milliseconds, committed with value v. *)
  let spin d i msec v =
    match entry i "spin" with
    | Entry h ->
        let q = (D.facts d).queue in
        let s = encode [ Launch { entry = h; args = [ Int64.of_int msec ] } ] in
        call (fun () -> q.room s) = Room && call (fun () -> q.submit s ~value:v) && call (fun () -> q.commit ())
    | _ -> false
end

(* The scenario of STOP-8: handles of an old device, unloaded after a new
   device of the same hardware made a region; true if that region survives. *)
module Stop8 (P : Package) = struct
  module X = C (P)
  open X

  let run () =
    let d0 = dev 1 in
    let i0 = img d0 in
    ignore (entry i0 "d");
    unload i0 (* reaper attempt 1: started *);
    let d1 = dev 0 in
    let i1 = img d1 in
    let h1 = match entry i1 "d" with Entry h -> h | _ -> -1L in
    call (fun () -> D.stop d1 ~fault:None);
    let d2 = dev 0 in
    let r2 = Option.get (call (fun () -> D.alloc d2 Device 64)) in
    let pl = D.locate d2 r2 in
    let same = pl.handle = h1 in
    let reach = Option.get pl.reach in
    call (fun () -> reach (Write { off = 0; from = "live" }));
    unload i1 (* reaper attempt 2: refused *);
    unload (img d2);
    ms 0.1;
    let alive =
      match call (fun () -> let b = Bytes.create 4 in reach (Read { off = 0; into = b }); Bytes.to_string b) with
      | "live" -> true
      | _ -> false
      | exception _ -> false
    in
    (same, refused "thread", alive)
end

let () =
  (* ---------------------------------------------------- conforming *)
  (let module X = C (Blindrf.Ok_busy_open) in
   let open X in
   let o = opener 0 in
   let r1 = raises o.make and r2 = raises o.make in
   let l = Prim.Lock.create "rfcheck.outer" in
   let r3 = Prim.Lock.protect l (fun () -> raises o.make) in
   let before = attempts "open" in
   let r4 = raises o.make in
   check n "1st open succeeds" (r1 = None);
   check n "2nd open refused: Failure busy" (is_failure r2);
   check n "in-lock make: Invalid_argument" (is_invalid r3);
   check n "in-lock make changed no count" (before = 2);
   check n "next open succeeds" (r4 = None));

  (let module X = C (Blindrf.Ok_retry_open) in
   let open X in
   let r = List.init 3 (fun _ -> raises (opener 0).make) in
   check n "3 opens succeed after retries" (List.for_all (( = ) None) r);
   check n "some opens were refused" (refused "open" >= 1));

  (let module X = C (Blindrf.Ok_sync_fallback) in
   let open X in
   let d = dev 0 in
   let b0 = budget d in
   let i = img d in
   List.iter (prepare i) [ "a"; "b"; "c" ];
   check n "3rd helper refused" (refused "thread" = 1);
   let es = List.map (entry i) [ "a"; "b"; "c" ] in
   check n "entries answer after refusal" (List.for_all is_entry es);
   check n "2nd entry makes nothing new" (entry i "c" = List.nth es 2);
   let a = attempts "thread" in
   prepare i "c";
   check n "prepare of entry starts nothing" (attempts "thread" = a);
   check n "3 MiB made" (budget d = b0 - (3 lsl 20));
   unload i;
   ms 0.05;
   check n "unload gives all back" (budget d = b0));

  (let module X = C (Blindrf.Ok_give_up) in
   let open X in
   let d = dev 0 in
   let i = img d in
   List.iter (prepare i) [ "d"; "e"; "f" ];
   check n "3rd helper refused" (refused "thread" = 1);
   let a = attempts "thread" in
   prepare i "f";
   check n "refused prepare left no mark" (attempts "thread" = a + 1);
   check n "entries answer" (List.for_all is_entry (List.map (entry i) [ "d"; "e"; "f" ]));
   unload i);

  (let module X = C (Blindrf.Ok_raise_clean) in
   let open X in
   let d = dev 0 in
   let i = img d in
   prepare i "a";
   prepare i "b";
   ms 0.05;
   let b1 = budget d in
   let r = raises (fun () -> D.prepare i "c") in
   check n "refused prepare raises Failure" (is_failure r);
   check n "...having changed nothing" (budget d = b1);
   check n "a later prepare of c starts anew" (raises (fun () -> D.prepare i "c") = None);
   check n "entries answer" (List.for_all is_entry (List.map (entry i) [ "a"; "b"; "c" ]));
   unload i);

  (let module X = C (Blindrf.Ok_burst_worker) in
   let open X in
   let d = dev 0 in
   let b0 = budget d in
   let i = img d in
   List.iter (fun f -> prepare i f; ms 0.05) [ "a"; "b"; "c"; "d"; "e"; "f" ];
   check n "worker refused at least once" (refused "thread" >= 1);
   let es = List.map (entry i) [ "a"; "b"; "c"; "d"; "e"; "f" ] in
   check n "entries answer" (List.for_all is_entry es);
   check n "2nd entries make nothing new" (List.map (entry i) [ "a"; "b"; "c"; "d"; "e"; "f" ] = es);
   unload i;
   ms 0.05;
   check n "unload gives all back" (budget d = b0));

  (let module X = C (Blindrf.Ok_exn_safe_helper) in
   let open X in
   let d = dev 0 in
   let b0 = budget d in
   let i = img d in
   List.iter (prepare i) [ "a"; "b"; "c"; "d"; "e" ];
   let es = List.map (entry i) [ "a"; "b"; "c"; "d"; "e" ] in
   check n "helper start refused" (refused "thread" >= 1);
   check n "helper's staging refused" (refused "staging" >= 1);
   check n "entries answer" (List.for_all is_entry es);
   let made = b0 - budget d in
   check n "3 MiB + 128 B made (to 64 KiB)" (made >= 3 lsl 20 && made <= (3 lsl 20) + 65536);
   unload i;
   ms 0.05;
   check n "nothing leaked" (budget d = b0));

  (let module X = C (Blindrf.Ok_nomem_retry) in
   let open X in
   let d = dev 0 in
   let i = img d in
   check n "entry d" (is_entry (entry i "d"));
   let b1 = budget d in
   let r = entry i "a" in
   check n "refused: No_memory 1 MiB" (r = No_memory 1048576);
   check n "...having made nothing" (budget d = b1);
   check n "asked again: Entry" (is_entry (entry i "a"));
   unload i);

  (let module X = C (Blindrf.Ok_alloc_none) in
   let open X in
   let d = dev 0 in
   let rs = List.init 3 (fun _ -> call (fun () -> D.alloc d Mapped 64)) in
   check n "3rd Mapped alloc: None" (match rs with [ Some _; Some _; None ] -> true | _ -> false);
   check n "Pinned fallback works" (call (fun () -> D.alloc d Pinned 64) <> None);
   check n "Device unaffected" (call (fun () -> D.alloc d Device 64) <> None));

  (let module S = Stop8 (Blindrf.Ok_reaper_unload) in
   let same, refusals, alive = S.run () in
   let n = Blindrf.Ok_reaper_unload.name in
   check n "STOP-8 scenario: handles collide" same;
   check n "reaper refused" (refusals = 1);
   check n "new device's region untouched" alive;
   let module X = C (Blindrf.Ok_reaper_unload) in
   let d = X.dev 1 in
   let b0 = X.budget d in
   let i = X.img d in
   ignore (X.entry i "a");
   X.unload i (* attempt 3: reaper *);
   ms 0.05;
   let i = X.img d in
   ignore (X.entry i "b");
   X.unload i (* attempt 4: refused, inline *);
   check n "both unloads give all back" (X.budget d = b0 && X.refused "thread" = 2));

  (let module X = C (Blindrf.Ok_janitor_stop) in
   let open X in
   let run () =
     let d = dev 0 in
     let i = img d in
     let b = budget d in
     let ok = spin d i 3000 7 in
     let t0 = Unix.gettimeofday () in
     call (fun () -> D.stop d ~fault:None);
     let dt = Unix.gettimeofday () -. t0 in
     let t1 = Unix.gettimeofday () in
     while D.signaled d <> 7 && Unix.gettimeofday () -. t1 < 2. do ms 0.01 done;
     ms 0.05;
     (ok, dt, D.signaled d, budget d - b)
   in
   List.iter
     (fun k ->
       let ok, dt, w, freed = run () in
       check n (Printf.sprintf "stop %d: work was running" k) ok;
       check n (Printf.sprintf "stop %d: does not wait (%.0f ms)" k (dt *. 1000.)) (dt < 0.3);
       check n (Printf.sprintf "stop %d: word gets last value" k) (w = 7);
       check n (Printf.sprintf "stop %d: staging released" k) (freed >= Blindrf.Ok_janitor_stop.staging_bytes))
     [ 1; 2 ];
   check n "janitor refused once" (refused "thread" = 1));

  (* ------------------------------------------------------- broken *)
  (let module X = C (Blindrf.Stuck_mark) in
   let open X in
   let d = dev 0 in
   let i = img d in
   List.iter (prepare i) [ "d"; "e"; "f" ];
   check n "3rd helper refused" (refused "thread" = 1);
   check n "entries d e answer" (is_entry (entry i "d") && is_entry (entry i "e"));
   let a = attempts "thread" in
   prepare i "f";
   check n "later prepare of f starts nothing" (attempts "thread" = a);
   check n "BUG CODE-6: entry f never answers" (within 0.5 (fun () -> D.entry i "f") = None));

  (let module X = C (Blindrf.Leaky_raise) in
   let open X in
   let d = dev 0 in
   let i = img d in
   prepare i "d";
   prepare i "e";
   ms 0.05;
   let b1 = budget d in
   let r = raises (fun () -> D.prepare i "c") in
   check n "refused prepare raises" (is_failure r);
   check n "BUG CODE-7: it changed the budget" (budget d = b1 - (1 lsl 20));
   check n "entry c still answers" (is_entry (entry i "c")));

  (let module X = C (Blindrf.Nomem_leak) in
   let open X in
   let d = dev 0 in
   let i = img d in
   ignore (entry i "d");
   let b1 = budget d in
   let r = entry i "a" in
   check n "refused: No_memory" (r = No_memory 1048576);
   check n "BUG CODE-3: No_memory having made 1 MiB" (budget d = b1 - (1 lsl 20));
   check n "asked again: Entry" (is_entry (entry i "a")));

  (let module X = C (Blindrf.Claim_first) in
   let open X in
   let o = opener 1 in
   check n "open outside a lock works" (raises o.make = None);
   let l = Prim.Lock.create "rfcheck.outer2" in
   let r = Prim.Lock.protect l (fun () -> raises o.make) in
   check n "in-lock make: Invalid_argument" (is_invalid r);
   check n "BUG LOCK-4: every later open refused" (is_failure (raises o.make) && is_failure (raises o.make)));

  (let module S = Stop8 (Blindrf.Deferred_reap) in
   let same, refusals, alive = S.run () in
   let n = Blindrf.Deferred_reap.name in
   check n "handles collide" same;
   check n "reaper refused" (refusals = 1);
   check n "BUG STOP-8: new device's region freed" (not alive));

  Printf.printf "\n%d passed, %d failed\n%!" !passed !failed;
  exit (if !failed = 0 then 0 else 1)
