(* The lock-order probe; see order_probes.mli. *)

open Case
module P = Rig_edge_primitives

module Probe (Pk : Rig_edge.Package) = struct
  module D = Pk.D

  (* Calls each driver function at least once, as rig would, on one device;
     answers nothing: the record of lock orders is what is looked at. *)
  let workload ~seed d =
    let m f = P.masked f in
    let facts = D.facts d in
    let sizes = List.init 4 (fun i -> 4 * (1 + ((seed + i) mod 16))) in
    let regions = List.filter_map (fun n -> m (fun () -> D.alloc d Rig_edge.Device n)) sizes in
    let last = ref 0 in
    (match m (fun () -> D.image d Pk.kit.binary) with
    | Error _ -> ()
    | Ok im ->
        Option.iter (fun f -> m (fun () -> D.prepare im f)) Pk.kit.spin;
        let launch =
          match Pk.kit.spin with
          | Some f -> ( match m (fun () -> D.entry im f) with Rig_edge.Entry h -> [ Rig_edge.Launch { entry = h; args = [ 1L ] } ] | _ -> [])
          | None -> []
        in
        let fills = List.map (fun r -> Rig_edge.Fill { dst = (D.locate d r).handle; off = 0; len = 4; byte = seed land 255 }) regions in
        let s = Rig_edge.encode (fills @ launch) in
        if Probes.has_room ~room:(fun () -> m (fun () -> facts.queue.room s)) ~grow:(fun () -> m (fun () -> D.grow d)) ~grows:3 && m (fun () -> facts.queue.submit s ~value:1) && m (fun () -> facts.queue.commit ()) then begin
          last := 1;
          let rec wait k =
            let w = D.signaled d in
            if w < 1 && k > 0 then ((try m (fun () -> D.sleep d ~seen:w ~still_ms:20) with _ -> ()); wait (k - 1))
          in
          wait 250
        end;
        (* grow, as rig calls it, once a room answers RIG_GROW: fills of a
           region in more and more parts (at most 4096) until one does
           (blind lk-alloc-grow-order takes its locks in grow) *)
        (match regions with
        | r :: _ ->
            let dst = (D.locate d r).handle in
            let submit s =
              if m (fun () -> facts.queue.submit s ~value:(!last + 1)) && m (fun () -> facts.queue.commit ()) then incr last
            in
            let rec go k =
              if k <= 4096 then
                let s = Rig_edge.encode (List.init k (fun i -> Rig_edge.Fill { dst; off = 0; len = 4; byte = i land 255 })) in
                match m (fun () -> facts.queue.room s) with
                | Rig_edge.Room -> submit s; go (2 * k)
                | Grow -> (
                    match m (fun () -> D.grow d) with
                    | Grown -> if m (fun () -> facts.queue.room s) = Rig_edge.Room then submit s
                    | Short _ -> ())
            in
            (try go 1 with _ -> ())
        | [] -> ());
        m (fun () -> D.stop d ~fault:None);
        (* after stop rig drops signaled's faults (TIME-2): so does this *)
        let rec drained k =
          (try D.signaled d >= !last with _ -> false) || (k > 0 && (Thread.delay 0.002; drained (k - 1))) in
        (* What free and unload raise after stop is other clauses'
           (STOP-5, STOP-7): this workload is only watched for lock orders. *)
        let after_stop f = try m f with _ -> () in
        if drained 1000 then begin
          List.iter (fun r -> after_stop (fun () -> D.free d r)) regions;
          after_stop (fun () -> D.unload im);
          Option.iter (fun w -> after_stop (fun () -> D.free d w)) facts.own_word
        end)

  let run ~seed =
    match Pk.openers () with
    | [] -> Not_applicable "the driver has no device"
    | o :: _ ->
        let d = P.masked o.make in
        workload ~seed d;
        Ran
          (List.map
             (fun (a, b) -> finding "LOCK-8" "the driver took lock %S inside %S, and %S inside %S elsewhere" b a a b)
             (P.Lock.order_inversions ()))
end

let cases =
  [
    {
      name = "probe.LOCK-8.one-order";
      clauses = [ "LOCK-8" ];
      run = (fun (module Pk : Rig_edge.Package) ~seed -> let module M = Probe (Pk) in M.run ~seed);
    };
  ]
