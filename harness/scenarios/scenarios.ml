(* Rig-side scenarios: the reference rig, wrapped around the driver by the
   validation layer, driven through the flows in which each rig clause can
   be observed.  See scenarios.mli. *)

open Case

(* Short hang bound so that hang scenarios end quickly; the validation
   layer is told the same bound.  It must exceed the longest time a flow's
   own work leaves the word unmoved (spins of up to 150 ms), with room for a
   loaded machine and a slow driver. *)
let hang_ms = 1000

(* The bound of flows whose only work that runs is the kit's hang function
   (and fills before it): they spend most of their run waiting for the bound
   itself, and the harness knows that their work never ends, so the bound
   measures nothing of the driver's speed. *)
let quick_hang_ms = 300

(* What a scenario body receives: the rig over the validated driver, and the
   helpers every flow uses. *)
module Env (P : Rig_edge.Package) = struct
  module V = Validate.Make (P.D)
  module R = Rig.Make (V)

  let bound_hangs ms =
    R.set_hang_ms ms;
    V.set_hang_ms ms

  let () = bound_hangs hang_ms

  let openers = P.openers ()

  let opener i =
    match List.nth_opt openers i with
    | Some o -> V.opener o
    | None -> raise Exit

  (* Every device opened, so that a run an injected failure cut short
     still closes them all (and the validation layer sees stop and frees). *)
  let opened = ref []

  let open_ i =
    let o = opener i in
    let dev = V.user (Validate.Open o.name) (fun () -> R.open_ o) in
    opened := dev :: !opened;
    dev

  let close dev = V.user (Validate.Close (R.name dev)) (fun () -> R.close dev)

  (* Each entry asked of the rig is a request of its own: its No_memory asks
     count from its start (CODE-4). *)
  let entry im f = V.user (Validate.Request "entry") (fun () -> R.entry im f)

  let close_all () = List.iter (fun dev -> try close dev with _ -> ()) !opened
  let kit = P.kit

  let entry_of dev fname =
    match R.load dev kit.binary with
    | Error why -> failwith ("the kit's image was refused: " ^ why)
    | Ok im -> (
        match entry im fname with
        | Some h -> (im, h)
        | None -> failwith ("the kit's image has no function " ^ fname))
end

(* Raised by a body that needs a kit item or a second device the driver lacks. *)
exception Needs of string

let need what = function Some x -> x | None -> raise (Needs what)
let fake_only (module P : Rig_edge.Package) = if P.name <> "fake" then raise (Needs "the fake driver's knobs")

module Flows (P : Rig_edge.Package) = struct
  include Env (P)

  let rng seed = Random.State.make [| seed |]
  let small_size st = 4 * (1 + Random.State.int st 64)
  let spin () = need "kit.spin" kit.spin
  let hang () = need "kit.hang" kit.hang

  (* Open, reopen by name, close both handles, with work that still hangs
     at the stop: CNT-1, CNT-4, STOP-1, STOP-7, TIME-2. *)
  let lifecycle ~seed _acc =
    let st = rng seed in
    let dev = open_ 0 in
    let b = R.alloc dev Rig_edge.Device (small_size st) in
    R.write b 0 "rig!";
    let _, h = entry_of dev (hang ()) in
    let v = R.submit dev [ R.Fill (b, 0, 4, Random.State.int st 256); R.Launch (h, []) ] in
    ignore v;
    let again = open_ 0 in
    close dev;
    let b' = R.alloc again Rig_edge.Mapped (small_size st) in
    R.free b';
    close again

  (* A sleep in flight on one thread while another closes: CNT-2.  The work
     hangs, so that the waiter surely sleeps. *)
  let sleep_in_flight ~seed:_ _acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (hang ()) in
    let v = R.submit dev [ R.Launch (h, []) ] in
    let ended = Atomic.make false in
    let waiter =
      Thread.create (fun () -> (try R.wait dev v with _ -> ()); Atomic.set ended true; V.poke ()) ()
    in
    V.await_in_flight ~unless:(fun () -> Atomic.get ended) "sleep";
    close dev;
    Thread.join waiter

  (* A C call of a device that declares may_block is counted: a close while
     a commit runs waits for it before stop (CNT-3).  The fake's commit
     holds its caller until the device stops (or 300 ms, ample for the
     close to come while it holds): a rig that counts it stops only after,
     one that does not stops while it runs. *)
  let c_call_in_flight ~seed _acc =
    Fake.configure ~may_block:true ~commit_hold_ms:300 ();
    let dev = open_ 0 in
    let b = R.alloc dev Rig_edge.Device 64 in
    let ended = Atomic.make false in
    let submitter =
      Thread.create
        (fun () ->
          (try ignore (R.submit dev [ R.Fill (b, 0, 4, 1 + (seed mod 7)) ]) with _ -> ());
          Atomic.set ended true;
          V.poke ())
        ()
    in
    V.await_in_flight ~unless:(fun () -> Atomic.get ended) "commit";
    close dev;
    Thread.join submitter

  (* Calls of two functions in flight at a close, a sleep and a commit of a
     device that declares may_block: a rig waits for both before stop
     (CNT-1).  A rig that stops with both in flight waits for none of its
     counted calls, where one that leaves sleep (or C calls) uncounted
     waits for the other first (rig.sleep-in-flight, rig.c-call-in-flight
     tell those).  Every commit holds its caller 300 ms or until stop, the
     hung work's too.  A wait that ended before the second call began (a
     Fault injected) leaves one function in flight at most: the close then
     judges nothing of CNT-1, and comes once the submit is over or in its
     commit (rig's submit calls locate first, which is not counted). *)
  let calls_in_flight ~seed _acc =
    Fake.configure ~may_block:true ~commit_hold_ms:300 ();
    let dev = open_ 0 in
    let b = R.alloc dev Rig_edge.Device 64 in
    let _, h = entry_of dev (hang ()) in
    let v = R.submit dev [ R.Launch (h, []) ] in
    let ended = Atomic.make 0 in
    let in_thread f = Thread.create (fun () -> (try f () with _ -> ()); Atomic.incr ended; V.poke ()) () in
    let waiter = in_thread (fun () -> R.wait dev v) in
    V.await_in_flight ~unless:(fun () -> Atomic.get ended > 0) "sleep";
    if Atomic.get ended > 0 then begin
      Case.report_unjudged [ ("CNT-1", "the wait on hung work ended before a commit could join it in flight") ];
      close dev;
      Thread.join waiter
    end
    else begin
      let submitter = in_thread (fun () -> ignore (R.submit dev [ R.Fill (b, 0, 4, 1 + (seed mod 7)) ])) in
      V.await_in_flight ~unless:(fun () -> Atomic.get ended > 0) "commit";
      if Atomic.get ended > 0 then begin
        Thread.join submitter;
        Case.report_unjudged [ ("CNT-1", "the wait or the submit ended before both were in flight") ]
      end;
      close dev;
      Thread.join waiter;
      Thread.join submitter
    end

  (* A buffer that only hung work keeps alive is let go of at stop: CNT-5. *)
  let release_kept ~seed acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (hang ()) in
    let watch = Weak.create 1 in
    let submit_and_drop () =
      let b = R.alloc dev Rig_edge.Device (4 * (1 + (seed mod 16))) in
      Weak.set watch 0 (Some b);
      ignore (R.submit dev [ R.Launch (h, [ R.Buf b ]) ]);
      R.free b
    in
    (Sys.opaque_identity submit_and_drop) ();
    close dev;
    Gc.full_major ();
    (* A word that never read the last value keeps the device's memory
       (STOP-7): then the buffer is rig's still, not the submission's. *)
    if not (R.drained dev) then
      Case.report_unjudged [ ("CNT-5", "the word never read the last value after stop: rig keeps the device's memory (STOP-7), so what it lets go of is not seen") ]
    else if Weak.check watch 0 then
      acc := finding "CNT-5" "a buffer that only a submission kept is still alive after stop" :: !acc;
    (* The program still holds the device: what rig keeps with it must not
       keep the buffer. *)
    ignore (Sys.opaque_identity dev)

  (* Work that faults: the device is lost, nothing more is asked of it, and
     stop hears of the Fault: CNT-6, STOP-1. *)
  let fault ~seed acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (need "kit.fault" kit.fault) in
    let v = R.submit dev [ R.Launch (h, [ R.Int seed ]) ] in
    (match R.wait dev v with
    | () -> acc := finding "CNT-6" "wait on faulting work returned normally" :: !acc
    | exception Rig.Device_lost _ -> ());
    (match R.alloc dev Rig_edge.Device 64 with
    | b -> R.free b
    | exception Rig.Device_lost _ -> ());
    close dev

  (* The mask goes back once the outcome is recorded: SIG-1.  When the
     sleep of a wait on faulting work raises Fault, a signal rig's mask
     blocks is sent to the thread, still inside the call; it stays pending
     until rig gives the mask back, and its handler, at the first poll after
     that, must find the device lost already. *)
  let mask_after_outcome ~seed acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (need "kit.fault" kit.fault) in
    let sent = ref false and lost_then = ref None in
    let previous =
      Sys.signal Sys.sigusr1 (Sys.Signal_handle (fun _ -> if !lost_then = None then lost_then := Some (R.lost dev)))
    in
    let send_once _fn = function
      | P.D.Fault _ when (not !sent) && List.mem Sys.sigusr1 (Thread.sigmask Unix.SIG_BLOCK []) ->
          sent := true;
          Self_thread.kill Sys.sigusr1
      | _ -> ()
    in
    V.on_raise send_once;
    Fun.protect
      ~finally:(fun () -> V.on_raise (fun _ _ -> ()); Sys.set_signal Sys.sigusr1 previous)
      (fun () ->
        (try R.wait dev (R.submit dev [ R.Launch (h, [ R.Int seed ]) ]) with Rig.Device_lost _ -> ());
        (* A poll point, for a handler still pending *)
        ignore (Sys.opaque_identity (ref ())));
    (match (!sent, !lost_then) with
    | false, _ ->
        Case.report_unjudged
          [ ("SIG-1", "no driver call raised Fault under a mask that blocks SIGUSR1 while rig waited on faulting work") ]
    | true, Some None ->
        acc :=
          finding "SIG-1"
            "rig gave the thread its mask back before it recorded the Fault that ended the call: a signal pending during the call ran its handler while the device was not lost yet"
          :: !acc
    | true, None -> Case.report_unjudged [ ("SIG-1", "the handler of the signal sent inside the call never ran") ]
    | true, Some (Some _) -> ());
    close dev

  (* An injected exception from alloc loses the device, with the
     exception's text: EXC-1. *)
  let exception_loses ~seed:_ acc =
    let dev = open_ 0 in
    let text = "injected by rig.exception-loses" in
    Fake.inject ~fn:"alloc" ~nth:1 (`Raise (Failure text));
    (try ignore (R.alloc dev Rig_edge.Device 64) with Failure _ -> ());
    (try ignore (R.alloc dev Rig_edge.Device 64) with
    | Rig.Device_lost why when not (Substring.contains ~sub:text why) ->
        acc := finding "EXC-1" "the device lost for alloc's Failure %S is lost with %S, without the exception's text" text why :: !acc
    | Rig.Device_lost _ -> ());
    close dev

  (* The same for grow: room answers RIG_GROW once, and grow raises. *)
  let grow_exception_loses ~seed:_ acc =
    let dev = open_ 0 in
    let b = R.alloc dev Rig_edge.Device 64 in
    Fake.inject ~fn:"room" ~nth:1 `Answer;
    Fake.inject ~fn:"grow" ~nth:1 (`Raise (Failure "injected by rig.grow-exception-loses"));
    (try ignore (R.submit dev [ R.Fill (b, 0, 4, 1) ]) with Failure _ | Rig.Device_lost _ -> ());
    (match R.alloc dev Rig_edge.Device 64 with
    | b' -> R.free b'; acc := finding "EXC-1" "a Failure from grow did not lose the device" :: !acc
    | exception Rig.Device_lost _ -> ());
    close dev

  (* A failed submit, and a failed commit, lose the device: rig calls the
     driver no more for it (the validation layer sees any counted call
     after the loss): CNT-6. *)
  let failed_submit_loses ~seed acc =
    List.iter
      (fun fn ->
        let dev = open_ 0 in
        let b = R.alloc dev Rig_edge.Device 64 in
        Fake.inject ~fn ~nth:1 `Fail;
        (match R.submit dev [ R.Fill (b, 0, 4, 1 + (seed mod 7)) ] with
        | _ -> acc := finding "CNT-6" "a submission whose %s failed returned a value" fn :: !acc
        | exception Rig.Device_lost _ -> ());
        (try ignore (R.alloc dev Rig_edge.Device 64) with Rig.Device_lost _ -> ());
        close dev)
      [ "submit"; "commit" ]

  let still_usable acc clause dev what =
    match R.alloc dev Rig_edge.Device 64 with
    | b -> R.free b
    | exception Rig.Device_lost why ->
        acc := finding clause "the device was lost after %s (%s)" what why :: !acc

  (* An exception other than Fault from sleep loses nothing: EXC-3. *)
  let sleep_exception ~seed:_ acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (spin ()) in
    let v = R.submit dev [ R.Launch (h, [ R.Int 50 ]) ] in
    Fake.inject ~fn:"sleep" ~nth:1 (`Raise Not_found);
    (try R.wait dev v with Not_found -> ());
    still_usable acc "EXC-3" dev "a Not_found from sleep";
    close dev

  (* No exception from peer or locate loses anything, nor one other than
     Fault from signaled: EXC-3.  Each raises once, on devices of its own,
     where rig calls it: signaled as rig waits, locate as the program
     writes a buffer, peer as rig checks a map_peer.  A part whose
     injection never fired judges nothing. *)
  let query_exceptions ~seed acc =
    let st = rng seed in
    let raises fn devs what ~where =
      Fake.inject ~fn ~nth:1 (`Raise Not_found);
      match what () with
      | () ->
          Fake.clear_injections ();
          Case.report_unjudged [ ("EXC-3", Printf.sprintf "%s raised nothing where %s" fn where) ]
      | exception Not_found -> List.iter (fun d -> still_usable acc "EXC-3" d ("a Not_found from " ^ fn)) devs
    in
    let dev = open_ 0 in
    let _, h = entry_of dev (spin ()) in
    let v = R.submit dev [ R.Launch (h, [ R.Int 20 ]) ] in
    raises "signaled" [ dev ] (fun () -> R.wait dev v) ~where:"rig waited for work";
    close dev;
    let dev = open_ 0 in
    let b = R.alloc dev Rig_edge.Mapped (small_size st) in
    raises "locate" [ dev ] (fun () -> R.write b 0 "rig!") ~where:"the program wrote a buffer";
    close dev;
    let a = open_ 0 in
    let b = (try open_ 1 with Exit -> raise (Needs "a second device")) in
    let r = R.alloc b Rig_edge.Device (small_size st) in
    raises "peer" [ a; b ] (fun () -> R.free (R.map_peer a r)) ~where:"rig checked a map_peer";
    close a;
    close b

  (* After stop, rig drops the faults of signaled (TIME-2), free and unload
     (STOP-7): close returns, having given everything back.  Each of the
     three raises a Fault once, all after stop (no call of them comes
     between the injections and close); one that never fired judges
     nothing of its clause. *)
  let faults_after_stop ~seed acc =
    let st = rng seed in
    let dev = open_ 0 in
    (* an image and two buffers left for close to give back *)
    let _, h = entry_of dev (spin ()) in
    let _buffers = List.init 2 (fun _ -> R.alloc dev Rig_edge.Device (small_size st)) in
    ignore (R.submit dev [ R.Launch (h, [ R.Int 20 ]) ]);
    let clause_of = [ ("signaled", "TIME-2"); ("free", "STOP-7"); ("unload", "STOP-7") ] in
    List.iter (fun (fn, _) -> Fake.inject ~fn ~nth:1 (`Fault (fn ^ " after stop, injected"))) clause_of;
    (match close dev with
    | () -> ()
    | exception e ->
        let text = Printexc.to_string e in
        List.iter
          (fun (fn, clause) ->
            if Substring.contains ~sub:(fn ^ " after stop") text then
              acc := finding clause "close raised %s: the Fault %s raised after stop was not dropped" text fn :: !acc)
          clause_of);
    let pending = Fake.pending_injections () in
    Fake.clear_injections ();
    (* a close that raised skips what came after: that clause is judged *)
    let flagged = List.map (fun (f : Case.finding) -> f.clause) !acc in
    let unjudged =
      List.filter_map
        (fun (fn, clause) ->
          if List.mem fn pending && not (List.mem clause flagged) then Some (clause, fn ^ " was not called after stop") else None)
        clause_of
    in
    if unjudged <> [] then Case.report_unjudged unjudged

  (* STOP-7, "also after a stop that raised": stop raises before it ends a
     running launch (the fake's injection), and rig must still free and
     unload only once the word reads the launch's value; the validation
     layer flags a free or unload before.  Unjudged unless stop raised with
     the launch still running and the word then came to its value. *)
  let stop_raises ~seed _acc =
    let st = rng seed in
    let dev = open_ 0 in
    let _, h = entry_of dev (spin ()) in
    let _buffers = List.init 2 (fun _ -> R.alloc dev Rig_edge.Device (small_size st)) in
    let v = R.submit dev [ R.Launch (h, [ R.Int 40 ]) ] in
    Fake.inject ~fn:"stop" ~nth:1 (`Raise (Failure "stop, injected: raised before it ended the device's work"));
    close dev;
    Fake.clear_injections ();
    (* the word as rig first read it after stop raised *)
    let rec after_stop = function
      | [] -> `No_stop
      | { Validate.fn = "stop"; phase = Raise _; _ } :: rest -> first_read rest
      | _ :: rest -> after_stop rest
    and first_read = function
      | [] -> `Unread
      | { Validate.fn = "signaled"; phase = Return w; _ } :: _ -> `Read (int_of_string w)
      | _ :: rest -> first_read rest
    in
    let unjudged why = Case.report_unjudged [ ("STOP-7", why) ] in
    match after_stop (V.events ()) with
    | `No_stop -> unjudged "stop did not raise"
    | `Unread -> unjudged "rig read the word no more after stop raised"
    | `Read w when w >= v -> unjudged "the launch was over before stop raised"
    | `Read _ -> if not (R.drained dev) then unjudged "the word did not read the launch's value within the hang bound"

  (* An Invalid_argument from entry loses nothing: EXC-2. *)
  let entry_invalid ~seed:_ acc =
    let dev = open_ 0 in
    let bin, f = (need "kit.scratch" kit.scratch) (1 lsl 40) in
    (match R.load dev bin with
    | Ok im -> (
        match entry im f with
        | _ -> Case.report_unjudged [ ("EXC-2", "entry did not raise Invalid_argument for a function needing 2^40 bytes of scratch") ]
        | exception Invalid_argument _ -> still_usable acc "EXC-2" dev "an Invalid_argument from entry")
    | Error _ -> Case.report_unjudged [ ("EXC-2", "the device refused the kit's scratch binary") ]);
    close dev

  (* An exception from prepare loses nothing: EXC-3. *)
  let prepare_exception ~seed:_ acc =
    let dev = open_ 0 in
    let im, _ = entry_of dev (spin ()) in
    Fake.inject ~fn:"prepare" ~nth:1 (`Raise Not_found);
    R.prepare im (spin ());
    still_usable acc "EXC-3" dev "a Not_found from prepare";
    close dev

  (* Free, unload, close: nothing freed or unloaded twice: GUAR-1, GUAR-5. *)
  let free_once ~seed _acc =
    let st = rng seed in
    let dev = open_ 0 in
    let a = R.alloc dev Rig_edge.Device (small_size st) in
    let b = R.alloc dev Rig_edge.Device (small_size st) in
    R.free a;
    let im, _ = entry_of dev (spin ()) in
    R.unload im;
    ignore b;
    close dev

  (* Peer mappings: asked of distinct devices, freed before what they map,
     dma only on allocated memory: GUAR-2, GUAR-3, GUAR-4. *)
  let peer_mapping ~seed _acc =
    let st = rng seed in
    let a = open_ 0 in
    let b = (try open_ 1 with Exit -> raise (Needs "a second device")) in
    let r = R.alloc b Rig_edge.Device (small_size st) in
    (* A buffer asked onto its own device: rig refuses it, and the driver's
       map_peer sees only two devices (GUAR-3). *)
    (try R.free (R.map_peer b r) with Invalid_argument _ -> ());
    let m = R.map_peer a r in
    (match kit.bus_function with
    | Some fn -> (
        ignore (R.dma r ~fn);
        try ignore (R.dma m ~fn) with Invalid_argument _ -> ())
    | None -> ());
    R.free r;
    R.free m;
    close a;
    close b

  (* Mapped memory absent: rig falls back to Pinned: GUAR-6. *)
  let pinned_fallback ~seed _acc =
    let st = rng seed in
    (* without host_addresses, then with it: the reference rig then asks
       Device memory, which the document allows as well as Pinned *)
    List.iter
      (fun host_addresses ->
        Fake.configure ~mapped_bytes:0 ~host_addresses ();
        let dev = open_ 0 in
        let b = R.alloc dev Rig_edge.Mapped (small_size st) in
        R.free b;
        close dev)
      [ false; true ]

  (* Work that hangs: rig bounds it and stops with Some: GUAR-7, STOP-1. *)
  let hang_bound ~seed:_ acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (hang ()) in
    let v = R.submit dev [ R.Launch (h, []) ] in
    (match R.wait dev v with
    | () -> acc := finding "GUAR-7" "wait on hung work returned normally" :: !acc
    | exception Rig.Device_lost _ -> V.lost_for_hang (R.name dev)
    | exception Validate.Abandoned _ -> ());
    close dev

  (* A buffer whose length is not a whole word: MEM-1. *)
  let alloc_rounding ~seed acc =
    let dev = open_ 0 in
    let n = 4 * (1 + (seed mod 8)) + 2 in
    (match R.alloc dev Rig_edge.Device n with
    | b ->
        let text = String.init n (fun i -> Char.chr (65 + (i mod 26))) in
        R.write b 0 text;
        if R.read b 0 n <> text then acc := finding "MEM-1" "a %d-byte buffer did not keep its bytes" n :: !acc;
        R.free b
    | exception (Invalid_argument _ | Rig.Device_lost _) -> ());
    close dev

  (* A buffer freed while work that uses it runs: MEM-3. *)
  let free_under_work ~seed _acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (spin ()) in
    let b = R.alloc dev Rig_edge.Device 64 in
    let v = R.submit dev [ R.Launch (h, [ R.Int (100 + (seed mod 50)); R.Buf b ]) ] in
    R.free b;
    R.wait dev v;
    close dev

  (* Work that runs a few milliseconds, waited for each time: rig sleeps on
     the word, bounded by what is left of its hang bound (GUAR-7); the async
     cases raise at each of those waits. *)
  let wait_for_work ~seed _acc =
    let dev = open_ 0 in
    let _, h = entry_of dev (spin ()) in
    List.iter (fun ms -> R.wait dev (R.submit dev [ R.Launch (h, [ R.Int ms ]) ])) [ 2 + (seed mod 3); 2; 4 ];
    close dev

  (* map_host on a device that does not map host memory: MEM-6. *)
  let map_host_declared ~seed:_ _acc =
    Fake.configure ~maps_host:false ();
    let dev = open_ 0 in
    (try ignore (R.map_host dev 0x10000n 4096) with Invalid_argument _ -> ());
    close dev

  (* Fill the device's memory so that entry answers No_memory: CODE-4. *)
  let entry_rounds ~seed acc =
    Fake.configure ~device_bytes:65536 ();
    let dev = open_ 0 in
    let filler = R.alloc dev Rig_edge.Device 40000 in
    let bin, f = (need "kit.scratch" kit.scratch) (40000 + (4 * (seed mod 16))) in
    (match R.load dev bin with
    | Ok im -> (
        match entry im f with
        | _ -> acc := finding "CODE-4" "entry succeeded on a full device" :: !acc
        | exception Rig.Out_of_memory _ -> ())
    | Error why -> failwith why);
    R.free filler;
    close dev

  (* Buffers that take all of the device's Device memory, coarse to fine so
     that few calls leave less than a word free. *)
  let fill_memory dev =
    let rec fill chunk acc =
      match R.alloc dev Rig_edge.Device chunk with
      | x -> fill chunk (x :: acc)
      | exception Rig.Out_of_memory _ -> acc
    in
    List.fold_left (fun acc chunk -> fill chunk acc) [] [ 4096; 256; 16; 4 ]

  (* Queues too small and no memory to grow them: QUEUE-4, QUEUE-5, QUEUE-6. *)
  (* QUEUE-6, "after the last, a Short n raises Rig.Out_of_memory with
     n": with the device's memory full, a submission's growths answer
     Short; the fourth, the last, answers the fake's injected Short 64,
     unlike the three before, and the Out_of_memory rig raises must carry
     the n of that last Short.  Not in a run with a failure injected of its
     own (a sweep's point, grown-unbounded's room:6:grow), whose growths it
     would change. *)
  let grow_rounds ~seed acc =
    Fake.configure ~queue_slots:2 ~device_bytes:65536 ();
    let dev = open_ 0 in
    let b = R.alloc dev Rig_edge.Device 64 in
    let fills k = List.init k (fun i -> R.Fill (b, 0, 4, i + seed)) in
    (* Room after one growth: the submission fits. *)
    R.wait dev (R.submit dev (fills 3));
    let held = fill_memory dev in
    let from = List.length (V.events ()) in
    if not !Case.injecting then Fake.inject ~fn:"grow" ~nth:4 `Answer;
    (match R.submit dev (fills 40) with
    | _ -> acc := finding "QUEUE-6" "a submission that could not grow was taken" :: !acc
    | exception Rig.Out_of_memory n -> (
        let shorts =
          List.filteri (fun i _ -> i >= from) (V.events ())
          |> List.filter_map (fun (e : Validate.event) ->
                 match (e.fn, e.phase) with
                 | "grow", Return r when String.starts_with ~prefix:"Short " r ->
                     int_of_string_opt (String.sub r 6 (String.length r - 6))
                 | _ -> None)
        in
        match List.rev shorts with
        | [] -> Case.report_unjudged [ ("QUEUE-6", "no growth answered Short") ]
        | last :: _ when n <> last ->
            acc :=
              finding "QUEUE-6" "rig raised Out_of_memory %d after the submission's last grow answered Short %d (its Shorts: %s)" n
                last (String.concat ", " (List.map string_of_int shorts))
              :: !acc
        | _ -> ()));
    Fake.clear_injections ();
    List.iter R.free held;
    R.free b;
    close dev

  (* After a Short, a round of reclamation before room is asked again:
     QUEUE-4.  A buffer the program freed while work used it, and whose
     work rig then saw end, waits for rig's next release; with the device's
     memory full, the next growth is Short, and the round that must follow
     gives that buffer back (a free) before the next room. *)
  let short_reclaims ~seed acc =
    Fake.configure ~queue_slots:2 ~device_bytes:65536 ();
    let dev = open_ 0 in
    let _, h = entry_of dev (spin ()) in
    let b = R.alloc dev Rig_edge.Device 64 in
    let spare = R.alloc dev Rig_edge.Device 4096 in
    let held = fill_memory dev in
    (* The spin outlasts the free that follows at once (or the premise is
       reported unmet below).  Each point of the sweep (254 of them) waits
       for it: 10 ms there, which still outlasts the free, as the point's
       own premise is not judged. *)
    let spin_ms = if !Case.injecting then 10 else 30 + (seed mod 20) in
    let v = R.submit dev [ R.Launch (h, [ R.Int spin_ms; R.Buf spare ]) ] in
    let at_free = List.length (V.events ()) in
    R.free spare;
    R.wait dev v;
    let at_submit = List.length (V.events ()) in
    let since k = List.filteri (fun i _ -> i >= k) (V.events ()) in
    let is fn (e : Validate.event) = e.fn = fn && e.phase = Validate.Start in
    (match R.submit dev (List.init 40 (fun i -> R.Fill (b, 0, 4, i + seed))) with
    | _ | (exception Rig.Out_of_memory _) -> ());
    let rec after_short = function
      | ({ Validate.fn = "grow"; phase = Return r; _ } : Validate.event) :: rest
        when String.starts_with ~prefix:"Short" r -> Some rest
      | _ :: rest -> after_short rest
      | [] -> None
    in
    let rec until_room = function e :: rest when not (is "room" e) -> e :: until_room rest | _ -> [] in
    (if List.exists (is "free") (List.filteri (fun i _ -> i < at_submit - at_free) (since at_free)) then
       Case.report_unjudged [ ("QUEUE-4", "the spin that used the freed buffer ended before rig's release at free: no buffer waited for a round") ]
     else
       match after_short (since at_submit) with
       | None -> Case.report_unjudged [ ("QUEUE-4", "no growth answered Short with the device's memory full") ]
       | Some rest ->
           if not (List.exists (is "free") (until_room rest)) then
             acc := finding "QUEUE-4" "after grow answered Short, rig asked room again without a round of reclamation: a buffer the program freed, whose work had ended, was not given back first" :: !acc);
    List.iter R.free held;
    R.free b;
    close dev

  (* Calls under a lock, masks: LOCK-1, LOCK-2, SIG-1.  A rig call made
     inside a lock must raise Invalid_argument as it starts: before any
     driver call, even one (locate) that a lock does not forbid. *)
  let lock_discipline ~seed:_ acc =
    let dev = open_ 0 in
    (* A driver whose alloc rightly refuses a call inside a lock (LOCK-4)
       loses the device to a rig that makes one; the LOCK-1 check has
       already seen the call. *)
    (match R.alloc dev Rig_edge.Device 64 with
    | exception (Invalid_argument _ | Rig.Device_lost _) -> ()
    | b ->
        (* What the calls need, made outside the lock: an image and a
           function of it where the kit has one, a value whose work ended,
           a second device where there is one. *)
        let image = match R.load dev kit.binary with Ok im -> Some im | Error _ | (exception _) -> None in
        let fn = match kit.spin with Some f -> Some f | None -> kit.hang in
        let ended = try Some (let v = R.submit dev [ R.Fill (b, 0, 4, 1) ] in R.wait dev v; v) with _ -> None in
        let other = match List.nth_opt openers 1 with Some _ -> (try Some (open_ 1) with _ -> None) | None -> None in
        let mine = Rig_edge_primitives.Lock.create "scenario's own lock" in
        let unchecked = ref None in
        (* Each call of rig's, made inside [mine], must raise Invalid_argument
           before it calls the driver.  One that returned did its work: [undo] undoes it, so
           that the run can end.  The first call found unchecked ends the
           tries: one that went on to call alloc inside the lock, say, broke
           LOCK-1 as well, and the calls after it add no evidence. *)
        let inside name call ~undo =
          if !unchecked = None then begin
            let before = List.length (V.events ()) in
            match Rig_edge_primitives.Lock.protect mine call with
            | r ->
                unchecked := Some (Printf.sprintf "Rig.%s called inside a lock did not raise Invalid_argument" name);
                (try undo r with _ -> ())
            | exception Invalid_argument _ -> (
                match List.filteri (fun i _ -> i >= before) (V.events ()) with
                | [] -> ()
                | first :: _ ->
                    unchecked :=
                      Some (Printf.sprintf "Rig.%s called inside a lock called %s before it raised Invalid_argument" name first.fn))
            | exception e ->
                unchecked :=
                  Some (Printf.sprintf "Rig.%s called inside a lock raised %s, not Invalid_argument" name (Printexc.to_string e))
          end
        in
        let ignore_ _ = () in
        let freed = ref false and unloaded = ref false and closed = ref false in
        inside "submit" (fun () -> R.submit dev [ R.Fill (b, 0, 4, 2) ]) ~undo:(fun v -> R.wait dev v);
        inside "write" (fun () -> R.write b 0 "lock") ~undo:ignore_;
        inside "read" (fun () -> R.read b 0 4) ~undo:ignore_;
        Option.iter (fun v -> inside "wait" (fun () -> R.wait dev v) ~undo:ignore_) ended;
        inside "alloc" (fun () -> R.alloc dev Rig_edge.Device 64) ~undo:R.free;
        inside "load" (fun () -> R.load dev kit.binary) ~undo:(function Ok im -> R.unload im | Error _ -> ());
        Option.iter
          (fun im ->
            Option.iter
              (fun f ->
                inside "entry" (fun () -> entry im f) ~undo:ignore_;
                inside "prepare" (fun () -> R.prepare im f) ~undo:ignore_)
              fn;
            inside "unload" (fun () -> R.unload im) ~undo:(fun () -> unloaded := true))
          image;
        Option.iter
          (fun d2 ->
            inside "map_peer" (fun () -> R.map_peer d2 b) ~undo:R.free;
            inside "close" (fun () -> close d2) ~undo:(fun () -> closed := true))
          other;
        inside "free" (fun () -> R.free b) ~undo:(fun () -> freed := true);
        (* What a call that went on may have half done is rig's to sort out:
           the run goes on to its end. *)
        let quietly f = try f () with Invalid_argument _ | Rig.Device_lost _ -> () in
        if not !freed then quietly (fun () -> R.free b);
        if not !unloaded then Option.iter (fun im -> quietly (fun () -> R.unload im)) image;
        if not !closed then Option.iter (fun d2 -> quietly (fun () -> close d2)) other;
        (* last: an open of dev's name that went through would stop dev *)
        inside "open" (fun () -> open_ 0) ~undo:close;
        Option.iter (fun why -> acc := finding "LOCK-2" "%s" why :: !acc) !unchecked);
    close dev
end

(* A flow's body, over the package the case runs: Flows applied to it. *)
module type FLOWS = sig
  module P : Rig_edge.Package
  module F : module type of Flows (P)
end

type needs = Any_driver | Fake_knobs

(* Each flow once: its name, its clauses, what it needs, its body. *)
type flow = {
  name : string;
  clauses : string list;
  needs : needs;
  hang_ms : int;  (** rig's hang bound in this flow *)
  run : (module FLOWS) -> seed:int -> finding list ref -> unit;
}

(* [~quick]: the flow launches nothing but the kit's hang (quick_hang_ms). *)
let flows =
  let flow ?(quick = false) name clauses needs run =
    { name; clauses; needs; hang_ms = (if quick then quick_hang_ms else hang_ms); run }
  in
  [
    flow ~quick:true "rig.lifecycle" [ "CNT-1"; "CNT-4"; "STOP-1"; "STOP-7"; "TIME-2" ] Any_driver (fun (module X) -> X.F.lifecycle);
    flow ~quick:true "rig.sleep-in-flight" [ "CNT-2" ] Any_driver (fun (module X) -> X.F.sleep_in_flight);
    flow "rig.c-call-in-flight" [ "CNT-3" ] Fake_knobs (fun (module X) -> X.F.c_call_in_flight);
    flow "rig.calls-in-flight" [ "CNT-1" ] Fake_knobs (fun (module X) -> X.F.calls_in_flight);
    flow "rig.wait-for-work" [ "GUAR-7" ] Any_driver (fun (module X) -> X.F.wait_for_work);
    flow ~quick:true "rig.release-kept" [ "CNT-5" ] Any_driver (fun (module X) -> X.F.release_kept);
    flow "rig.fault" [ "CNT-6"; "STOP-1" ] Any_driver (fun (module X) -> X.F.fault);
    flow "rig.exception-loses" [ "EXC-1" ] Fake_knobs (fun (module X) -> X.F.exception_loses);
    flow "rig.grow-exception-loses" [ "EXC-1" ] Fake_knobs (fun (module X) -> X.F.grow_exception_loses);
    flow "rig.failed-submit-loses" [ "CNT-6" ] Fake_knobs (fun (module X) -> X.F.failed_submit_loses);
    flow "rig.sleep-exception" [ "EXC-3" ] Fake_knobs (fun (module X) -> X.F.sleep_exception);
    flow "rig.entry-invalid" [ "EXC-2" ] Any_driver (fun (module X) -> X.F.entry_invalid);
    flow "rig.prepare-exception" [ "EXC-3" ] Fake_knobs (fun (module X) -> X.F.prepare_exception);
    flow "rig.query-exceptions" [ "EXC-3" ] Fake_knobs (fun (module X) -> X.F.query_exceptions);
    flow "rig.faults-after-stop" [ "STOP-7"; "TIME-2" ] Fake_knobs (fun (module X) -> X.F.faults_after_stop);
    flow "rig.stop-raises" [ "STOP-7" ] Fake_knobs (fun (module X) -> X.F.stop_raises);
    flow "rig.free-once" [ "GUAR-1"; "GUAR-5" ] Any_driver (fun (module X) -> X.F.free_once);
    flow "rig.peer-mapping" [ "GUAR-2"; "GUAR-3"; "GUAR-4" ] Any_driver (fun (module X) -> X.F.peer_mapping);
    flow "rig.pinned-fallback" [ "GUAR-6" ] Fake_knobs (fun (module X) -> X.F.pinned_fallback);
    flow ~quick:true "rig.hang-bound" [ "GUAR-7"; "STOP-1" ] Any_driver (fun (module X) -> X.F.hang_bound);
    flow "rig.alloc-rounding" [ "MEM-1" ] Any_driver (fun (module X) -> X.F.alloc_rounding);
    flow "rig.free-under-work" [ "MEM-3" ] Any_driver (fun (module X) -> X.F.free_under_work);
    flow "rig.map-host-declared" [ "MEM-6" ] Fake_knobs (fun (module X) -> X.F.map_host_declared);
    flow "rig.entry-rounds" [ "CODE-4" ] Fake_knobs (fun (module X) -> X.F.entry_rounds);
    flow "rig.grow-rounds" [ "QUEUE-4"; "QUEUE-5"; "QUEUE-6" ] Fake_knobs (fun (module X) -> X.F.grow_rounds);
    flow "rig.short-reclaims" [ "QUEUE-4" ] Fake_knobs (fun (module X) -> X.F.short_reclaims);
    flow "rig.lock-discipline" [ "LOCK-1"; "LOCK-2"; "SIG-1" ] Any_driver (fun (module X) -> X.F.lock_discipline);
    flow "rig.mask-after-outcome" [ "SIG-1" ] Any_driver (fun (module X) -> X.F.mask_after_outcome);
  ]

let of_violation (v : Validate.violation) =
  let shown =
    v.events
    |> List.map (fun (e : Validate.event) ->
           Printf.sprintf "#%d %s %s%s" e.seq e.device e.fn
             (match e.phase with Start -> "" | Return r -> " -> " ^ r | Raise r -> " raised " ^ r))
    |> String.concat "; "
  in
  finding v.clause "%s [%s]" v.detail shown

(* The first driver call of a run that failed, as the validation layer
   recorded it: it raised, or gave a failure answer the document allows
   (None from alloc, No_memory from entry, Short from grow, Error from
   image, a failed submit or commit). *)
let driver_failure (events : Validate.event list) =
  List.find_map
    (fun (e : Validate.event) ->
      let starts p s = String.starts_with ~prefix:p s in
      match e.phase with
      | Raise r -> Some (Printf.sprintf "%s raising %s" e.fn r)
      | Return s
        when (e.fn = "alloc" && s = "None")
             || (e.fn = "entry" && starts "No_memory" s)
             || (e.fn = "grow" && starts "Short" s)
             || (e.fn = "image" && starts "Error" s)
             || ((e.fn = "submit" || e.fn = "commit") && s = "false") ->
          Some (Printf.sprintf "%s answering %s" e.fn s)
      | _ -> None)
    events

(* What the last make of the driver's that raised raised, if one did: it
   opened nothing (a device busy, a thread refused). *)
let make_raised (events : Validate.event list) =
  List.fold_left
    (fun last (e : Validate.event) -> match e.phase with Raise r when e.fn = "make" -> Some r | _ -> last)
    None events

(* Whether [e] is an exception a driver call raised, which rig passed on
   to the program (EXC-1: rig loses the device and re-raises it). *)
let raised_by_driver (events : Validate.event list) e =
  let text = Validate_rules.short_exn e in
  List.exists (fun (ev : Validate.event) -> ev.phase = Validate.Raise text) events

let case flow =
  let run (module P : Rig_edge.Package) ~seed =
    try
      if flow.needs = Fake_knobs then fake_only (module P);
      let module F = Flows (P) in
      F.bound_hangs flow.hang_ms;
      let acc = ref [] in
      let seen () =
        Case.report_calls (F.V.calls ());
        let violations = List.map of_violation (F.V.finish ()) in
        (* Under an injected failure the flow's own expectations no longer
           hold: only the validation layer's findings count. *)
        if !Case.injecting then violations else List.rev !acc @ violations
      in
      match flow.run (module struct module P = P module F = F end : FLOWS) ~seed acc with
      | () | (exception Validate.Abandoned _) -> Ran (seen ())
      | exception Needs what -> Not_applicable ("needs " ^ what)
      | exception _ when !Case.injecting ->
          F.close_all ();
          Ran (seen ())
      | exception e
        when (match e with Rig.Device_lost _ | Rig.Out_of_memory _ -> true | e -> raised_by_driver (F.V.events ()) e)
             && driver_failure (F.V.events ()) <> None -> (
          (* rig told the program of a driver's failure (a Fault, another
             exception, which rig passes on, a failure answer): the driver's
             doing, which the driver's clauses judge, not this rig-side
             case's clause.  What the validation layer and the flow saw
             before still counts. *)
          match seen () with
          | [] ->
              Not_applicable
                (Printf.sprintf "not judged: the scenario ended with %s after the driver's %s" (Printexc.to_string e)
                   (Option.get (driver_failure (F.V.events ()))))
          | fs -> Ran fs)
      | exception e ->
          (* A scenario that ends on an exception it did not expect: what the
             validation layer saw is still evidence, and the exception is a
             finding against the case's first clause. *)
          Ran (seen () @ [ finding (List.hd flow.clauses) "the scenario raised %s" (Printexc.to_string e) ])
    with Needs what -> Not_applicable ("needs " ^ what)
  in
  { Case.name = flow.name; clauses = flow.clauses; run }

let cases = List.map case flows

(* ---- a flow over any package (asynchronous-exception cases) ---- *)

type flow_outcome = {
  raised : exn option;
  own : finding list;
  violations : Validate.violation list;
  calls : (string * int) list;
  make_raised : bool;
}

let needs_fake name = List.exists (fun f -> f.needs = Fake_knobs && f.name = name) flows

let run_flow (module P : Rig_edge.Package) name ~seed =
  let flow =
    match List.find_opt (fun f -> f.name = name) flows with
    | Some f -> f
    | None -> invalid_arg ("no scenario " ^ name)
  in
  if flow.needs = Fake_knobs then fake_only (module P);
  let module F = Flows (P) in
  F.bound_hangs flow.hang_ms;
  let acc = ref [] in
  let raised =
    match flow.run (module struct module P = P module F = F end : FLOWS) ~seed acc with
    | () -> None
    | exception (Needs _ as e) -> F.close_all (); raise e
    | exception e -> F.close_all (); Some e
  in
  { raised; own = List.rev !acc; violations = F.V.finish (); calls = F.V.calls ();
    make_raised = Option.is_some (make_raised (F.V.events ())) }
