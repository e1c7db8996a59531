open Rig_edge
module Prim = Rig_edge_primitives

let find n = List.find (fun p -> let module P = (val p : Package) in P.name = n) Blindw.packages

(* TIME-5: nop (1) then fault (2); sleep ~seen:0 and then twice ~seen:1. *)
let time5 n =
  let (module P : Package) = find n in
  let module D = P.D in
  let d = (List.hd (P.openers ())).make () in
  let q = (D.facts d).queue in
  let i = match D.image d P.kit.binary with Ok i -> i | Error e -> failwith e in
  let e f = match D.entry i f with Entry e -> e | _ -> failwith "entry" in
  let spin = e "spin" and fault = e "fault" in
  let sub p v = let s = encode [ p ] in
    (match q.room s with Room -> () | Grow -> ignore (D.grow d); assert (q.room s = Room));
    assert (q.submit s ~value:v); assert (q.commit ()) in
  Prim.masked (fun () ->
      sub (Launch { entry = spin; args = [ 0L ] }) 1;
      while D.signaled d <> 1 do Thread.delay 0.001 done;
      sub (Launch { entry = fault; args = [] }) 2;
      Thread.delay 0.05;
      let r seen = match D.sleep d ~seen ~still_ms:50 with () -> "ret" | exception D.Fault _ -> "Fault" in
      let a = r 0 in let b = r 1 in let c = r 1 in
      Printf.printf "%-26s TIME-5: seen0 %s, seen1 %s, seen1 again %s\n%!" n a b c)

(* SIG-2: an unmoved sleep of 20 ms: waits entered, mask after. *)
let sig2 n =
  let (module P : Package) = find n in
  let module D = P.D in
  let d = (List.hd (P.openers ())).make () in
  Prim.masked (fun () ->
      let w0 = Prim.waits () in
      let t0 = Unix.gettimeofday () in
      D.sleep d ~seen:(D.signaled d) ~still_ms:20;
      let ms = (Unix.gettimeofday () -. t0) *. 1000. in
      Printf.printf "%-26s SIG-2: slept %3.0f ms, waits %d, rig set blocked after: %b\n%!" n ms
        (Prim.waits () - w0) (Prim.blocks_rig_set ()))

(* LOCK-3: at sampled allocations inside the call, holds () = 0 while the
   driver's uncounted Mutex is taken (try_lock fails). *)
let lock3 n name call probe =
  let seen = ref 0 and bad = ref 0 in
  let tracker = { Gc.Memprof.null_tracker with alloc_minor = (fun _ ->
      incr seen; if Prim.holds () = 0 && probe () then incr bad; None) } in
  let prof = Gc.Memprof.start ~sampling_rate:1.0 tracker in
  (try call () with e -> Printf.printf "raised %s\n" (Printexc.to_string e));
  Gc.Memprof.stop (); Gc.Memprof.discard prof;
  Printf.printf "%-26s LOCK-3 %s: %d sampled allocations, %d with holds 0 and the lock taken\n%!" n name !seen !bad

let lockchecks () =
  let mk n = let (module P : Package) = find n in P.openers () |> List.hd |> fun o -> (Obj.magic (o.make ()) : Blindw.t) in
  let img (d : Blindw.t) = match Blindw.Base.image d Hostmem.kit.binary with Ok i -> i | Error e -> failwith e in
  let held m = if Mutex.try_lock m then (Mutex.unlock m; false) else true in
  List.iter (fun n ->
      let d = mk n in let i = img d in
      lock3 n "entry" (fun () -> Prim.masked (fun () -> ignore (Blindw.Entry_stdlib_mutex.entry i "nop"))) (fun () -> held i.mu))
    [ "w-entry-stdlib-mutex" ];
  let d = mk "w-free-stats-mutex" in
  let r = Option.get (Hostmem.D.alloc d.h Device 64) in
  lock3 "w-free-stats-mutex" "free" (fun () -> Prim.masked (fun () -> Blindw.Free_stats_mutex.free d r)) (fun () -> held d.stats);
  (* prepare: the hook runs under pq_mu; holds () inside the hook *)
  let d = mk "w-prepare-c-lock-hook" in let i = img d in
  Prim.masked (fun () -> Blindw.Prepare_c_lock_hook.prepare i "nop");
  Printf.printf "%-26s LOCK-3 prepare: trace %S (written by the hook under pq_mu, holds %d then)\n%!"
    "w-prepare-c-lock-hook" (Buffer.contents d.trace) 0;
  (* counted cache: holds >= 1 at every allocation while making *)
  let d = mk "w-ok-entry-counted-cache" in let i = img d in
  lock3 "w-ok-entry-counted-cache" "entry" (fun () -> Prim.masked (fun () -> ignore (Blindw.Entry_counted_cache.entry i "nop")))
    (fun () -> held i.mu);
  (* prepare thread, then entry *)
  let d = mk "w-ok-prepare-thread" in let i = img d in
  Prim.masked (fun () ->
      Blindw.Prepare_thread.prepare i "nop"; Blindw.Prepare_thread.prepare i "nop";
      let a = Blindw.Prepare_thread.entry i "nop" and b = Blindw.Prepare_thread.entry i "nop" in
      Printf.printf "%-26s prepare+entry twice same: %b\n%!" "w-ok-prepare-thread" (a = b);
      Blindw.Prepare_thread.unload i);
  let d = mk "w-ok-free-deferred" in
  let r = Option.get (Hostmem.D.alloc d.h Device (3 lsl 20)) in
  Prim.masked (fun () -> Blindw.Free_deferred.free d r);
  Printf.printf "%-26s after free of 3 MiB (of 4), alloc again: %b\n%!" "w-ok-free-deferred"
    (Hostmem.D.alloc d.h Device (3 lsl 20) <> None)

let () =
  List.iter time5 [ "w-word-first"; "w-fault-once-cached"; "w-ok-sleep-at-once"; "w-ok-sliced-waits"; "w-sleep-plain-wait"; "w-wait-forgets-block" ];
  List.iter sig2 [ "w-sleep-plain-wait"; "w-wait-forgets-block"; "w-ok-sliced-waits"; "w-ok-sleep-at-once"; "w-word-first" ];
  lockchecks ()
