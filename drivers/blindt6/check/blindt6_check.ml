open Rig_edge
module Prim = Rig_edge_primitives

let now () = Unix.gettimeofday ()

let run (module P : Package) =
  let module D = P.D in
  let o = List.hd (P.openers ()) in
  let d = o.make () in
  let f = D.facts d in
  let q = f.queue in
  let r = Option.get (D.alloc d Device 64) in
  let h = (D.locate d r).handle in
  let i = match D.image d P.kit.binary with Ok i -> i | Error e -> failwith e in
  let spin = match D.entry i "spin" with Entry e -> e | _ -> failwith "entry" in
  let sub parts value =
    let s = encode parts in
    (match q.room s with Room -> () | Grow -> ignore (D.grow d); assert (q.room s = Room));
    assert (q.submit s ~value);
    assert (q.commit ())
  in
  (* 1: sleep (seen 0, 800 ms) on A; at 50 ms, B submits a fill (value 1). *)
  let t0 = now () in
  let slept = ref 0. in
  let a = Thread.create (fun () -> Prim.masked (fun () -> D.sleep d ~seen:0 ~still_ms:800); slept := now () -. t0) () in
  Thread.delay 0.05;
  let t1 = now () in
  Prim.masked (fun () -> sub [ Fill { dst = h; off = 0; len = 64; byte = 1 } ] 1);
  let sc = now () -. t1 in
  Thread.join a;
  (* 2: B commits spin 50 (value 2); at 20 ms A sleeps seen 1 (800 ms) while a
     second commit (spin 0, value 3) may run. *)
  let t0 = now () in
  let b = Thread.create (fun () -> Prim.masked (fun () ->
    sub [ Launch { entry = spin; args = [ 60L ] } ] 2;
    sub [ Launch { entry = spin; args = [ 0L ] } ] 3)) () in
  Thread.delay 0.02;
  let slept2 = ref 0. in
  let w = ref 0 in
  Prim.masked (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:800);
  slept2 := now () -. t0; w := D.signaled d;
  Thread.join b;
  while D.signaled d <> 3 do Prim.masked (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:100) done;
  Prim.masked (fun () -> D.stop d ~fault:None);
  Printf.printf "%-28s submit+commit during sleep %4.0f ms, that sleep %4.0f ms | sleep2 %4.0f ms (word %d)  total %4.0f\n%!"
    P.name (sc *. 1000.) (!slept *. 1000.) (!slept2 *. 1000.) !w ((now () -. t0) *. 1000.)

let () = List.iter run Blindt6.packages
