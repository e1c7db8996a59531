(* Stopping probes (STOP-2 ... STOP-8); see stop_probes.mli. *)

open Rig_edge
open Probes

(* STOP-2: stop returns at once with work hanging. *)
let stop2_no_wait (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-2" ~seed (fun s ->
      let hang = K.need_item "hang" P.kit.hang in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "hang" hang in
      ignore (K.launch dev h "hang");
      dev.hung <- true;
      Thread.delay (0.02 +. (0.01 *. float_of_int (K.int s 5)));
      dev.lost <- Some "hang bound";
      (match K.stop s dev ~bound_ms:9000 with
      | K.Stop_returned t | K.Stop_raised (_, t) ->
          if t > 2.0 then K.flag s "with work hanging, stop took %.0f ms to return" (t *. 1000.));
      (* A stop that waits for running work but not for ever (a drain
         bounded at a second) returns as the work ends: with twice the work
         it takes about twice as long.  A stop slow for reasons of its own
         takes as long either way, and one that does not wait, no time. *)
      match P.kit.spin with
      | None -> ()
      | Some spin ->
          let stop_during ms =
            let dev = K.open_first s in
            let h = K.kit_entry s dev "spin" spin in
            ignore (K.submit_or_skip dev [ Launch { entry = h; args = [ Int64.of_int ms ] } ] "a spin launch");
            dev.lost <- Some "hang bound";
            match K.stop s dev ~bound_ms:9000 with K.Stop_returned t | K.Stop_raised (_, t) -> t
          in
          let short = 300 + (10 * K.int s 10) in
          let long = 2 * short in
          let t1 = stop_during short and t2 = stop_during long in
          let ms x = x *. 1000. in
          if ms t1 >= 0.8 *. float short && ms t2 >= 0.8 *. float long && ms (t2 -. t1) >= 0.6 *. float (long - short) then
            K.flag s "with work running, stop returned as the work ended: %.0f ms with a %d-ms spin running, %.0f ms with a %d-ms one"
              (ms t1) short (ms t2) long)

(* STOP-3: with no work running, stop writes the last value before it
   returns.  The word is read on stop's own thread as stop returns: a
   driver thread woken by stop that writes it a moment later loses that
   race of microseconds only some of the time. *)
