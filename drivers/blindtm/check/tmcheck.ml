(* tmcheck: for each tm-* driver, on an idle device:
   - unmoved: one sleep of still_ms on the unmoved word, for several
     still_ms (TIME-4: must be <= still_ms, plus noise);
   - moved: one sleep of still_ms 1000 with seen differing from the word
     (TIME-3: must be ~0);
   - work: a Fill submitted and committed, then rig's loop (sleep while
     unmoved, still_ms 1000) until the word reads its value;
   - first: on a fresh device, a Launch of the kit's spin (100 ms), then
     the device's first sleep, of still_ms 600: when it returns. *)
let ms_since t0 = (Unix.gettimeofday () -. t0) *. 1000.

let () =
  List.iter
    (fun (module P : Rig_edge.Package) ->
      let o = List.hd (P.openers ()) in
      let d = o.make () in
      let m f = Rig_edge_primitives.masked f in
      let seen = P.D.signaled d in
      let unmoved =
        List.map
          (fun still_ms ->
            let t0 = Unix.gettimeofday () in
            m (fun () -> P.D.sleep d ~seen ~still_ms);
            Printf.sprintf "%d->%.0f" still_ms (ms_since t0))
          [ 1; 100; 300; 600 ]
      in
      let t0 = Unix.gettimeofday () in
      m (fun () -> P.D.sleep d ~seen:(seen + 7) ~still_ms:1000);
      let moved = ms_since t0 in
      (* work *)
      let r = Option.get (m (fun () -> P.D.alloc d Rig_edge.Device 64)) in
      let pl = P.D.locate d r in
      let s = Rig_edge.encode [ Rig_edge.Fill { dst = pl.handle; off = 0; len = 64; byte = 1 } ] in
      let q = (P.D.facts d).queue in
      let t0 = Unix.gettimeofday () in
      assert (q.room s = Rig_edge.Room);
      assert (q.submit s ~value:1);
      assert (q.commit ());
      let sleeps = ref 0 in
      while P.D.signaled d <> 1 do
        incr sleeps;
        m (fun () -> P.D.sleep d ~seen:(P.D.signaled d) ~still_ms:1000)
      done;
      let work = ms_since t0 in
      m (fun () -> P.D.stop d ~fault:None);
      let d = o.make () in
      let i = Result.get_ok (m (fun () -> P.D.image d P.kit.binary)) in
      let e = match m (fun () -> P.D.entry i (Option.get P.kit.spin)) with Rig_edge.Entry e -> e | _ -> assert false in
      let s = Rig_edge.encode [ Rig_edge.Launch { entry = e; args = [ 100L ] } ] in
      let q = (P.D.facts d).queue in
      let t0 = Unix.gettimeofday () in
      assert (q.room s = Rig_edge.Room);
      assert (q.submit s ~value:1);
      assert (q.commit ());
      m (fun () -> P.D.sleep d ~seen:0 ~still_ms:600);
      let first = ms_since t0 in
      m (fun () -> P.D.stop d ~fault:None);
      Printf.printf "%-18s unmoved %-28s moved(1000) %5.0f  work %4.0f ms (%d sleeps)  first %4.0f\n%!" P.name
        (String.concat " " unmoved) moved work !sleeps first)
    Blindtm.packages
