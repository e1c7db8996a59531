(* s3check [still_ms]: for each s3-* driver, one sleep of still_ms on an
   idle device's unmoved word, while another OCaml thread counts its turns
   (each turn a Thread.yield).  A sleep whose waits release the runtime
   leaves that thread thousands of turns; one that keeps it, a handful. *)
let () =
  let still_ms = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 200 in
  List.iter
    (fun (module P : Rig_edge.Package) ->
      let o = List.hd (P.openers ()) in
      let d = o.make () in
      let seen = P.D.signaled d in
      let turns = Atomic.make 0 and stop = Atomic.make false in
      let th =
        Thread.create
          (fun () ->
            while not (Atomic.get stop) do
              Atomic.incr turns;
              Thread.yield ()
            done)
          ()
      in
      let t0 = Unix.gettimeofday () in
      let sleeps = ref 0 in
      (* rig's loop: sleep again while unmoved, until still_ms passed *)
      while (Unix.gettimeofday () -. t0) *. 1000. < float still_ms do
        incr sleeps;
        let left = still_ms - int_of_float ((Unix.gettimeofday () -. t0) *. 1000.) in
        Rig_edge_primitives.masked (fun () -> P.D.sleep d ~seen ~still_ms:(max 1 left))
      done;
      let dt = (Unix.gettimeofday () -. t0) *. 1000. in
      let n = Atomic.get turns in
      Atomic.set stop true;
      Thread.join th;
      P.D.stop d ~fault:None;
      Printf.printf "%-20s %6.0f ms  %3d sleeps  other thread's turns: %d\n%!" P.name dt !sleeps n)
    Blinds3.packages
