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
                (* signaled reads the word with acquire order, and the word
                   shows a value once its work is done: then the work's
                   bytes show too *)
                if w >= value then
                  match read () with
                  | Some b when b <> byte -> [ finding "TIME-1" "signaled answered %d, yet the Fill of the work of value %d does not show in host memory: signaled is ahead of the word" w value ]
                  | _ -> []
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
            (* Work that never ends (kit.hang), a Fill behind it: the word
               can never show its value, so neither may signaled.  A
               signaled that answers from anything but the word (the last
               value submitted, say) shows it at once.  Returns the value
               submitted, if any, and the findings. *)
            let image = ref None in
            let ahead_of_hang ~value =
              let hang_entry =
                match Pk.kit.hang with
                | None -> None
                | Some fn -> (
                    match P.masked (fun () -> D.image d Pk.kit.binary) with
                    | Ok im -> (
                        image := Some im;
                        match P.masked (fun () -> D.entry im fn) with Rig_edge.Entry h -> Some h | _ -> None)
                    | Error _ -> None)
              in
              match hang_entry with
              | None -> (None, [])
              | Some h ->
                  let s = Rig_edge.encode [ Rig_edge.Launch { entry = h; args = [] };
                                            Rig_edge.Fill { dst = place.handle; off = 0; len = 64; byte = 0 } ] in
                  let rec fit () = match P.masked (fun () -> q.room s) with
                    | Rig_edge.Room -> ()
                    | Grow -> ignore (P.masked (fun () -> D.grow d)); fit () in
                  fit ();
                  if not (P.masked (fun () -> q.submit s ~value) && P.masked (fun () -> q.commit ())) then (Some value, [])
                  else
                    let rec watch k =
                      let w = D.signaled d in
                      if w >= value then
                        [ finding "TIME-1" "signaled answered %d while the work of value %d hangs (kit.hang): the word cannot show a value whose work has not ended" w value ]
                      else if k = 0 then []
                      else (Thread.delay 0.001; watch (k - 1))
                    in
                    (Some value, watch 20)
            in
            let byte = 1 + (seed mod 250) in
            let found = show ~value:1 ~byte in
            (* Values are 64-bit and increase per device: the next one at
               2^32 or more, which a word read through 32 bits loses. *)
            let last = if found = [] then (1 lsl 32) + 1 + (seed mod 1000) else 1 in
            let found = if found = [] then show ~value:last ~byte:(1 + (byte mod 250)) else found in
            let hung_value, found = if found = [] then ahead_of_hang ~value:(last + 1) else (None, found) in
            let last = Option.value hung_value ~default:last in
            P.masked (fun () -> D.stop d ~fault:(Option.map (fun _ -> "hang bound") hung_value));
            if Probes.word_reaches ~signaled:(fun () -> D.signaled d) ~last ~ms:2000 || found <> [] then begin
              (try P.masked (fun () -> D.free d r) with _ -> ());
              Option.iter (fun im -> try P.masked (fun () -> D.unload im) with _ -> ()) !image;
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
