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
            (* room for s, growing as rig does while room answers Grow *)
            let rec room_for s =
              match P.masked (fun () -> q.room s) with
              | Rig_edge.Room -> ()
              | Grow -> ignore (P.masked (fun () -> D.grow d)); room_for s
            in
            (* One Fill of the region with [byte] as [value]; then watch
               the work's bytes and the word, never sleeping on the device:
               signaled alone must show the value. *)
            let show ~value ~byte =
              let s = Rig_edge.encode [ Rig_edge.Fill { dst = place.handle; off = 0; len = 64; byte } ] in
              room_for s;
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
            (* Work that never ends (a Fill, then kit.hang): the word can
               never show its value, so neither may signaled.  A
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
                  (* the hang last: a word written as the last part
                     starts, not once it ran, shows here too *)
                  let s = Rig_edge.encode [ Rig_edge.Fill { dst = place.handle; off = 0; len = 64; byte = 0 };
                                            Rig_edge.Launch { entry = h; args = [] } ] in
                  room_for s;
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
            (* 1024 works whose values each change both 32-bit halves of the
               word (k * 2^32 + 0xFFFFFFFF, then (k+1) * 2^32), while
               signaled is read as fast as it answers: each answer must be
               a value given to submit, never one made of two halves of
               different writes, and never go back.  In 32 rounds of 16,
               each committed right before its reads, so that the device
               writes while this thread reads on another core, then one of
               512, long enough that the device's thread is preempted
               between two writes where both share one core.  Returns the
               last value submitted and the findings. *)
            let torn ~after =
              let k0 = (after lsr 32) + 1 in
              let values = Array.init 1024 (fun i -> ((k0 + ((i + 1) / 2)) lsl 32) lor (if i land 1 = 0 then 0xFFFF_FFFF else 0)) in
              let given = Hashtbl.create 1024 in
              Hashtbl.replace given after ();
              let submitted = ref after and failed = ref false in
              let submit v =
                let s = Rig_edge.encode [ Rig_edge.Fill { dst = place.handle; off = 0; len = 4; byte = v land 0xff } ] in
                (* a failed submit loses the device: no value after it *)
                if not !failed then
                  if Probes.has_room ~room:(fun () -> P.masked (fun () -> q.room s)) ~grow:(fun () -> P.masked (fun () -> D.grow d)) ~grows:3
                     && P.masked (fun () -> q.submit s ~value:v) then begin
                    Hashtbl.replace given v ();
                    submitted := v
                  end
                  else failed := true
              in
              let deadline = Unix.gettimeofday () +. 1.5 in
              let rec spin n prev ~until =
                let w = D.signaled d in
                if not (Hashtbl.mem given w) && w > after then
                  Error (finding "TIME-1" "signaled answered 0x%x, a value no submit was given (the values were k * 2^32 + 0xFFFFFFFF and (k+1) * 2^32, from 0x%x): a word read in parts of different writes" w values.(0))
                else if w < prev then Error (finding "TIME-1" "signaled answered 0x%x after 0x%x: the word went back" w prev)
                else if w >= until then Ok w
                else if n land 255 = 0 && Unix.gettimeofday () > deadline then Ok w
                else begin
                  if n land 255 = 0 then Thread.yield ();
                  spin (n + 1) w ~until
                end
              in
              let rec rounds first sizes prev =
                match sizes with
                | [] -> []
                | _ when !failed || Unix.gettimeofday () > deadline -> []
                | n :: sizes -> (
                    for i = first to first + n - 1 do submit values.(i) done;
                    ignore (P.masked (fun () -> q.commit ()));
                    match spin 1 prev ~until:!submitted with
                    | Error f -> [ f ]
                    | Ok w -> rounds (first + n) sizes w)
              in
              let found = rounds 0 (List.init 32 (fun _ -> 16) @ [ 512 ]) 0 in
              (!submitted, found)
            in
            (* The word's own bytes, where the driver keeps a word the host
               reaches (locate of facts.own_word): its value as a 64-bit
               little-endian integer, None where it cannot be read. *)
            let word_bytes =
              match facts.own_word with
              | None -> None
              | Some w -> (
                  match P.masked (fun () -> D.locate d w) with
                  | exception _ -> None
                  | { reach = Some f; size; _ } when size >= 8 ->
                      Some
                        (fun () ->
                          let into = Bytes.create 8 in
                          match P.masked (fun () -> f (Rig_edge.Read { off = 0; into })) with
                          | () -> Some (Int64.to_int (Bytes.get_int64_le into 0))
                          | exception _ -> None)
                  | _ -> None)
            in
            (* Work done and no more given, the word holds its value for
               good: signaled, called only then, must answer it.  The work
               is waited for through the word's bytes alone (never
               signaled), so that a signaled that answers a copy of an
               earlier read (a cache refreshed now and then) shows it.  Only
               where the bytes read as the value signaled answered before
               (their layout is the driver's); three rounds. *)
            let cached ~from =
              match word_bytes with
              | None -> (from, [], false)
              | Some bytes when bytes () <> Some from -> (from, [], false)
              | Some bytes ->
                  let rec round v k =
                    if k = 0 then (v - 1, [], false)
                    else
                      let s = Rig_edge.encode [ Rig_edge.Fill { dst = place.handle; off = 0; len = 4; byte = v land 0xff } ] in
                      if not (Probes.has_room ~room:(fun () -> P.masked (fun () -> q.room s)) ~grow:(fun () -> P.masked (fun () -> D.grow d)) ~grows:3
                              && P.masked (fun () -> q.submit s ~value:v) && P.masked (fun () -> q.commit ()))
                      then (v, [], true)
                      else
                        let deadline = Unix.gettimeofday () +. settle_s in
                        let rec settle () =
                          match bytes () with
                          | Some b when b = v -> true
                          | _ when Unix.gettimeofday () > deadline -> false
                          | _ -> Thread.delay 0.001; settle ()
                        in
                        if not (settle ()) then (v, [], true)
                        else
                          let w = D.signaled d in
                          if w <> v && bytes () = Some v then
                            ( v,
                              [ finding "TIME-1"
                                  "with the work of value %d done and no other given, the driver's word held %d (its bytes, read through locate of facts.own_word, before and after the call) and signaled answered %d: signaled does not answer the value in the word"
                                  v v w ],
                              false )
                          else round (v + 1) (k - 1)
                  in
                  round (from + 1) 3
            in
            let byte = 1 + (seed mod 250) in
            let found = show ~value:1 ~byte in
            (* [given]: the last value given to submit; [refused]: a submit
               or a wait of the cached rounds failed (the device may be
               lost), and nothing more is asked of it. *)
            let given, found, refused = if found = [] then cached ~from:1 else (1, found, false) in
            (* Values are 64-bit and increase per device: the next one at
               2^32 or more, which a word read through 32 bits loses. *)
            let last = if found = [] && not refused then (1 lsl 32) + 1 + (seed mod 1000) else given in
            let found = if found = [] && not refused then show ~value:last ~byte:(1 + (byte mod 250)) else found in
            let last, found = if found = [] && not refused then torn ~after:last else (last, found) in
            let hung_value, found = if found = [] && not refused then ahead_of_hang ~value:(last + 1) else (None, found) in
            let last = Option.value hung_value ~default:last in
            P.masked (fun () -> D.stop d ~fault:(Option.map (fun _ -> "hang bound") hung_value));
            (* rig drops signaled's faults after stop, but reads the word
               through it until the word shows the last value: a signaled
               that only raises leaves rig waiting for good *)
            let raised = ref None and answered = ref false in
            let reached =
              Probes.word_reaches ~ms:2000 ~last ~signaled:(fun () ->
                  match D.signaled d with
                  | w -> answered := true; w
                  | exception e -> raised := Some e; raise e)
            in
            let found =
              match !raised with
              | Some e when found = [] && (not reached) && not !answered ->
                  [ finding "TIME-1" "after stop, signaled raised %s at each call for 2 s, where rig reads the word through it until it shows the last value %d" (Printexc.to_string e) last ]
              | _ -> found
            in
            if reached || found <> [] then begin
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
