(* Timeline probes (TIME-3, TIME-4, TIME-5, TIME-6); see time_probes.mli. *)

open Rig_edge
open Probes

(* TIME-3: sleep returns at once when the word already differs from seen. *)
let time3_batch = 10
let time3_floor_ms = 20.

let time3_early_return (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-3" ~seed (fun s ->
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      for _ = 1 to 1 + K.int s 3 do
        ignore (K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill")
      done;
      let w = P.D.signaled dev.d in
      let slow = ref false in
      List.iter
        (fun seen ->
          if not !slow then
            let outcome, ms = K.timed_sleep s dev ~seen ~still_ms:2000 ~bound_ms:9000 in
            match outcome with
            | K.Returned | K.Faulted _ | K.Other _ ->
                if ms > 1000. then begin
                  slow := true;
                  K.flag s "with the word at %d, sleep ~seen:%d ~still_ms:2000 took %.0f ms instead of returning at once" w seen ms
                end)
        [ w - 1; w + 1 + K.int s 5 ];
      (* "Immediately": a short wait before the check (to let completions
         coalesce, say) does not show against a 1 s margin.  A sleep whose
         word already differs only reads it, so the fastest of a batch of
         such calls takes well under a millisecond even on a loaded
         machine; the fastest of each of two batches over
         [time3_floor_ms] is a wait. *)
      if not !slow then begin
        let fastest () =
          let best = ref infinity in
          for k = 1 to time3_batch do
            let seen = if k land 1 = 0 then w - 1 else w + 1 + K.int s 5 in
            let _, ms = K.timed_sleep s dev ~seen ~still_ms:(500 + K.int s 1500) ~bound_ms:9000 in
            if ms < !best then best := ms
          done;
          !best
        in
        let a = fastest () in
        if a > time3_floor_ms then begin
          let b = fastest () in
          if b > time3_floor_ms then
            K.flag s
              "with the word at %d, sleep with seen other than %d never returned at once: the fastest of %d calls took %.0f ms, of %d more %.0f ms"
              w w time3_batch a time3_batch b
        end
      end)

(* How late past still_ms a sleep may return on a loaded machine (TIME-4,
   TIME-6). *)
let sleep_slack_ms = 1000

(* TIME-4: with work hanging, sleep returns (or raises Fault) by still_ms. *)
let time4_bounded_sleep (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-4" ~seed (fun s ->
      let hang = K.need_item "hang" P.kit.hang in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "hang" hang in
      ignore (K.launch dev h "hang");
      dev.hung <- true;
      Thread.delay 0.05;
      let late = ref false in
      let rec go k =
        if k > 0 then begin
          let still = 30 + K.int s 70 in
          let w = P.D.signaled dev.d in
          let outcome, ms = K.timed_sleep ~less_cpu_wait:true s dev ~seen:w ~still_ms:still ~bound_ms:(still + 8000) in
          if ms > float_of_int (still + sleep_slack_ms) then
            late := true;
          if ms > float_of_int (still + sleep_slack_ms) then
            K.flag s "with work hanging, sleep ~seen:%d ~still_ms:%d returned after %.0f ms (less its waits for a CPU, 250 ms at most)" w still ms;
          match outcome with K.Faulted _ -> () | _ -> go (k - 1)
        end
      in
      go 2;
      (* A sleep that overstays by a multiple of still_ms (one that waits
         still_ms again when the first wait saw nothing) hides under the
         slack above when still_ms is short.  With still_ms of 500 ms or
         more, 1.5 times it leaves a conforming sleep 250 ms of noise; a
         finding is timed again before it is flagged. *)
      if not !late then begin
        let long () =
          let still = 500 + K.int s 200 in
          let w = P.D.signaled dev.d in
          let outcome, ms = K.timed_sleep ~less_cpu_wait:true s dev ~seen:w ~still_ms:still ~bound_ms:(still + 8000) in
          match outcome with
          | K.Faulted _ -> None
          | _ -> if ms > 1.5 *. float_of_int still then Some (w, still, ms) else None
        in
        match long () with
        | None -> ()
        | Some (w, still, ms) -> (
            match long () with
            | None -> ()
            | Some (_, still', ms') ->
                K.flag s "with work hanging, sleep ~seen:%d ~still_ms:%d returned after %.0f ms, and again ~still_ms:%d after %.0f ms (less their waits for a CPU, 250 ms at most each)"
                  w still ms still' ms')
      end)

(* TIME-5: after a fault, every sleep raises Fault; the word read several
   times between sleeps (as rig reads it, from any thread) consumes no
   event of the fault's. *)
let time5_fault_sticks (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-5" ~seed (fun s ->
      let fault = K.need_item "fault" P.kit.fault in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "fault" fault in
      ignore (K.launch dev h "fault");
      (* rig may read the word for a while before it sleeps: 100 ms of
         reads, by which the fault has mostly come *)
      let reads_end = now () +. 0.1 in
      while now () < reads_end do ignore (P.D.signaled dev.d); Thread.delay 0.001 done;
      let deadline = now () +. 3. in
      let rec first () =
        let seen = List.fold_left (fun _ () -> P.D.signaled dev.d) 0 [ (); (); () ] in
        match K.sleep s dev ~seen ~still_ms:20 ~bound_ms:9000 with
        | K.Faulted why -> Some why
        | _ -> if now () > deadline then None else first ()
      in
      match first () with
      | None -> K.flag s "sleep did not raise Fault within 3 s of a launch of the fault function %S" fault
      | Some why ->
          (* Every later sleep, also one whose seen the word no longer
             reads: "sleep raises Fault once the device has faulted". *)
          let again = 3 + K.int s 3 in
          for k = 1 to again do
            let w = P.D.signaled dev.d in
            let seen = if k mod 2 = 0 then w + 1 + K.int s 1000 else w in
            let which = if seen = w then spf "~seen:%d, the word" w else spf "~seen:%d, a value the word (%d) does not read" seen w in
            match K.sleep s dev ~seen ~still_ms:20 ~bound_ms:9000 with
            | K.Faulted _ -> ()
            | K.Returned -> K.flag_value s "sleep call %d after the Fault (%s), %s, returned instead of raising Fault" k why which
            | K.Other e -> K.flag_value s "sleep call %d after the Fault (%s), %s, raised %s instead of Fault" k why which (Printexc.to_string e)
          done)

(* TIME-6: sleep called while another thread's submit or commit runs
   behaves as sleep must: it returns by still_ms (with slack for a loaded
   machine).  A thread submits small pieces of work while this one sleeps
   over and over; the calls of either that began or ended while the other
   ran are counted, and with none the case is n/a.  The fake's commits are
   held (its commit_hold_ms knob, with may_block so that the held commit
   lets the runtime go), so that the sleeps surely overlap one. *)
let time6_hold_ms = 1500

(* A submission refused by submit or commit themselves (Kit.submit's
   answers), not one whose room or grow gave up: only those bear on
   TIME-6 (a queue that will not grow fails beside a sleep as alone). *)
let refused_by_the_driver e = e = "submit failed" || e = "commit failed"

let time6_sleep_during_submit (module P : Package) ~seed =
  let module K = Kit (P) in
  let held = P.name = Fake.name in
  if held then Fake.configure ~may_block:true ~commit_hold_ms:time6_hold_ms ();
  Fun.protect ~finally:(fun () -> if held then Fake.configure ()) @@ fun () ->
  K.run ~clause:"TIME-6" ~seed (fun s ->
      let dev = K.open_first s in
      let r = match K.alloc s dev Device word with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let rounds = if held then 1 else 200 in
      (* A sleep too long with nothing else running is TIME-4's. *)
      let alone = 20 + K.int s 30 in
      let _, ms = K.timed_sleep ~less_cpu_wait:true s dev ~seen:(P.D.signaled dev.d) ~still_ms:alone ~bound_ms:(alone + 8000) in
      if ms > float_of_int (alone + sleep_slack_ms) then
        raise (Skip (spf "sleep ~still_ms:%d took %.0f ms with no submit running (TIME-4's probe judges that)" alone ms));
      let alone_submits_work s =
        let d2 = K.open_first s in
        match K.alloc s d2 Device word with
        | None -> false
        | Some r2 ->
            List.for_all
              (fun i ->
                match K.submit d2 [ K.fill_part r2 ~off:0 ~len:word ~byte:i ] with
                | Ok v -> K.wait_value s d2 v ~ms:3000 = K.Reached
                | Error _ -> false
                | exception _ -> false)
              [ 1; 2; 3 ]
      in
      let sleeping = Atomic.make false and submitting = Atomic.make false in
      let over = Atomic.make false and overlaps = Atomic.make 0 and failed = Atomic.make None in
      let submitter =
        Thread.create
          (fun () ->
            let rec go i =
              if i <= rounds then begin
                Atomic.set submitting true;
                let during = Atomic.get sleeping in
                let res = try K.submit dev [ K.fill_part r ~off:0 ~len:word ~byte:(i land 255) ] with e -> Error (Printexc.to_string e) in
                let beside = during || Atomic.get sleeping in
                if beside then Atomic.incr overlaps;
                Atomic.set submitting false;
                match res with Ok _ -> go (i + 1) | Error e -> Atomic.set failed (Some (i, e, beside))
              end
            in
            go 1;
            Atomic.set over true)
          ()
      in
      let rec sleeps () =
        if not (Atomic.get over) then begin
          let still = 20 + K.int s 30 in
          let w = P.D.signaled dev.d in
          Atomic.set sleeping true;
          let during = Atomic.get submitting in
          let outcome, ms = K.timed_sleep ~less_cpu_wait:true s dev ~seen:w ~still_ms:still ~bound_ms:(still + 8000) in
          Atomic.set sleeping false;
          if during then Atomic.incr overlaps;
          if ms > float_of_int (still + sleep_slack_ms) then
            K.flag s "sleep ~seen:%d ~still_ms:%d, called while another thread submitted and committed work, returned after %.0f ms (less its waits for a CPU, 250 ms at most)"
              w still ms;
          match outcome with K.Faulted _ | K.Other _ -> () | K.Returned -> sleeps ()
        end
      in
      (* A sleep that outlived its bound abandons the case from here,
         leaving the submitter to the process's end. *)
      sleeps ();
      Thread.join submitter;
      (match Atomic.get failed with
      | Some (i, e, true) when refused_by_the_driver e && alone_submits_work s ->
          (* Failed beside a sleep, where a new device's submissions alone
             succeed: the submit or commit did not bear the sleep. *)
          K.flag s "submission %d of %d failed (%s) while a sleep of the device waited, where three submissions alone on a new device succeed" i
            rounds e
      | Some (i, e, _) -> raise (Skip (spf "setup: submission %d of %d: %s" i rounds e))
      | None -> ());
      if Atomic.get overlaps = 0 then
        raise (Skip (spf "no sleep overlapped a submit or commit in %d submissions" rounds));
      ignore (K.wait_value s dev dev.last ~ms:3000))

(* TIME-6, the other way round: a submit and commit made while a sleep of
   the device waits must not wait for that sleep (a lock the sleep keeps
   across its wait, which submit needs).  A sleep on the word as it reads,
   for [time6_beside_ms]; 100 ms after its thread started it, this one
   submits and commits a Fill.  Flagged when twice the submit returned
   as the sleep did (within 250 ms) and took most of still_ms longer than
   one alone; passed when once it took less. *)
let time6_beside_ms = 1500
let time6_beside_tries = 4

(* Whether the thread of this process whose kernel id is [tid] is off a
   CPU, waiting (state S or D in /proc/self/task/<tid>/stat). *)
let thread_sleeps tid =
  match In_channel.with_open_text (spf "/proc/self/task/%d/stat" tid) In_channel.input_line with
  | Some l -> (
      (* the state follows the command name's closing parenthesis *)
      match String.rindex_opt l ')' with
      | Some i when i + 2 < String.length l -> l.[i + 2] = 'S' || l.[i + 2] = 'D'
      | _ -> false)
  | None -> false
  | exception Sys_error _ -> true

let time6_submit_beside_sleep (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-6" ~seed (fun s ->
      let dev = K.open_first s in
      let r = match K.alloc s dev Device word with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let submit_ms () =
        let t0 = now () in
        ignore (K.wait_value s dev (K.submit_or_skip dev [ K.fill_part r ~off:0 ~len:word ~byte:(K.byte s) ] "a Fill") ~ms:3000);
        (now () -. t0) *. 1000.
      in
      (* a submit, commit and the Fill's work, alone: the fastest of three *)
      let alone = List.fold_left Float.min infinity (List.init 3 (fun _ -> submit_ms ())) in
      let one_try () =
        let w = P.D.signaled dev.d in
        let slept_end = Atomic.make 0. and sleeping_tid = Atomic.make None in
        let on_call () = Atomic.set sleeping_tid (Some (Self_thread.gettid ())) in
        let sleeper =
          Thread.create
            (fun () ->
              ignore (K.sleep ~on_call s dev ~seen:w ~still_ms:time6_beside_ms ~bound_ms:(time6_beside_ms + 8000));
              Atomic.set slept_end (now ()))
            ()
        in
        (* Into its wait: the sleep blocks for 1.5 s on a driver that sees
           no change.  Its thread is about to call sleep, then off a CPU
           (in the driver's wait: this thread leaves the runtime free), and
           100 ms more pass; on a loaded machine a fixed delay from the
           thread's start let the submit come before the sleep began. *)
        let deadline = now () +. 2. in
        let rec into_wait () =
          match Atomic.get sleeping_tid with
          | _ when now () > deadline -> ()
          | Some tid when thread_sleeps tid -> ()
          | _ -> Thread.delay 0.002; into_wait ()
        in
        into_wait ();
        Thread.delay 0.1;
        let t0 = now () in
        let res = try K.submit dev [ K.fill_part r ~off:0 ~len:word ~byte:(K.byte s) ] with e -> Error (Printexc.to_string e) in
        let t1 = now () in
        Thread.join sleeper;
        let took = (t1 -. t0) *. 1000. in
        let ended = Atomic.get slept_end in
        match res with
        | Error e when refused_by_the_driver e && (ended = 0. || ended >= t1) -> `Failed e
        | Error e -> raise (Skip (spf "setup: a Fill beside a sleep: %s" e))
        | Ok v ->
            ignore (K.wait_value s dev v ~ms:3000);
            if ended > 0. && ended < t0 then `Not_beside
            else if took <= alone +. (0.5 *. float_of_int time6_beside_ms) then `Fine
            else if Float.abs (t1 -. ended) < 0.25 then `Waited took
            else `Slow took
      in
      (* the same submission alone succeeded three times just before *)
      let failed e =
        K.flag s "a submit and commit made while a sleep ~still_ms:%d of the device waited failed (%s), where three alone had succeeded"
          time6_beside_ms e
      in
      (* A submission that was slow but did not end with the sleep (on a
         loaded machine, one thread or the other ran late) shows neither
         side: another try, up to [time6_beside_tries]; without a verdict
         by then the half is not judged. *)
      let rec tries n ~waited ~slow =
        if n >= time6_beside_tries then
          Case.report_unjudged
            [ ( "TIME-6",
                spf "in %d tries a submit and commit beside a sleep ~still_ms:%d were slow (%s ms; %.0f ms alone) %d time(s) without ending as the sleep did, and never fast"
                  n time6_beside_ms (String.concat ", " (List.rev_map (spf "%.0f") (waited @ slow))) alone (List.length slow) ) ]
        else
          match one_try () with
          | `Not_beside when n = 0 -> raise (Skip "the sleep returned before the submit began")
          | `Not_beside -> tries (n + 1) ~waited ~slow
          | `Failed e -> failed e
          | `Fine -> ()
          | `Slow t -> tries (n + 1) ~waited ~slow:(t :: slow)
          | `Waited b -> (
              match waited with
              | a :: _ ->
                  K.flag s
                    "a submit and commit made while a sleep ~still_ms:%d of the device waited returned only as that sleep did, %.0f and %.0f ms after they began (%.0f ms alone): they waited for the sleep"
                    time6_beside_ms a b alone
              | [] -> tries (n + 1) ~waited:[ b ] ~slow)
      in
      tries 0 ~waited:[] ~slow:[])

let cases =
  [
    case "probe.TIME-3.early-return" "TIME-3" time3_early_return;
    case "probe.TIME-4.bounded-sleep" "TIME-4" time4_bounded_sleep;
    case "probe.TIME-5.fault-sticks" "TIME-5" time5_fault_sticks;
    case "probe.TIME-6.sleep-during-submit" "TIME-6" time6_sleep_during_submit;
    case "probe.TIME-6.submit-beside-sleep" "TIME-6" time6_submit_beside_sleep;
  ]