let stop3_uncommitted (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let done_v = K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill" in
      let v = K.submit_or_skip ~commit:false dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "an uncommitted Fill" in
      let w = K.word_at_stop s dev ~bound_ms:9000 in
      (* A word below the value it showed before stop was dropped: STOP-5's. *)
      if w <> v && w >= done_v then
        K.flag_value s "right after stop returned, with no work running, the word reads %d through signaled, not the last value %d given to submit" w v)

(* STOP-3: with work running, the last value arrives once it ends. *)
let stop3_running (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let spin = K.need_item "spin" P.kit.spin in
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let done_v = K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill" in
      let h = K.kit_entry s dev "spin" spin in
      let ms = 150 + K.int s 150 in
      (* stop once the word shows the Fill before the spin: the spin then
         runs (a spin just submitted may not have started, and a stop
         before it is a stop with no work running) *)
      let before = K.submit_or_skip dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill before the spin" in
      let v = K.submit_or_skip dev [ Launch { entry = h; args = [ Int64.of_int ms ] } ] "a spin launch" in
      ignore (K.poll_word dev ~ms:(ms / 2) (fun w -> w >= before));
      ignore (K.stop s dev ~bound_ms:9000);
      let w = K.poll_word dev ~ms:(ms + 3000) (fun w -> w = v || w < done_v) in
      (* The word is read through signaled, which reads it only where
         TIME-1 holds: as model.driver does, TIME-1's probe checks that
         premise before the finding stands (blind mc-signaled-shadow: a
         shadow of the word that stop refreshed before the last value). *)
      if w <> v && w >= done_v then
        match Word_probes.signaled_wrong (module P) ~seed with
        | Some { detail = why; _ } ->
            Case.report_unjudged
              [ ("STOP-3", spf "after stop, signaled answered %d, not the last value %d, but signaled does not read the word (TIME-1's: %s)" w v why) ]
        | None ->
          K.flag s "%d ms after stop (work spinning %d ms), the word reads %d, not the last value %d given to submit"
            (ms + 3000) ms w v)

(* The premise of the probes that judge what follows a stop called while
   work runs: a spin of 300-400 ms runs when stop is called, one submission
   goes before it (stop is called once the word shows it: the device is
   then on the spin) and one behind it, and the word is then seen to read
   the value of the one behind, the last. On a loaded machine the device
   may not reach the spin in time, stop may return after the spin ended,
   or the word's last value may pass unseen (a read preempted until a late
   write over it; a last value never written is probe.STOP-3.running's):
   such a try judges nothing, and the probe tries again, three times at
   most, then reports its clause unjudged. *)
module Stop_on_spin (P : Package) = struct
  module K = Kit (P)

  type spun = { last : int; ms : int; launched : float }
  type unmet = [ `Premise_unmet of int * bool * float | `Unseen of int ]

  let stop_on_spin s dev ~spin ~before ~behind : [ `Spun of spun | unmet ] =
    let h = K.kit_entry s dev "spin" spin in
    let ms = 300 + K.int s 100 in
    let first = K.submit_or_skip dev before "the submission before the spin" in
    let launched = now () in
    ignore (K.submit_or_skip dev [ Launch { entry = h; args = [ Int64.of_int ms ] } ] "a spin launch");
    let last = K.submit_or_skip dev behind "the submission behind the spin" in
    let on_the_spin = K.poll_word dev ~ms:(ms / 2) (fun w -> w >= first) = first in
    ignore (K.stop s dev ~bound_ms:9000);
    let stopped_ms = (now () -. launched) *. 1000. in
    if (not on_the_spin) || stopped_ms >= float ms then `Premise_unmet (ms, on_the_spin, stopped_ms)
    else if K.poll_word dev ~ms:(ms + 3000) (fun w -> w = last) <> last then `Unseen ms
    else `Spun { last; ms; launched }

  let tries ~clause (attempt : unit -> [ `Judged | unmet ]) =
    let rec go k =
      match attempt () with
      | `Judged -> ()
      | #unmet when k > 1 -> go (k - 1)
      | `Unseen ms ->
          Case.report_unjudged
            [ (clause, spf "in 3 tries the word was never seen to read the last value after stop, within %d ms of a %d-ms spin's launch" (ms + 3000) ms) ]
      | `Premise_unmet (ms, on_the_spin, stopped_ms) ->
          Case.report_unjudged
            [ ( clause,
                if not on_the_spin then
                  spf "in 3 tries the device had not passed the submission before a %d-ms spin within half its length: stop could not be called on the spin" ms
                else spf "in 3 tries the %d-ms spin had ended when stop returned (%.0f ms after its launch)" ms stopped_ms ) ]
    in
    go 3
end

(* STOP-3, "only once no work of d runs": the last value must not come
   while work of d still runs, seen through that work's own memory effect.
   Stopped on a spin (Stop_on_spin), behind which a fill of a witness
   region (read through host memory or another device's mapping) is
   queued. A driver may drop the queued fill or run it before it writes the
   last value; once the word reads that value, no byte of the fill may
   appear. *)
let stop3_value_after_work (module P : Package) ~seed =
  let module S = Stop_on_spin (P) in
  let module K = S.K in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let spin = K.need_item "spin" P.kit.spin in
      S.tries ~clause:"STOP-3" (fun () ->
          let n = word * (1 + K.int s 256) in
          let dev, witness = K.witness_device s n in
          let b0 = K.byte s in
          witness.K.wwrite ~off:0 (String.make n (Char.chr b0));
          let b1 = K.other_byte s b0 in
          let r = match K.alloc s dev Device word with Some r -> r | None -> raise (Skip "setup: no Device memory") in
          let before = [ K.fill_part r ~off:0 ~len:word ~byte:(K.byte s) ] in
          let behind = [ K.fill_part witness.K.wreg ~off:0 ~len:n ~byte:b1 ] in
          match S.stop_on_spin s dev ~spin ~before ~behind with
          | #S.unmet as u -> u
          | `Spun { last = v; ms; launched } ->
              let landed () = String.contains (witness.K.wread ~off:0 ~len:n) (Char.chr b1) in
              let seen_v = now () in
              if not (landed ()) then begin
                let until = Float.max (now ()) (launched +. (float ms /. 1000.)) +. 0.6 in
                let late = ref None in
                while now () < until && !late = None do
                  if landed () then late := Some (now () -. seen_v) else Thread.delay K.poll_interval
                done;
                match !late with
                | Some t ->
                    K.flag_value s
                      "the word read the last value %d while work of the device still ran: %.0f ms later, a Fill submitted before stop (behind a %d-ms spin) wrote its bytes"
                      v (t *. 1000.) ms
                | None -> ()
              end;
              `Judged))

(* STOP-3, "only once no work of d runs", for a part a stop may not cut
   short at once: a large Fill of a witness region is running when stop is
   called (some of its sampled bytes written, not all), with a small Fill
   queued behind it as the last value, then again with none. Once the word
   reads that value, no sampled byte the large Fill had not written may be
   written. A try in
   which the Fill was over before stop could be called is made again with
   one twice as large (8 to 256 MiB: on hostmem an 8-MiB Fill runs for
   some 40 ms, mostly the kernel's first touch of its pages, and the first
   touch of the 32 MiB the probe started with was a fifth of a hostmem
   certification's page faults). *)
let fill_tries = 6

let stop3_fill_running (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let mib = 1 lsl 20 in
      let rec attempt ~behind size tries =
        let dev, witness = K.witness_device s size in
        let samples = List.init 65 (fun i -> if i = 64 then size - 1 else i * (size / 64)) in
        let byte_at o = Char.code (witness.K.wread ~off:o ~len:1).[0] in
        let before = List.map byte_at samples in
        (* a byte none of the samples holds yet: one written shows *)
        let b1 = List.find (fun b -> not (List.mem b before)) (List.init 256 (fun i -> (K.byte s + i) land 0xff)) in
        let written () = List.filter (fun o -> byte_at o = b1) samples in
        let r = match K.alloc s dev Device word with Some r -> r | None -> raise (Skip "setup: no Device memory") in
        let own = K.submit_or_skip dev [ K.fill_part witness.K.wreg ~off:0 ~len:size ~byte:b1 ] "the large Fill" in
        let v = if behind then K.submit_or_skip dev [ K.fill_part r ~off:0 ~len:word ~byte:(K.byte s) ] "the Fill behind it" else own in
        let deadline = now () +. 5. in
        let rec until_running () =
          match List.length (written ()) with
          | 0 when now () > deadline -> `Never
          | 0 -> Thread.delay 0.0001; until_running ()
          | n when n = List.length samples -> `Over
          | _ -> `Running
        in
        match until_running () with
        | `Over when tries > 1 -> attempt ~behind (2 * size) (tries - 1)
        | `Over ->
            Case.report_unjudged [ ("STOP-3", spf "in %d tries a Fill (up to %d MiB) was over before stop could be called on it" fill_tries (size / mib)) ]
        | `Never -> Case.report_unjudged [ ("STOP-3", spf "a %d-MiB Fill wrote none of its sampled bytes within 5 s" (size / mib)) ]
        | `Running ->
            ignore (K.stop s dev ~bound_ms:9000);
            if K.poll_word dev ~ms:5000 (fun w -> w = v) <> v then
              (* a last value never written is probe.STOP-3.running's *)
              Case.report_unjudged [ ("STOP-3", spf "the word was not seen to read the last value within 5 s of stop") ]
            else begin
              let seen_v = now () in
              let pending = List.filter (fun o -> byte_at o <> b1) samples in
              let rec watch () =
                match List.filter (fun o -> byte_at o = b1) pending with
                | [] when now () -. seen_v < 0.25 -> Thread.delay K.poll_interval; watch ()
                | [] -> ()
                | late ->
                    K.flag_value s
                      "the word read the last value %d while a %d-MiB Fill that ran at stop still wrote: of the %d sampled bytes it had not written then, %d were %.0f ms later"
                      v (size / mib) (List.length pending) (List.length late) ((now () -. seen_v) *. 1000.)
              in
              if pending <> [] then watch ()
            end
      in
      (* with a Fill behind it, the last value; then with the running
         Fill's own submission the last (a driver may take an empty queue
         for no work running) *)
      List.iter (fun behind -> attempt ~behind (8 * mib) fill_tries) [ true; false ])

(* STOP-3, "also when that submit failed": with no work running, a submit
   of a launch of kit_more's refused_launch fails, and stop must still
   write its value.  Rounds on fresh devices differ in the good submits
   before the failed one (none, one, three: a driver may fall back to the
   last value its queue took, which is right only after one), each run to
   its end first.  Without the item, rig makes no call that must fail
   (rig_edge.h: submit follows a RIG_ROOM), so there is nothing to ask. *)
let stop3_failed_submit (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let binary, refused =
        match Rig_edge.refused_launch (Rig_edge_registry.more P.name) with
        | Some item -> item
        | None -> raise (Skip "the package registered no refused_launch (Rig_edge.kit_more)")
      in
      let round good =
        let dev = K.open_first s in
        let h =
          match K.image s dev binary with
          | Error why -> raise (Skip (spf "setup: the device refuses refused_launch's binary: %s" why))
          | Ok i -> (
              match K.entry i refused with
              | Entry h -> h
              | Absent -> raise (Skip (spf "setup: refused_launch's binary has no function %S" refused))
              | No_memory n -> raise (Skip (spf "setup: no memory (%d bytes) for refused_launch's function" n)))
        in
        let n = word * (1 + K.int s 256) in
        let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
        let done_v = ref 0 in
        for _ = 1 to good do
          done_v := K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill"
        done;
        (match K.submit dev [ Launch { entry = h; args = [] } ] with
        | Ok _ -> raise (Skip "setup: a submit of a launch of kit_more's refused_launch did not fail")
        | Error _ when dev.lost = None -> raise (Skip "setup: no room for a launch of kit_more's refused_launch")
        | Error _ -> ());
        let v = dev.last in
        let w = K.word_at_stop s dev ~bound_ms:9000 in
        (* A word below the value it showed before stop was dropped: STOP-5's. *)
        if w <> v && w >= !done_v then begin
          K.flag_value s "with %d good submit(s) run before it, a submit of value %d failed; right after stop returned, with no work running, the word reads %d through signaled, not %d"
            good v w v;
          K.leave s dev;
          false
        end
        else begin
          if K.settled dev ~ms:3000 then K.release_dev s dev else K.leave s dev;
          true
        end
      in
      ignore (List.for_all round [ 0; 1; 3 ]))

(* STOP-4: work encoded but not committed does not run at stop: encoded
   on stop's own thread right before it (a driver whose open command
   buffer is per thread, flushed by the thread that stops), then on another
   thread than stop's, each on a device of its own. *)
let stop4_drop_encoded (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-4" ~seed (fun s ->
      let round where =
        let n = word * (1 + K.int s 512) in
        let a, witness = K.witness_device s n in
        let b0 = K.byte s in
        witness.wwrite ~off:0 (String.make n (Char.chr b0));
        let b1 = K.other_byte s b0 in
        ignore (K.run_or_skip s a [ K.fill_part witness.wreg ~off:0 ~len:n ~byte:b1 ] "a committed Fill");
        let expect = String.make n (Char.chr b1) in
        if witness.wread ~off:0 ~len:n <> expect then raise (Skip "setup: the witness does not show the device's work");
        let b2 = K.other_byte s b1 in
        let encode () = ignore (K.submit_or_skip ~commit:false a [ K.fill_part witness.wreg ~off:0 ~len:n ~byte:b2 ] "an uncommitted Fill") in
        (match where with
        | `Stops_thread ->
            let refused = ref None in
            ignore (K.stop s a ~bound_ms:9000 ~before:(fun () -> try encode () with Skip why -> refused := Some why));
            Option.iter (fun why -> raise (Skip why)) !refused
        | `Other_thread ->
            encode ();
            ignore (K.stop s a ~bound_ms:9000));
        ignore (K.settled a ~ms:1000);
        Thread.delay 0.05;
        let got = witness.wread ~off:0 ~len:n in
        if got <> expect then begin
          let i = ref 0 in
          while got.[!i] = expect.[!i] do incr i done;
          K.flag_value s "after stop, byte %d of a region reads %02x, not %02x: a Fill with %02x that was submitted %s but never committed ran"
            !i (Char.code got.[!i]) b1 b2
            (match where with `Stops_thread -> "on stop's thread, right before it," | `Other_thread -> "on another thread than stop's");
          false
        end
        else begin
          (* its hardware free again for the next round's open *)
          if K.settled a ~ms:3000 then K.release_dev s a;
          true
        end
      in
      (* The first round judges; a second that cannot be set up (a device
         busy a while after the first's, say) takes nothing from it. *)
      if round `Stops_thread then
        match round `Other_thread with _ -> () | exception (Skip _ | Not_opened _) -> ())

(* STOP-5: stop keeps the word (signaled still reads the last value) and
   releases nothing rig made: a region still holds its bytes through a
   peer's mapping, an idle region no one maps and an image are still there
   for rig's free and unload after stop (which may raise only a Fault,
   dropped; STOP-7), and host pages under a map_host region keep the
   program's bytes (pages a stop unmapped kill the process: the case's
   crash, STOP-5's, blind sr-stop-unmaps-host-pages). *)
let stop5_keeps (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-5" ~seed (fun s ->
      let n = word * (1 + K.int s 512) in
      let a_opener, a, b =
        match K.openers () with
        | [] -> raise (Skip "the package has no opener")
        | [ o ] -> (o, K.open_dev s o, None)
        | o1 :: o2 :: _ ->
            let a = K.open_dev s o1 in
            (o1, a, Some (K.open_dev s o2))
      in
      let r =
        match K.alloc_host s a n with
        | Some r -> r
        | None -> ( match K.alloc s a Device n with Some r -> r | None -> raise (Skip "setup: no memory"))
      in
      let idle = K.alloc s a Device word in
      (* an image, and host pages under a map_host region: rig unloads and
         frees them after stop too, and the pages are the program's *)
      let image = match K.image s a P.kit.binary with Ok i -> Some i | Error _ | (exception _) -> None in
      let host =
        if not a.facts.maps_host then None
        else
          match K.host_pages s 4096 with
          | addr, ba ->
              let bytes = K.pattern s 4096 in
              String.iteri (fun i c -> Bigarray.Array1.set ba i c) bytes;
              (match K.map_host s a addr 4096 with _ -> Some (ba, bytes) | exception _ -> None)
          | exception Skip _ -> None
      in
      let p = K.pattern s n in
      let have_bytes = K.write r ~off:0 p in
      let off = word * K.int s (n / word) in
      let len = 1 + K.int s (n - off) in
      let bt = K.byte s in
      let v = K.run_or_skip s a [ K.fill_part r ~off ~len ~byte:bt ] "a Fill" in
      let expect = String.sub p 0 off ^ String.make len (Char.chr bt) ^ String.sub p (off + len) (n - off - len) in
      (* The mapping is made once the bytes are in, so that the check holds
         whatever map_peer does. *)
      let mapping =
        match b with
        | Some b when have_bytes -> (
            match K.map_peer s b r with
            | mp when K.read mp ~off:0 ~len:n = Some expect -> Some mp
            | _ -> None
            | exception _ -> None)
        | _ -> None
      in
      if P.D.signaled a.d <> v then raise (Skip "setup: the word does not read the completed value");
      ignore (K.stop s a ~bound_ms:9000);
      (* The word is judged on its first read after stop: one that reads v
         was kept, and a later change is a write that landed late, STOP-6's,
         which its own probe judges.  Then the probe waits 300-500 ms, for a
         driver that releases late to show it in the mapping below. *)
      let w = P.D.signaled a.d in
      if w <> v then K.flag_value s "after stop, signaled reads %d, not the last value %d the word showed before stop" w v
      else Thread.delay (0.3 +. (0.01 *. float_of_int (K.int s 20)));
      (* rig reads the word until it frees it, as often as it likes (a
         value that changed is a late write: STOP-6's) *)
      (if w = v then
         match P.D.signaled a.d with
         | _ -> ()
         | exception e ->
             K.flag_value s "after stop, signaled read the last value %d, then raised %s: stop released what signaled needs" v (Printexc.to_string e));
      (match mapping with
      | None -> ()
      | Some mp -> (
          (* A Fault of the mapping's own device, idle and not stopped, is
             the mapping gone with the stop (blind mb-peer-stop-unmap). *)
          match K.read mp ~off:0 ~len:n with
          | got when got <> Some expect ->
              K.flag_value s "after %s's stop, its region read through %s's mapping no longer holds its bytes" a.oname mp.dev.oname
          | _ -> ()
          | exception P.D.Fault why ->
              K.flag_value s "after %s's stop, a read of its region through %s's mapping raised Fault (%s): the stop released the mapping rig made"
                a.oname mp.dev.oname why));
      (* rig's release of something it made, once the word settled: only
         a Fault, which rig drops after stop (STOP-7), may come of it *)
      let released_by_stop what release =
        if w = v && K.settled a ~ms:3000 then
          match release () with
          | () -> ()
          | exception P.D.Fault _ -> ()
          | exception e ->
              K.flag_value s "after %s's stop (the word at the last value), rig's %s raised %s: stop released it" a.oname what
                (Printexc.to_string e)
      in
      Option.iter (fun r2 -> released_by_stop "free of a region alloc made, which nothing mapped," (fun () -> K.free_reg r2)) idle;
      (match host with
      | Some (ba, bytes) when w = v ->
          let now = String.init 4096 (Bigarray.Array1.get ba) in
          if now <> bytes then
            K.flag_value s "after %s's stop, the host pages under a map_host region of it no longer hold the program's bytes: %s" a.oname
              (Probes.first_difference now bytes)
      | _ -> ());
      Option.iter (fun i -> released_by_stop "unload of an image it loaded" (fun () -> K.unload_img i)) image;
      (* A word of the driver's own stays until rig frees it, also once rig
         opened the name anew (at an open of its name rig stops the old
         device, opens the new one, and frees the old one's regions and
         word after): a word stop gave back to a pool, which the new
         device takes, reads the new device's values (blind
         mc-stop-recycles-word).  Judged only where the word still reads
         the last value right before that open: a value changed before it
         is a late write, STOP-6's (blind st6-release-reset). *)
      let still_v () = match P.D.signaled a.d with w' -> w' = v | exception _ -> false in
      if w = v && a.facts.own_word <> None && still_v () then
        match K.open_dev s a_opener with
        | _ -> (
            match P.D.signaled a.d with
            | w' when w' <> v ->
                K.flag_value s "after %s's stop, a new open of its name made the stopped device's word read %d, not its last value %d: stop gave the word up before rig freed it"
                  a.oname w' v
            | _ -> ()
            | exception e ->
                K.flag_value s "after %s's stop, a new open of its name made signaled of the stopped device raise %s: stop gave the word up before rig freed it"
                  a.oname (Printexc.to_string e))
        | exception Not_opened _ -> ())

(* STOP-5 from the other side of a peer mapping: the stop of the device
   that mapped another device's region releases nothing rig made, so the
   region, its own device idle and open, still holds its bytes (blind
   sr-stop-unmaps-peer-backing: the importer's stop unmapped the pages
   under its mapping, the exporter's next read of its own region died).
   rig frees the mapping itself after the stop, as it does each region. *)
let stop5_importer_stop (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-5" ~seed (fun s ->
      let a, b = K.open_two s in
      let n = word * (1 + K.int s 512) in
      let r =
        match K.alloc_host s a n with
        | Some r -> r
        | None -> ( match K.alloc s a Device n with Some r -> r | None -> raise (Skip "setup: no memory"))
      in
      let p = K.pattern s n in
      if not (K.write r ~off:0 p) then raise (Skip "setup: the region has no reach to write its bytes with");
      let mapping = match K.map_peer s b r with mp -> mp | exception e -> raise (Skip (spf "setup: map_peer raised %s" (Printexc.to_string e))) in
      if K.read mapping ~off:0 ~len:n <> Some p then raise (Skip "setup: the mapping does not read the region's bytes");
      ignore (K.stop s b ~bound_ms:9000);
      match K.read r ~off:0 ~len:n with
      | Some got when got <> p ->
          K.flag_value s "after %s's stop, %s's own region (mapped by %s before) no longer holds its bytes: %s" b.oname a.oname b.oname
            (Probes.first_difference got p)
      | _ -> ()
      | exception P.D.Fault why ->
          K.flag_value s "after %s's stop, a read of %s's own region (mapped by %s before) raised Fault (%s): the stop released it" b.oname a.oname
            b.oname why)

(* STOP-6: once the word shows the last value and stop returned, the word
   stays. Stopped on a spin (Stop_on_spin) that still runs when stop
   returns, so that a driver whose spin writes the word at its end writes
   it after stop; fills go before and behind the spin. *)
let stop6_no_late_write (module P : Package) ~seed =
  let module S = Stop_on_spin (P) in
  let module K = S.K in
  K.run ~clause:"STOP-6" ~seed (fun s ->
      let spin = K.need_item "spin" P.kit.spin in
      S.tries ~clause:"STOP-6" (fun () ->
          let dev = K.open_first s in
          let n = word * (1 + K.int s 256) in
          let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
          let fill () = [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] in
          let before = fill () in
          match S.stop_on_spin s dev ~spin ~before ~behind:(fill ()) with
          | #S.unmet as u -> u
          | `Spun { last = v; ms; launched } ->
              (* until 0.6 s after the later of now and the spin's own end *)
              let until = Float.max (now ()) (launched +. (float ms /. 1000.)) +. 0.6 in
              let t0 = now () in
              let bad = ref None in
              while now () < until && !bad = None do
                let w = P.D.signaled dev.d in
                if w <> v then bad := Some (w, now () -. t0) else Thread.delay K.poll_interval
              done;
              (match !bad with
              | Some (w, t) ->
                  K.flag_value s "the word showed the last value %d after stop returned, then %.0f ms later read %d" v (t *. 1000.) w
              | None -> ());
              `Judged))

(* STOP-8: free and unload after stop touch nothing of a new device of the
   same hardware. *)
let stop8_old_frees (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-8" ~seed (fun s ->
      let o, other = match K.openers () with o :: rest -> (o, List.nth_opt rest 0) | [] -> raise (Skip "the package has no opener") in
      let a = K.open_dev s o in
      let count = 2 + K.int s 4 in
      let regions = List.filter_map Fun.id (List.init count (fun _ -> K.alloc s a Device (4096 * (1 + K.int s 16)))) in
      (match regions with
      | r :: _ -> ignore (K.run_or_skip s a [ K.fill_part r ~off:0 ~len:r.size ~byte:(K.byte s) ] "a Fill")
      | [] -> ());
      (* a mapping on the old device of another device's region, where the
         package has a peer for it *)
      let mapping =
        match other with
        | None -> None
        | Some o2 -> (
            match K.open_dev s o2 with
            | exception Not_opened _ -> None
            | c ->
                if not (P.D.peer a.d c.d) then None
                else match K.alloc s c Device (4096 * (1 + K.int s 4)) with Some rc -> Some (K.map_peer s a rc) | None -> None)
      in
      (* images with an entry each, and one with none, so that their
         unloads after stop have something of the old device to give back
         (a driver may hand that to a thread of its own, or defer it) *)
      let with_entry dev =
        let i = K.binary_image s dev in
        (match P.kit.spin with Some f -> (try ignore (K.entry i f) with _ -> ()) | None -> ());
        i
      in
      let olds = List.init (2 + K.int s 2) (fun _ -> with_entry a) @ [ K.binary_image s a ] in
      K.close s a;
      if not (K.settled a ~ms:3000) then raise (Skip "setup: the first device's word did not reach its last value");
      let b = K.open_dev s o in
      let n = word * (1 + K.int s 256) in
      let rb = K.alloc s b Device n in
      let p = K.pattern s n in
      let have_bytes = match rb with Some rb -> K.write rb ~off:0 p | None -> false in
      (* more of the new device's objects, each with bytes of its own: a
         handle of the old device the driver misapplies to the new one
         names one of them *)
      let more =
        List.filter_map
          (fun _ ->
            match K.alloc s b Device word with
            | Some r ->
                let q = K.pattern s word in
                if K.write r ~off:0 q then Some (r, q) else None
            | None -> None)
          (List.init 24 Fun.id)
      in
      (* the new device's word past the old one's, and an image with an
         entry it keeps *)
      let b_value =
        match K.alloc s b Device word with
        | Some r -> List.fold_left (fun _ _ -> K.run_or_skip s b [ K.fill_part r ~off:0 ~len:word ~byte:(K.byte s) ] "a Fill") 0 (List.init (a.last + 2) Fun.id)
        | None -> 0
      in
      let ib = K.binary_image s b in
      let b_entry = match P.kit.spin with Some f -> (match K.entry ib f with Entry h -> Some (f, h) | _ -> None) | None -> None in
      let before = K.free_bytes s b in
      (* each release of the old device's things followed by calls on the
         new device (an image with no entry loaded and unloaded, which
         leaves the driver nothing of its own to do, then allocations):
         where what the old one left for later may be done, on the wrong
         device *)
      let then_calls_on_b () =
        K.unload_img (K.binary_image s b);
        ignore (K.free_bytes s b)
      in
      (* rig drops a Fault of free after stop (STOP-7); another exception
         says stop released the region, STOP-5's probe's to judge *)
      let free_after_stop r =
        match K.free_reg r with
        | () -> ()
        | exception P.D.Fault _ -> ()
        | exception e ->
            raise (Skip (spf "not judged: rig's free of a region after stop raised %s (STOP-5's probe judges that)" (Printexc.to_string e)))
      in
      List.iter (fun old -> K.unload_img old; then_calls_on_b ()) olds;
      Option.iter (fun m -> free_after_stop m; then_calls_on_b ()) mapping;
      List.iter (fun r -> free_after_stop r; then_calls_on_b ()) regions;
      K.release_dev s a;
      then_calls_on_b ();
      (* a thread of the driver's that the old device's calls started (a
         reaper) acts a little later *)
      Thread.delay 0.3;
      (* what the new device's images took given back, at once or on a
         thread of the driver's: given 1 s *)
      let after = K.free_bytes_when s b ~deadline:(now () +. 1.) (fun free -> free = before) in
      (* a live region of a device nothing faulted reads back what was
         written: a Fault there says it was taken away *)
      let holds r q =
        match K.read r ~off:0 ~len:(String.length q) with
        | got -> if got = Some q then None else Some "its bytes changed"
        | exception P.D.Fault why -> Some (spf "reading it raised Fault %S" why)
      in
      let changed_region =
        List.find_map (fun (r, q) -> holds r q) ((match rb with Some rb when have_bytes -> [ (rb, p) ] | _ -> []) @ more)
      in
      let word_now = P.D.signaled b.d in
      let what = spf "free and unload on the stopped %s, each followed by calls on the new device," o.name in
      if after <> before then
        K.flag s "%s changed the new device's free Device memory from %d to %d bytes" what before after
      else
        match changed_region with
        | Some how -> K.flag_value s "%s changed a region of the new device: %s" what how
        | None ->
            if b_value > 0 && word_now <> b_value then
              K.flag_value s "%s changed the new device's word: it reads %d, where its work had brought it to %d" what word_now b_value
            else begin
              (* the new device's entry, made before, still launches *)
              match b_entry with
              | None -> ()
              | Some (f, h) -> (
                  match K.submit b [ Launch { entry = h; args = [ 0L ] } ] with
                  | Error _ -> ()
                  | Ok v -> (
                      match K.wait_value s b v ~ms:3000 with
                      | K.Fault_seen why ->
                          K.flag_value s "%s changed the new device's entry of %S: its launch made the device fault (%s)" what f why
                      | _ -> ()))
            end)

let cases =
  [
    case "probe.STOP-2.no-wait" "STOP-2" stop2_no_wait;
    case "probe.STOP-3.uncommitted" "STOP-3" stop3_uncommitted;
    case "probe.STOP-3.running" "STOP-3" stop3_running;
    case "probe.STOP-3.failed-submit" "STOP-3" stop3_failed_submit;
    case "probe.STOP-3.value-after-work" "STOP-3" stop3_value_after_work;
    case "probe.STOP-3.fill-running" "STOP-3" stop3_fill_running;
    case "probe.STOP-4.drop-encoded" "STOP-4" stop4_drop_encoded;
    case "probe.STOP-5.keeps-word" "STOP-5" stop5_keeps;
    case "probe.STOP-5.importer-stop" "STOP-5" stop5_importer_stop;
    case "probe.STOP-6.no-late-write" "STOP-6" stop6_no_late_write;
    case "probe.STOP-8.old-frees" "STOP-8" stop8_old_frees;
  ]
