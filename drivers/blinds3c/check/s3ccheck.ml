(* s3ccheck: for each s3c-* driver, whether another OCaml thread gets to run
   while a sleep on an idle device blocks.

   On a new device of the driver (no work: the word never moves), the main
   thread sleeps as rig does (signals masked, the word read again after each
   return and the sleep asked again with what is left) through windows of
   150, 40, 150, 150, 20 and 150 ms, while an observer thread of ours spins
   in OCaml noting the time at each turn and yielding (Thread.yield: it
   wants to run, but hands the runtime at once to a thread waiting for it, so
   that the sleeper's waits end when they end).  The C side (s3ccheck_stubs.c)
   follows the sleeping thread through the runtime's blocking-section hooks
   and intersects the observer's pauses with the times the sleeper held the
   runtime: that is the time the sleep kept another OCaml thread from
   running.  A sleep whose waits release the runtime keeps it out only for
   the few microseconds of OCaml code around its waits (longer only when
   the OS takes the sleeper's CPU meanwhile); one that keeps the runtime in
   a wait keeps it out for that wait's length.  A stretch of [limit_ms] or
   more kept out in one piece is a wait's blocking step that kept the
   runtime.

   No sleep is used to synchronise: the observer's start is awaited with
   Thread.yield, its end with Thread.join; the only waits are the driver's
   sleeps, which are the measurement. *)

module Prim = Rig_edge_primitives

external install : unit -> unit = "s3cc_install"
external sleep_begin : unit -> unit = "s3cc_sleep_begin" [@@noalloc]
external sleep_end : unit -> unit = "s3cc_sleep_end" [@@noalloc]
external obs_note : unit -> unit = "s3cc_obs_note" [@@noalloc]
external reset : unit -> unit = "s3cc_reset"
external result : unit -> int * int * int * int * int * bool = "s3cc_result"
external now_ns : unit -> int = "s3cc_now_ns" [@@noalloc]

let windows = [ 150; 40; 150; 150; 20; 150 ]
let limit_ms = 5.0
let ms_of ns = float_of_int ns /. 1e6

let measure (module P : Rig_edge.Package) =
  let o = List.hd (Prim.masked P.openers) in
  let d = Prim.masked o.Rig_edge.make in
  reset ();
  let stop = Atomic.make false and started = Atomic.make false in
  let obs =
    Thread.create
      (fun () ->
        Atomic.set started true;
        while not (Atomic.get stop) do
          obs_note ();
          Thread.yield ()
        done;
        obs_note ())
      ()
  in
  while not (Atomic.get started) do
    Thread.yield ()
  done;
  let calls = ref 0 and t0 = now_ns () in
  List.iter
    (fun still ->
      let seen = P.D.signaled d in
      let deadline = now_ns () + (still * 1_000_000) in
      let rec go () =
        let rem = (deadline - now_ns ()) / 1_000_000 in
        if rem > 0 && P.D.signaled d = seen then begin
          let call () = Prim.masked (fun () -> P.D.sleep d ~seen ~still_ms:rem) in
          sleep_begin ();
          Fun.protect ~finally:sleep_end call;
          incr calls;
          go ()
        end
      in
      go ())
    windows;
  let elapsed = now_ns () - t0 in
  Atomic.set stop true;
  Thread.join obs;
  Prim.masked (fun () -> P.D.stop d ~fault:None);
  (!calls, elapsed, result ())

let () =
  install ();
  let bad = ref 0 in
  List.iter
    (fun (expect, p) ->
      let module P = (val p : Rig_edge.Package) in
      let calls, elapsed, (stolen, longest, held, gaps, turns, overflow) = measure p in
      let keeps = ms_of longest >= limit_ms in
      let ok = keeps = (expect <> "conforming") in
      if not ok then incr bad;
      Printf.printf
        "%-25s expect %-10s | %3d sleeps in %5.0f ms | sleeper held %6.1f ms | observer out %6.1f ms, %6.1f ms of it by \
         the sleeper, longest %6.1f ms | %s%s %s\n%!"
        P.name expect calls (ms_of elapsed) (ms_of held) (ms_of gaps) (ms_of stolen) (ms_of longest)
        (if keeps then "KEEPS the runtime" else "releases it")
        (if overflow then " (records overflowed)" else "")
        (if ok then "as expected" else "UNEXPECTED");
      ignore turns)
    Blinds3c.drivers;
  Printf.printf "%d of %d drivers as expected\n" (List.length Blinds3c.drivers - !bad) (List.length Blinds3c.drivers);
  exit (if !bad = 0 then 0 else 1)
