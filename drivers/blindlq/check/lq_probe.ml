(* Does Prim.Lock.protect leave its lock taken when an exception is raised
   at the k-th allocation after it starts (a Memprof callback, as an
   asynchronous exception at an allocation)? *)
module Prim = Rig_edge_primitives
exception Async
let count = ref 0
let bump () = count := !count + 1
let try_k k =
  let l = Prim.Lock.create "probe" in
  let n = ref 0 in
  let tracker = { Gc.Memprof.null_tracker with
    alloc_minor = (fun _ -> incr n; if !n = k then raise Async; None);
    alloc_major = (fun _ -> incr n; if !n = k then raise Async; None) } in
  let _ = Gc.Memprof.start ~sampling_rate:1.0 tracker in
  let r = (try Prim.Lock.protect l bump; "ok" with Async -> "async") in
  Gc.Memprof.stop ();
  let after = (try Prim.Lock.protect l bump; "free" with e -> Printexc.to_string e) in
  Printf.printf "k=%d allocs=%d %s holds=%d then %s\n%!" k !n r (Prim.holds ()) after;
  while Prim.holds () > 0 do Prim.give () done
let () = for k = 1 to 8 do try_k k done;
  (* same inside a shield, as the finaliser does *)
  let l = Prim.Lock.create "probe2" in
  let n = ref 0 in
  let tracker = { Gc.Memprof.null_tracker with
    alloc_minor = (fun _ -> incr n; if !n = 2 then raise Async; None) } in
  let _ = Gc.Memprof.start ~sampling_rate:1.0 tracker in
  let r = (try Prim.shield (fun () -> Prim.Lock.protect l bump); "ok" with Async -> "async") in
  Gc.Memprof.stop ();
  let after = (try Prim.Lock.protect l bump; "free" with e -> Printexc.to_string e) in
  Printf.printf "shield: allocs=%d %s holds=%d then %s\n%!" !n r (Prim.holds ()) after
