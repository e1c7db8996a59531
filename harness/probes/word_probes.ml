(* The signaled probe; see word_probes.mli. *)

open Case
module P = Rig_edge_primitives

(* How long the word may take to show a value once the work's bytes show:
   generous, since only a signaled that never reads the word should fail. *)
let settle_s = 2.0

module Probe (Pk : Rig_edge.Package) = struct
  module D = Pk.D

  let run ~seed =
    match Pk.openers () with
    | [] -> Not_applicable "the driver has no device"
    | o :: _ -> (
        let d = P.masked o.make in
        let facts = D.facts d in
        (* Host memory to watch work through: Mapped, or Pinned where
           alloc of Mapped is None, as rig falls back (GUAR-6). *)
        let host =
          match P.masked (fun () -> D.alloc d Rig_edge.Mapped 64) with
          | Some r -> Some r
          | None -> P.masked (fun () -> D.alloc d Rig_edge.Pinned 64)
        in
        match host with
        | None -> P.masked (fun () -> D.stop d ~fault:None); Not_applicable "no Mapped or Pinned memory to watch work through"
        | Some r ->
            let place = D.locate d r in
            let q = facts.queue in
            let read () =
              match place.reach with
              | None -> None
              | Some f ->
                  let into = Bytes.create 1 in
                  P.masked (fun () -> f (Rig_edge.Read { off = 63; into }));
                  Some (Char.code (Bytes.get into 0))
            in
            (* One Fill of the region with [byte] as [value]; then watch
               the work's bytes and the word, never sleeping on the device:
               signaled alone must show the value. *)
            let show ~value ~byte =
              let s = Rig_edge.encode [ Rig_edge.Fill { dst = place.handle; off = 0; len = 64; byte } ] in
              let rec fit () = match P.masked (fun () -> q.room s) with
                | Rig_edge.Room -> ()
                | Grow -> ignore (P.masked (fun () -> D.grow d)); fit () in
              fit ();
              ignore (P.masked (fun () -> q.submit s ~value));
              ignore (P.masked (fun () -> q.commit ()));
              let deadline = Unix.gettimeofday () +. settle_s in
              let rec watch filled_at =
                let w = D.signaled d in
                if w >= value then []
                else
                  let now = Unix.gettimeofday () in
                  let filled_at = match filled_at with None when read () = Some byte -> Some now | x -> x in
                  match filled_at with
                  | Some t when now -. t > settle_s ->
                      [ finding "TIME-1" "the work's bytes showed %.1f s ago and signaled still answers %d, not %d" settle_s w value ]
                  | None when now > deadline +. settle_s ->
                      [ finding "TIME-1" "neither the work's bytes nor signaled showed the work of value %d after %.0f s" value (2. *. settle_s) ]
                  | _ -> Thread.delay 0.001; watch filled_at
              in
              watch None
            in
            let byte = 1 + (seed mod 250) in
            let found = show ~value:1 ~byte in
            (* Values are 64-bit and increase per device: the next one at
               2^32 or more, which a word read through 32 bits loses. *)
            let last = if found = [] then (1 lsl 32) + 1 + (seed mod 1000) else 1 in
            let found = if found = [] then show ~value:last ~byte:(1 + (byte mod 250)) else found in
            P.masked (fun () -> D.stop d ~fault:None);
            if Probes.word_reaches ~signaled:(fun () -> D.signaled d) ~last ~ms:2000 || found <> [] then begin
              (try P.masked (fun () -> D.free d r) with _ -> ());
              Option.iter (fun w -> try P.masked (fun () -> D.free d w) with _ -> ()) facts.own_word
            end;
            Ran found)
end

let cases =
  [
    {
      name = "probe.TIME-1.signaled-reads-word";
      clauses = [ "TIME-1" ];
      run = (fun (module Pk : Rig_edge.Package) ~seed -> let module M = Probe (Pk) in M.run ~seed);
    };
  ]

let signaled_wrong (module P : Rig_edge.Package) ~seed =
  match List.find_opt (fun (c : Case.t) -> List.mem "TIME-1" c.clauses) cases with
  | None -> None
  | Some c -> ( match c.run (module P) ~seed with Case.Ran (f :: _) when f.clause = "TIME-1" -> Some f | _ -> None)
