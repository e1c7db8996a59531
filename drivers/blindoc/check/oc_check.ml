module Prim = Rig_edge_primitives
open Rig_edge

let () = Dynlink.loadfile Sys.argv.(1)

let run name =
  let (module P : Package) = Option.get (Rig_edge_registry.find name) in
  let module D = P.D in
  let ds = List.map (fun (o : D.t opener) -> o.make ()) (P.openers ()) in
  let d0 = List.hd ds in
  let q0 = (D.facts d0).queue in
  let stop = Atomic.make false in
  let region d = Option.get (D.alloc d Device 4096) in
  let fill d r =
    let q = (D.facts d).queue in
    let s = encode [ Fill { dst = (D.locate d r).handle; off = 0; len = 16; byte = 1 } ] in
    let rec ask k = match q.room s with Room -> () | Grow -> if k > 0 then (ignore (D.grow d); ask (k - 1)) in
    ask 4; ignore (q.submit s ~value:1 : bool); ignore (q.commit () : bool)
  in
  let bg f = Thread.create (fun () -> Prim.masked (fun () -> while not (Atomic.get stop) do f () done)) () in
  let measure label mk =
    Atomic.set stop false;
    let ths = mk () in
    Thread.delay 0.01;
    let held =
      Prim.masked (fun () ->
          Prim.account_queued_in_waits true;
          let t0, h0 = Prim.time_in_waits () in
          (try D.sleep d0 ~seen:(D.signaled d0) ~still_ms:100 with _ -> ());
          let t1, h1 = Prim.time_in_waits () in
          Prim.account_queued_in_waits false;
          Printf.sprintf "wait %.1f ms held %.1f ms" (t1 -. t0) (h1 -. h0))
    in
    Atomic.set stop true;
    List.iter Thread.join ths;
    Printf.printf "%-18s %-10s %s\n%!" name label held
  in
  let r1 = region d0 in
  measure "alone" (fun () -> []);
  measure "alloc" (fun () -> [ bg (fun () -> match D.alloc d0 Device 64 with Some r -> D.free d0 r | None -> ()) ]);
  measure "grow" (fun () -> [ bg (fun () -> ignore (D.grow d0)) ]);
  measure "sleeper" (fun () -> [ bg (fun () -> try D.sleep d0 ~seen:(D.signaled d0) ~still_ms:20 with _ -> ()) ]);
  measure "submits" (fun () -> [ bg (fun () -> fill d0 r1) ]);
  measure "feeding" (fun () ->
      [ bg (fun () ->
            let s = encode [ Fill { dst = (D.locate d0 r1).handle; off = 0; len = 16; byte = 1 } ] in
            (match q0.room s with Room -> ignore (q0.submit s ~value:1 : bool) | Grow -> ignore (D.grow d0));
            Thread.delay 0.005;
            ignore (q0.commit () : bool)) ]);
  (match ds with
   | _ :: d1 :: _ ->
       let i = match D.image d1 P.kit.binary with Ok i -> i | Error e -> failwith e in
       let e = match D.entry i "spin" with Entry e -> e | _ -> failwith "spin" in
       measure "sibling" (fun () ->
           [ bg (fun () ->
                 let q = (D.facts d1).queue in
                 let s = encode [ Launch { entry = e; args = [ 30L ] } ] in
                 let rec ask k = match q.room s with Room -> () | Grow -> if k > 0 then (ignore (D.grow d1); ask (k - 1)) in
                 ask 4; ignore (q.submit s ~value:1); ignore (q.commit ());
                 Thread.delay 0.03) ])
   | _ -> ());
  List.iter (fun d -> D.stop d ~fault:None) ds

let () =
  for k = 2 to Array.length Sys.argv - 1 do run Sys.argv.(k) done
