(* Masks at every allocation point of a driver's own calls, finalisers, and
   the quiet of locate and peer; see mask_probes.mli. *)

open Case
module P = Rig_edge_primitives

exception Skip of string

let self () = Thread.id (Thread.self ())

(* ------------------------------------------------------------ the watch *)

(* One allocation the watched thread made: its mask and the primitives'
   state then. *)
type seen = {
  blocked : bool;
  waiting : bool;
  as_left : bool;
  masks_so_far : int;  (** the thread's rig_mask and rig_shield so far (P.masks) *)
}

type watch = {
  tid : int;
  mutable seen : seen list;  (* newest first *)
  hook : (unit -> unit) option;  (* run at each allocation, never inside itself *)
  mutable in_hook : bool;
}

(* The callback runs on the allocating thread and touches only the watch of
   that thread; allocations of OCaml code run it at once, so that nothing
   allocated before a watch starts is seen inside it. *)
let current : watch option Atomic.t = Atomic.make None

let on_alloc () =
  match Atomic.get current with
  | Some w when w.tid = self () && not w.in_hook -> (
      w.seen <-
        { blocked = P.blocks_rig_set (); waiting = P.in_wait (); as_left = P.mask_as_left (); masks_so_far = P.masks () }
        :: w.seen;
      match w.hook with
      | Some h ->
          w.in_hook <- true;
          (try h () with _ -> ());
          w.in_hook <- false
      | None -> ())
  | _ -> ()

(* [watched ?hook f]: f's outcome, the allocations this thread made inside
   it in order, and how many times it blocked signals through the
   primitives; [hook] runs at each of those allocations. *)
let watched ?hook f =
  Alloc_points.use on_alloc;
  let w = Some { tid = self (); seen = []; hook; in_hook = false } in
  let masks = P.masks () in
  Atomic.set current w;
  (* The watch ends before the outcome is boxed: that allocation is ours. *)
  let outcome =
    match f () with
    | v -> Atomic.set current None; Ok v
    | exception e -> Atomic.set current None; Error e
  in
  let seen = match w with Some w -> List.rev w.seen | None -> [] in
  (outcome, seen, P.masks () - masks)

(* The thread's signals all unblocked, and the primitives told so: a call
   made from here runs as the program's own call of a driver function. *)
let unmask_thread () =
  ignore (Thread.sigmask Unix.SIG_SETMASK []);
  P.restore (P.mask ())

(* ------------------------------------------------------ SIG-6 and SIG-9 *)

(* How a call that starts with the check of rig_holds () blocked signals
   (SIG-6): it must block rig_mask's set for its whole run.  The closures a
   call allocates before its first mask, and what it allocates after giving
   the mask back, are the OCaml shape of any such function (the mask is
   taken inside them); what is judged is a call that never blocked them, or
   one that opened them between two blocked allocations outside a wait. *)
(* What a function may allocate after giving the mask back: the box of its
   result (Some, Ok, a tuple), no more.  Work done there, such as recording
   a device in a table, runs with signals unblocked, not "for its whole
   run".  [~tail:false] where the probe cannot tell the driver's tail from
   its package wrapper's (Call_trace wraps the openers' list after the
   capability returns). *)
let boxing_allocations = 2

let judge_sig6 ?(tail = true) name seen masks =
  let outside = List.filter (fun s -> not s.waiting) seen in
  let blocked = List.mapi (fun i s -> (i, s.blocked)) outside in
  let first = List.find_map (fun (i, b) -> if b then Some i else None) blocked in
  let last = List.fold_left (fun acc (i, b) -> if b then Some i else acc) None blocked in
  match (first, last) with
  | None, _ | _, None ->
      if outside <> [] && masks = 0 then
        [ value_finding "SIG-6" "%s, called with the thread's signals unblocked, ran %d allocation(s) of OCaml code without blocking rig_mask's signals" name (List.length outside) ]
      else []
  | Some f, Some l ->
      let holes = List.filter (fun (i, b) -> i > f && i < l && not b) blocked in
      let after = List.length (List.filter (fun (i, _) -> i > l) blocked) in
      if holes <> [] then
        [ value_finding "SIG-6" "%s let rig_mask's signals through at %d allocation(s) outside a wait, between allocations with them blocked" name (List.length holes) ]
      else if tail && after > boxing_allocations then
        [ value_finding "SIG-6" "%s made %d allocation(s) of OCaml code after it gave rig_mask's signals back (more than boxing its result takes)" name after ]
      else []

let judge_sig9 name seen =
  match List.length (List.filter (fun s -> not s.as_left) seen) with
  | 0 -> []
  | n ->
      [ value_finding "SIG-9" "%s ran %d allocation(s) with a signal mask the primitives did not set (changed by other means than Rig_edge_primitives)" name n ]

(* ------------------------------------------------ a tour of the functions *)

(* How a probe makes one call: [call name f] is f's value, or None if it
   raised. *)
type caller = { call : 'a. string -> (unit -> 'a) -> 'a option }

(* Each function of the driver that works on an open device, once, in the
   order rig would call them: alloc, image, prepare and entry of the kit's
   spin, sleep on the idle word, free, unload. *)
module Tour (Pk : Rig_edge.Package) = struct
  module D = Pk.D

  let run { call } d ~size ~still_ms =
    let r = Option.join (call "alloc" (fun () -> D.alloc d Rig_edge.Device size)) in
    let im = match call "image" (fun () -> D.image d Pk.kit.binary) with Some (Ok i) -> Some i | _ -> None in
    Option.iter
      (fun i ->
        Option.iter
          (fun f ->
            ignore (call "prepare" (fun () -> D.prepare i f));
            ignore (call "entry" (fun () -> D.entry i f)))
          Pk.kit.spin)
      im;
    let w = D.signaled d in
    ignore (call "sleep" (fun () -> D.sleep d ~seen:w ~still_ms));
    Option.iter (fun r -> ignore (call "free" (fun () -> D.free d r))) r;
    Option.iter (fun i -> ignore (call "unload" (fun () -> D.unload i))) im
end

module Own_calls (Pk : Rig_edge.Package) = struct
  module D = Pk.D
  module Tour = Tour (Pk)

  let lock = P.Lock.create "the probe's lock"
  let findings = ref []
  let checked = ref []

  (* [step name f]: f run inside a counted lock of the probe's; a function
     that raises Invalid_argument there starts with the check of rig_holds ()
     and runs again unlocked, from the unmasked thread, watched for SIG-6.
     Both runs are watched for SIG-9.  The value is that of the run that
     went through. *)
  let step ?tail name f =
    let under, seen, _ = watched (fun () -> P.Lock.protect lock f) in
    findings := judge_sig9 (name ^ " (inside a lock)") seen @ !findings;
    match under with
    | Error (Invalid_argument _) ->
        checked := name :: !checked;
        let outcome, seen, masks = watched f in
        findings := judge_sig6 ?tail name seen masks @ judge_sig9 name seen @ !findings;
        (match outcome with Ok v -> v | Error e -> raise e)
    | Ok v -> v
    | Error e -> raise e

  let run ~seed =
    unmask_thread ();
    let os = step ~tail:false "the capability (openers)" Pk.openers in
    let o = match os with o :: _ -> o | [] -> raise (Skip "the driver has no device") in
    match step (o.name ^ ".make") o.make with
    | exception e ->
        (* no device: the calls the probe is about are not made *)
        let why = Printf.sprintf "opening %s raised %s" o.name (Printexc.to_string e) in
        Case.report_unjudged [ ("SIG-6", why); ("SIG-9", why) ];
        List.rev !findings
    | d ->
        let attempt name f = try Some (step name f) with _ -> None in
        Tour.run { call = attempt } d ~size:64 ~still_ms:(1 + (seed mod 5));
        ignore (attempt "stop" (fun () -> D.stop d ~fault:None));
        Option.iter (fun w -> ignore (attempt "free of the word" (fun () -> D.free d w))) (D.facts d).own_word;
        if !checked = [] then raise (Skip "no function of the driver starts with the check of rig_holds ()");
        List.rev !findings
end

(* ---------------------------------------------------------------- SIG-7 *)

(* Finalisers run inside Gc.full_major on the thread that asks for it; the
   probe allocates nothing there, so every allocation the watch sees there
   is an OCaml finaliser's.  Those of a driver block signals with
   rig_shield: from an unmasked thread, finalisers that allocated, never
   with signals blocked, and took no shield are a violation.  (C finalisers
   of custom blocks allocate nothing and are not judged.) *)
(* Every device opened, a region allocated on each, none stopped or freed:
   what SIG-7's finalisers and exit handlers are run on. *)
module Open_every (Pk : Rig_edge.Package) = struct
  module D = Pk.D

  (* The kit's function [fn] launched with [args] on d, its queue filled by
     hand as rig would, as [value]: whether it was submitted and
     committed.  An image or entry d refuses is false; only the image's
     exception is taken for a refusal. *)
  let launch d fn args ~value =
    match P.masked (fun () -> D.image d Pk.kit.binary) with
    | exception _ -> false
    | Error _ -> false
    | Ok i -> (
        match P.masked (fun () -> D.entry i fn) with
        | Rig_edge.Entry h ->
            let q = (D.facts d).queue in
            let s = Rig_edge.encode [ Rig_edge.Launch { entry = h; args } ] in
            Probes.has_room ~room:(fun () -> P.masked (fun () -> q.room s)) ~grow:(fun () -> P.masked (fun () -> D.grow d)) ~grows:4
            && P.masked (fun () -> q.submit s ~value && q.commit ())
        | _ -> false)

  (* kit.spin for [ms] launched on d, as a program that exits with work
     still running leaves it (where the kit has spin) *)
  let leave_busy d ~ms =
    Option.iter (fun fn -> try ignore (launch d fn [ Int64.of_int ms ] ~value:1) with _ -> ()) Pk.kit.spin

  let devices ?busy_ms ~seed () =
    List.iter
      (fun (o : D.t Rig_edge.opener) ->
        match P.masked o.make with
        | d ->
            ignore (try P.masked (fun () -> D.alloc d Rig_edge.Device (4 * (1 + (seed mod 8)))) with _ -> None);
            Option.iter (fun ms -> leave_busy d ~ms) busy_ms
        | exception _ -> ())
      (P.masked Pk.openers)
end

(* SIG-7: allocations of a finaliser or exit handler, none with signals
   blocked, and no rig_shield taken meanwhile. *)
let never_shielded seen masks = masks = 0 && not (List.exists (fun s -> s.blocked) seen)

(* The most allocations in a row with signals open and no rig_mask or
   rig_shield between them.  A handler or finaliser that shields its body
   may allocate its body's closure before the shield (one or two), but a
   stretch of this many is code that runs unshielded: the whole watch is
   then no longer judged as one, where a shielded sibling (another
   driver's handler, one of the same plugin's) would hide it. *)
let open_stretch_floor = 8

let longest_open_stretch seen =
  let rec go best run prev = function
    | [] -> max best run
    | s :: rest when s.blocked -> go (max best run) 0 None rest
    | s :: rest ->
        let run = if prev = Some s.masks_so_far then run + 1 else 1 in
        go (max best run) run (Some s.masks_so_far) rest
  in
  go 0 0 None seen

let unshielded seen masks = never_shielded seen masks || longest_open_stretch seen >= open_stretch_floor

(* SIG-7's "waits included": while armed, each wait the thread enters sends
   it SIGUSR2 as it opens (P.signal_at_wait).  Inside rig_shield the signal
   waits for the shield's end; a handler that runs inside the wait shows a
   wait of a finaliser or exit handler left unshielded.  The handler stays
   installed, inert once disarmed: a signal still pending then must not
   meet SIGUSR2's default action. *)
module Signal_at_waits = struct
  let armed = Atomic.make false
  let in_wait = Atomic.make 0

  let on_sigusr2 _ =
    if Atomic.get armed then begin
      if P.in_wait () then Atomic.incr in_wait;
      P.signal_at_wait 1
    end

  let install () = Sys.set_signal Sys.sigusr2 (Sys.Signal_handle on_sigusr2)

  let arm () =
    Atomic.set armed true;
    P.signal_at_wait 1

  let disarm () =
    Atomic.set armed false;
    P.signal_at_wait 0

  (* how many handlers ran inside a wait while armed *)
  let ran_in_wait () = Atomic.get in_wait
end

module Finalisers (Pk : Rig_edge.Package) = struct
  module O = Open_every (Pk)

  let run ~seed =
    unmask_thread ();
    Signal_at_waits.install ();
    (* Devices and regions dropped without stop or free, with work still
       running (a finaliser that lets it finish waits): what a program
       that lost them leaves to the driver's finalisers.  A major cycle
       that ends before the watch runs them unwatched (a child inherits
       its zygote's cycle half done: blind ld-registry-fin-at-load, whose
       finalisers are on registry generations the opens retire, was once
       n/a so), hence a full cycle first, and up to three tries. *)
    let rec attempt k =
      Gc.full_major ();
      O.devices ~busy_ms:300 ~seed ();
      (* armed around the watch, not in it: the watch counts every
         allocation of its function as a finaliser's *)
      Signal_at_waits.arm ();
      match Fun.protect ~finally:Signal_at_waits.disarm (fun () -> watched (fun () -> Gc.full_major (); Gc.full_major ())) with
      | _, [], _ when k < 3 -> attempt (k + 1)
      | watch -> watch
    in
    let _, seen, masks = attempt 1 in
    match seen with
    | _ when Signal_at_waits.ran_in_wait () > 0 ->
        [ value_finding "SIG-7" "a finaliser of the driver's, run by Gc.full_major, entered a wait outside rig_shield: a signal sent as the wait opened ran its handler inside it (%d time(s)), where an exception of it escapes into the code the finaliser interrupts" (Signal_at_waits.ran_in_wait ()) ]
    | [] -> raise (Skip "no finaliser of the driver ran (none allocated) for devices and regions dropped without stop or free")
    | _ when never_shielded seen masks ->
        [ value_finding "SIG-7" "the driver's finalisers, run by Gc.full_major on a thread with its signals unblocked, made %d allocation(s) and never blocked signals with rig_shield" (List.length seen) ]
    | _ when unshielded seen masks ->
        [ value_finding "SIG-7" "the driver's finalisers, run by Gc.full_major on a thread with its signals unblocked, made %d allocation(s) in a row with signals unblocked and no rig_shield between them" (longest_open_stretch seen) ]
    | _ -> []
end

(* SIG-7's exit handlers: those the driver registers as its plugin loads
   and while its devices open and run, run here by Stdlib.do_at_exit, on a
   thread with its signals unblocked (each handler runs once: the child's
   own exit runs none again).  Handlers run last registered first, so one
   of the probe's registered after the driver's work starts the watch, and
   Plugin_load's, registered right before the plugin loaded, ends it;
   for a driver linked into the program, a second one of the probe's,
   registered before the driver's work, ends it.  The handlers of the
   process's libraries (registered before) run after the bracket. *)
module Exit_handlers (Pk : Rig_edge.Package) = struct
  module O = Open_every (Pk)

  (* "waits included": Signal_at_waits while the watch runs. *)
  let run ~seed =
    unmask_thread ();
    let watch = ref None and result = ref None in
    let stop_watch () =
      match !watch with
      | Some (w, masks) ->
          Atomic.set current None;
          Signal_at_waits.disarm ();
          watch := None;
          result := Some (List.rev w.seen, P.masks () - masks)
      | None -> ()
    in
    Signal_at_waits.install ();
    if Plugin_load.loaded () then Plugin_load.on_exit_bracket_end stop_watch else at_exit stop_watch;
    (* work still running at exit: a handler that lets it finish waits *)
    O.devices ~busy_ms:300 ~seed ();
    at_exit (fun () ->
        Alloc_points.use on_alloc;
        let w = { tid = self (); seen = []; hook = None; in_hook = false } in
        watch := Some (w, P.masks ());
        Signal_at_waits.arm ();
        Atomic.set current (Some w));
    Stdlib.do_at_exit ();
    match !result with
    | _ when Signal_at_waits.ran_in_wait () > 0 ->
        [ value_finding "SIG-7" "an exit handler the driver registered as it loaded or while its devices opened entered a wait outside rig_shield: a signal sent as the wait opened ran its handler inside it (%d time(s)), where an exception of it escapes the handler" (Signal_at_waits.ran_in_wait ()) ]
    | None | Some ([], _) ->
        raise (Skip "no exit handler the driver registered as it loaded or while its devices opened ran OCaml code that allocates")
    | Some (seen, masks) when never_shielded seen masks ->
        [ value_finding "SIG-7" "the exit handlers the driver registered as it loaded or while its devices opened, run at exit on a thread with its signals unblocked, made %d allocation(s) and never blocked signals with rig_shield" (List.length seen) ]
    | Some (seen, masks) when unshielded seen masks ->
        [ value_finding "SIG-7" "the exit handlers the driver registered as it loaded or while its devices opened, run at exit on a thread with its signals unblocked, made %d allocation(s) in a row with signals unblocked and no rig_shield between them" (longest_open_stretch seen) ]
    | Some _ -> []
end

(* --------------------------------------------------------------- LOCK-6 *)

(* locate and peer, called in each state a device goes through (right
   after the opens, with work in flight, after its work faulted, after
   stop), inside a counted lock and outside one: neither may take a
   counted lock, enter a wait (the primitives' count of both on this
   thread), raise, nor block otherwise: sleep 150 ms or more, which the
   kernel's figures for the thread show (wall time it neither ran nor
   waited for a CPU), where a wait for the OCaml runtime, which a busy
   OCaml helper of the driver keeps up to its tick, stays well under it. *)
module Quiet (Pk : Rig_edge.Package) = struct
  module D = Pk.D
  module O = Open_every (Pk)

  let blocked_floor_ms = 150.

  (* A call that slept this long is timed again (below).  Lower than the
     floor: a driver whose calls wait for something its opens started (a
     link probe, say) blocks for what is left of that, which the opens and
     the calls before it eat into on a loaded machine; the calls timed
     again come right after opens of their own. *)
  let suspect_floor_ms = 50.

  (* ms this thread ran or waited for a CPU, so far *)
  let busy_ms () = Option.map (fun (ran, queued) -> ran +. queued) (Probes.sched_ms ())

  (* kit.fault launched on d, then sleeps until one raises Fault (3 s at
     most): the fault's text, or None *)
  let fault d =
    match Pk.kit.fault with
    | Some fn when O.launch d fn [] ~value:100 ->
        let until = Unix.gettimeofday () +. 3. in
        let rec wait () =
          if Unix.gettimeofday () > until then None
          else
            match P.masked (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:100) with
            | () -> wait ()
            | exception D.Fault why -> Some why
        in
        wait ()
    | _ -> None

  (* [with_full_output f]: f () with file descriptors 1 and 2 on a pipe
     that is full, so that a write to either blocks; then they are put
     back and the pipe drained, which lets a writer that blocked go on. *)
  let with_full_output f =
    flush stdout;
    flush stderr;
    let r, w = Unix.pipe ~cloexec:true () in
    Unix.set_nonblock w;
    let chunk = Bytes.make 65536 'x' in
    (try while Unix.write w chunk 0 (Bytes.length chunk) > 0 do () done with Unix.Unix_error _ -> ());
    Unix.clear_nonblock w;
    let saved = List.map (fun fd -> (fd, Unix.dup ~cloexec:true fd)) [ Unix.stdout; Unix.stderr ] in
    List.iter (fun (fd, _) -> Unix.dup2 ~cloexec:false w fd) saved;
    Fun.protect f ~finally:(fun () ->
        List.iter (fun (fd, keep) -> Unix.dup2 ~cloexec:false keep fd; Unix.close keep) saved;
        Unix.close w;
        Unix.set_nonblock r;
        (* the read end stays open: a writer still blocked gets its bytes
           in once drained, never an EPIPE (SIGPIPE) *)
        try while Unix.read r chunk 0 (Bytes.length chunk) > 0 do () done with Unix.Unix_error _ -> ())

  let run ~seed =
    let os = P.masked Pk.openers in
    let devices = List.filter_map (fun (o : D.t Rig_edge.opener) -> try Some (P.masked o.make) with _ -> None) os in
    let d = match devices with d :: _ -> d | [] -> raise (Skip "the driver opens no device") in
    let r =
      match P.masked (fun () -> D.alloc d Rig_edge.Device 64) with
      | Some r -> r
      | None | (exception _) -> raise (Skip "alloc of 64 bytes of Device memory failed")
    in
    let lock = P.Lock.create "the probe's lock" in
    let findings = ref [] in
    (* [measure] outside the probe's lock, then inside it, told whether the
       call outside returned quietly (an exception inside only is a check
       of rig_holds) *)
    let both_ways measure =
      let outside = measure ?outside_returned:None "" in
      let outside_returned = Option.is_none outside in
      [ outside; P.Lock.protect lock (fun () -> measure ?outside_returned:(Some outside_returned) ", inside a counted lock") ]
    in
    (* ms the thread slept in f (), 0 where the kernel's figures are not read *)
    let slept_in f =
      let t0 = Unix.gettimeofday () and b0 = busy_ms () in
      f ();
      match (b0, busy_ms ()) with
      | Some b0, Some b1 -> ((Unix.gettimeofday () -. t0) *. 1000.) -. (b1 -. b0)
      | _ -> 0.
    in
    (* A C lock taken in one call may be a finaliser's, run by the call's
       allocation: the call is judged on two more like it, each of which
       must take one too. *)
    let takes_c_lock_again f =
      List.for_all
        (fun () ->
          let _, n, _ = C_locks.taken_in f in
          n > 0)
        [ (); () ]
    in
    let c_lock_finding what state where c_lock =
      value_finding "LOCK-5" "%s %s%s took a lock: the driver's C code called %s (in 3 of 3 calls)" what state where c_lock
    in
    (* A wait, a counted take or a move of rig_holds seen in one call may
       be a finaliser's, run by the call's allocation (SIG-7 judges those,
       and a dropped region's finaliser may wait).  Each measured call comes
       right after a Gc.full_major, which runs the finalisers of what was
       dropped before it; only where a major cycle ended inside the call
       may one have run there.  Then one of eight more calls like it, made
       the same way ([inside] the probe's lock or not) once the finalisers
       pending have run, must show it too.  Eight, for a call that waits
       once in a few (blind lq-locate-stats-flush: every 4th locate);
       without a cycle, a call that waits only the first time (blind
       lq-peer-first-pair) stands on its own. *)
    let counters () = (P.waits (), P.activity (), P.holds ()) in
    (* No collection while stdout and stderr are full pipes: a finaliser
       that logs would block there for good (one runs right before). *)
    let pipes_full = ref false in
    let collect () = if not !pipes_full then Gc.full_major () in
    let shows_again ~inside like moved =
      collect ();
      let seen = ref false in
      let call g =
        let before = counters () in
        (try g () with _ -> ());
        seen := !seen || moved before (counters ())
      in
      let again () = like (fun g -> if inside then P.Lock.protect lock (fun () -> call g) else call g) in
      let rec up_to k = if k > 0 && not !seen then (again (); up_to (k - 1)) in
      up_to 8;
      !seen
    in
    (* A call that slept that long is judged on the longest of two more
       calls like it: on a loaded machine a thread that holds the OCaml
       runtime can be descheduled as long, and the call then waits for the
       runtime once.  [like observe] makes one call like f and hands it to
       [observe]; by default f itself. *)
    let check ?like state what f =
      let like = match like with Some l -> l | None -> fun observe -> observe f in
      let again () =
        let ms = ref 0. in
        like (fun g -> ms := slept_in g);
        !ms
      in
      (* a finding, or a block to confirm once outside the probe's lock
         (where a make may open devices anew) *)
      let measure ?(outside_returned = false) where =
        (* the finalisers of what was dropped so far run now, not in f;
           one may still run in f only if a major cycle ends there *)
        collect ();
        let waits, activity, holds = counters () and cycles = (Gc.quick_stat ()).major_collections in
        let measured = C_locks.taken_in (fun () -> slept_in f) in
        let quiet_gc = (Gc.quick_stat ()).major_collections = cycles in
        let gc_note =
          if quiet_gc then ""
          else " (a major GC cycle ended in the call, whose finalisers may run there: seen again in one of up to 8 calls like it, once the finalisers pending had run)"
        in
        let confirmed moved finding =
          Some (fun () -> if quiet_gc || shows_again ~inside:(where <> "") like moved then Some finding else None)
        in
        match measured with
        | Ok slept, c_takes, c_lock ->
            if P.waits () <> waits then
              confirmed (fun (w, _, _) (w', _, _) -> w' <> w)
                (value_finding "LOCK-6" "%s %s%s entered a wait%s" what state where gc_note)
            else if P.activity () <> activity then
              (* a counted take, even one that never blocks (LOCK-5) *)
              confirmed (fun (_, a, _) (_, a', _) -> a' <> a)
                (value_finding "LOCK-5" "%s %s%s took a counted lock%s" what state where gc_note)
            else if c_takes > 0 && takes_c_lock_again f then
              Some (fun () -> Some (c_lock_finding what state where c_lock))
            else if P.holds () <> holds then
              let left = P.holds () in
              confirmed (fun (_, _, h) (_, _, h') -> h' <> h)
                (value_finding "LOCK-6" "%s %s%s left rig_holds at %d, not %d%s" what state where left holds gc_note)
            else if slept >= suspect_floor_ms then
              Some
                (fun () ->
                  let confirmed = Float.max (try again () with _ -> 0.) (try again () with _ -> 0.) in
                  if confirmed >= blocked_floor_ms then
                    Some
                      (finding "LOCK-6" "%s %s%s blocked: its thread slept %.0f ms in it, and %.0f ms in the longest of two calls like it (neither ran nor waited for a CPU)"
                         what state where slept confirmed)
                  else None)
            else None
        | Error (Invalid_argument _ as e), _, _ when outside_returned ->
            (* raised inside the lock only: a check of rig_holds, which
               these functions must not make (LOCK-5) *)
            Some (fun () -> Some (value_finding "LOCK-5" "%s %s%s raised %s, and returned outside it: it checks rig_holds" what state where (Printexc.to_string e)))
        | Error e, _, _ -> Some (fun () -> Some (value_finding "LOCK-6" "%s %s%s raised %s" what state where (Printexc.to_string e)))
      in
      List.iter (Option.iter (fun judge -> Option.iter (fun f -> findings := f :: !findings) (judge ()))) (both_ways measure)
    in
    (* signaled "must take no lock" (LOCK-5): a counted take, even one that
       never blocks (a try-lock), shows in the primitives' count of takes
       (activity less waits).  Whether it blocks or raises is TIME-1's. *)
    let check_signaled state =
      let measure ?(outside_returned = false) where =
        let takes () = P.activity () - P.waits () in
        let before = takes () and holds = P.holds () in
        let signaled () = ignore (D.signaled d) in
        match C_locks.taken_in signaled with
        | Ok (), c_takes, c_lock ->
            let n = takes () - before in
            if n > 0 then Some (value_finding "LOCK-5" "signaled %s%s took %d counted lock(s)" state where n)
            else if c_takes > 0 && takes_c_lock_again signaled then Some (c_lock_finding "signaled" state where c_lock)
            else if P.holds () <> holds then
              Some (value_finding "LOCK-5" "signaled %s%s left rig_holds at %d, not %d" state where (P.holds ()) holds)
            else None
        | Error (Invalid_argument _ as e), _, _ when outside_returned ->
            Some (value_finding "LOCK-5" "signaled %s%s raised %s, and returned outside it: it checks rig_holds" state where (Printexc.to_string e))
        | Error _, _, _ -> None
      in
      List.iter (Option.iter (fun f -> findings := f :: !findings)) (both_ways measure)
    in
    (* A peer mapping too, from the second state on (a driver may treat
       the places of its mappings apart: blind lq-locate-checks-holds checks
       rig_holds there only): of a region of the second device, where peer
       says it maps and map_peer makes one.  Made after the first state,
       whose peer must be the first asked (blind lq-peer-first-pair waits
       then only). *)
    let mapping = ref None in
    let map_a_peer () =
      match devices with
      | _ :: d' :: _ when (try D.peer d d' with _ -> false) -> (
          match P.masked (fun () -> D.alloc d' Rig_edge.Device 64) with
          | Some r' -> mapping := (try Some (P.masked (fun () -> D.map_peer d d' r')) with _ -> None)
          | None | (exception _) -> ())
      | _ -> ()
    in
    let probe ?like_locate ?like_peer state =
      check_signaled state;
      check ?like:like_locate state "locate" (fun () -> ignore (D.locate d r));
      Option.iter (fun m -> check state "locate of a peer mapping" (fun () -> ignore (D.locate d m))) !mapping;
      List.iter (fun d' -> if d' != d then check ?like:like_peer state "peer" (fun () -> ignore (D.peer d d'))) devices
    in
    (* calls like those right after the opens: [call] of the first k
       devices opened anew, handed to [observe]; then they are stopped, and
       the regions [call] allocated freed *)
    let on_fresh k call observe =
      let opened = List.filter_map (fun (o : D.t Rig_edge.opener) -> try Some (P.masked o.make) with _ -> None) os in
      let allocated = ref [] in
      let alloc d1 =
        match P.masked (fun () -> D.alloc d1 Rig_edge.Device 64) with
        | Some r1 -> allocated := (d1, r1) :: !allocated; Some r1
        | None -> None
      in
      (try Option.iter observe (call alloc (List.filteri (fun i _ -> i < k) opened)) with _ -> ());
      List.iter (fun d -> try P.masked (fun () -> D.stop d ~fault:None) with _ -> ()) opened;
      List.iter (fun (d1, r1) -> try P.masked (fun () -> D.free d1 r1) with _ -> ()) !allocated
    in
    let like_locate =
      on_fresh 1 (fun alloc -> function
        | d1 :: _ -> Option.map (fun r1 () -> ignore (D.locate d1 r1)) (alloc d1)
        | [] -> None)
    and like_peer = on_fresh 2 (fun _ -> function d1 :: d2 :: _ -> Some (fun () -> ignore (D.peer d1 d2)) | _ -> None) in
    probe ~like_locate ~like_peer "right after the opens";
    map_a_peer ();
    (* A write to stdout or stderr may block, for as long as the reader
       lets the pipe stay full: make it so, and ask again. *)
    Gc.full_major ();
    with_full_output (fun () ->
        pipes_full := true;
        Fun.protect ~finally:(fun () -> pipes_full := false) (fun () -> probe "with stdout and stderr full pipes"));
    (* Work in flight: a fill of the region, not waited for. *)
    let q = (D.facts d).queue in
    let v = 1 + (seed mod 9) in
    let s = Rig_edge.encode [ Rig_edge.Fill { dst = (D.locate d r).handle; off = 0; len = 64; byte = v } ] in
    let submitted =
      P.masked (fun () ->
          Probes.has_room ~room:(fun () -> q.room s) ~grow:(fun () -> D.grow d) ~grows:4 && q.submit s ~value:v && q.commit ())
    in
    if submitted then probe "with work in flight";
    let faulted = fault d in
    Option.iter (fun _ -> probe "after its work faulted") faulted;
    (try P.masked (fun () -> D.stop d ~fault:faulted) with _ -> ());
    probe "after stop";
    List.iter (fun d' -> if d' != d then try P.masked (fun () -> D.stop d' ~fault:None) with _ -> ()) devices;
    List.rev !findings
end

(* --------------------------------------------------------------- LOCK-3 *)

(* At each allocation of a driver call where rig_holds () is 0, the same
   thread asks alloc (then free) of the device: a driver lock held there
   uncounted makes that take fail (OCaml 5's mutexes refuse a re-take by
   their owner with Sys_error) or never return (the runner blames LOCK-3
   for a call that hangs inside another on the same thread). *)
module Counted (Pk : Rig_edge.Package) = struct
  module D = Pk.D
  module Tour = Tour (Pk)

  (* grow, called as rig calls it: after a room of the calling thread that
     answered RIG_GROW, for fills of a region of d, doubling their number
     until one does (at most 4096).  Each submission room makes room for is
     submitted and committed.  Answers the region the fills write, for the
     caller to free once d is stopped. *)
  let grow_once d (call : string -> (unit -> Rig_edge.grow_answer) -> Rig_edge.grow_answer option) =
    match P.masked (fun () -> D.alloc d Rig_edge.Device 4) with
    | None | (exception _) -> None
    | Some r ->
        let q = (D.facts d).queue in
        let dst = (D.locate d r).handle in
        let value = ref 0 in
        let submit s = incr value; ignore (P.masked (fun () -> q.submit s ~value:!value && q.commit ())) in
        let rec go k =
          if k <= 4096 then
            let s = Rig_edge.encode (List.init k (fun i -> Rig_edge.Fill { dst; off = 0; len = 4; byte = i land 255 })) in
            match P.masked (fun () -> q.room s) with
            | Rig_edge.Room -> submit s; go (2 * k)
            | Grow -> (
                match call "grow" (fun () -> D.grow d) with
                | Some Grown -> ( match P.masked (fun () -> q.room s) with Room -> submit s | Grow | (exception _) -> ())
                | Some (Short _) | None -> ())
            | exception _ -> ()
        in
        go 8;
        Some r

  let run ~seed =
    let os = P.masked Pk.openers in
    let d = match os with o :: _ -> P.masked o.make | [] -> raise (Skip "the driver has no device") in
    let findings = ref [] and tried = ref 0 and again = ref false in
    (* The calls that may run once more from inside themselves, with the
       same arguments, changing nothing rig sees (a second entry for f
       makes nothing new; prepare of an f with an entry starts nothing; a
       sleep of 2 ms): a lock of their own held uncounted shows there. *)
    let rerunnable = [ "entry"; "prepare"; "sleep" ] in
    (* free cannot run twice on one region (GUAR-1): inside free, another
       region of the device is freed, one of these spares. *)
    let spares = ref (List.filter_map (fun _ -> P.masked (fun () -> try D.alloc d Rig_edge.Device 4 with _ -> None)) [ 1; 2 ]) in
    (* A prepare of f run again finds f's prepare started and may return
       before the lock it takes to start one.  So prepare of f runs once
       more per allocation point k, on an image of its own, and at its k-th
       allocation with rig_holds () at 0 asks a prepare of another
       function of that image, which starts one as a first prepare does. *)
    let nest = ref None (* k, and the prepare to ask there *) and points = ref 0 in
    let device_of = function "make" -> "the device already open" | _ -> "the same device" in
    let call name f =
      let again_inside what g =
        again := true;
        (match g () with
        | _ -> ()
        | exception Sys_error why ->
            findings :=
              value_finding "LOCK-3" "inside %s, at an allocation with rig_holds () = 0, %s raised Sys_error %S: the thread held a lock of the driver's it had not counted" name what why
              :: !findings
        | exception _ -> ());
        again := false
      in
      let hook () =
        if P.holds () = 0 && not !again then begin
          match !nest with
          | Some (k, what, g) when name = "prepare" ->
              incr points;
              if !points = k then again_inside what g
          | _ -> (
              if List.mem name rerunnable then again_inside (name ^ " with the same arguments") (fun () -> ignore (f ()))
              else if name = "free" then
                match !spares with
                | r :: rest -> spares := rest; again_inside "free of another region of the device" (fun () -> D.free d r)
                | [] -> ())
        end;
        if P.holds () = 0 then begin
          incr tried;
          let takes () = P.activity () - P.waits () in
          let t0 = takes () in
          match D.alloc d Rig_edge.Device 4 with
          | Some r -> (
              (* the free too: a lock of free's own shows there, at every
                 allocation, where the spares above run out *)
              match D.free d r with
              | () -> ()
              | exception Sys_error why ->
                  findings :=
                    value_finding "LOCK-3" "inside %s, at an allocation with rig_holds () = 0, free on the same device raised Sys_error %S: the thread held a lock of the driver's it had not counted" name why
                    :: !findings
              | exception _ -> ())
          | None -> ()
          | exception Sys_error why ->
              findings :=
                value_finding "LOCK-3" "inside %s, at an allocation with rig_holds () = 0, alloc on %s raised Sys_error %S: the thread held a lock of the driver's it had not counted" name (device_of name) why
                :: !findings
          | exception (D.Fault _ | Invalid_argument _) -> ()
          | exception e ->
              (* LOCK-9: "A function that takes no lock may be called from
                 a callback at any point": this alloc took no counted lock
                 (before it raised), so it may not refuse the callback. *)
              if takes () = t0 then
                findings :=
                  value_finding "LOCK-9" "inside %s, at an allocation with rig_holds () = 0, alloc on %s took no lock and raised %s" name (device_of name)
                    (Printexc.to_string e)
                  :: !findings
        end
      in
      let outcome, _, _ = watched ~hook (fun () -> P.masked f) in
      match outcome with Ok v -> Some v | Error _ -> None
    in
    Tour.run { call } d ~size:(4 * (1 + (seed mod 16))) ~still_ms:2;
    (match (Pk.kit.spin, List.find_opt (fun g -> g <> None && g <> Pk.kit.spin) [ Pk.kit.fault; Pk.kit.hang ]) with
    | Some f, Some (Some g) ->
        let rec at k =
          match P.masked (fun () -> D.image d Pk.kit.binary) with
          | Ok i ->
              nest := Some (k, Printf.sprintf "prepare of %s (another function of the image)" g, fun () -> D.prepare i g);
              points := 0;
              ignore (call "prepare" (fun () -> D.prepare i f));
              nest := None;
              (* The entries made, as rig asks them after a prepare: what a
                 driver keeps of a prepare until then (a queue of names, per
                 device) is gone before the next image's prepare. *)
              List.iter (fun h -> try ignore (P.masked (fun () -> D.entry i h)) with _ -> ()) [ f; g ];
              (try P.masked (fun () -> D.unload i) with _ -> ());
              (* on to the next point while prepare still reached this one
                 (32 points at most) *)
              if !points >= k && k < 32 then at (k + 1)
          | Error _ | (exception _) -> ()
        in
        at 1
    | _ -> ());
    (* The opener's make, which the tour does not call: inside it, alloc
       of the device already open (a lock the driver shares between its
       devices, held uncounted, shows there). *)
    (match os with
    | o :: _ -> Option.iter (fun d' -> try P.masked (fun () -> D.stop d' ~fault:None) with _ -> ()) (call "make" o.make)
    | [] -> ());
    let filled = grow_once d call in
    List.iter (fun r -> try P.masked (fun () -> D.free d r) with _ -> ()) !spares;
    (try P.masked (fun () -> D.stop d ~fault:None) with _ -> ());
    (* after stop, so that no work of the probe's still writes it *)
    Option.iter (fun r -> try P.masked (fun () -> D.free d r) with _ -> ()) filled;
    if !tried = 0 then raise (Skip "no driver call allocated with rig_holds () at 0");
    List.sort_uniq compare !findings
end

let case name clauses run =
  { name; clauses; run = (fun pkg ~seed -> try Ran (run pkg ~seed) with Skip why -> Not_applicable why) }

let cases =
  [
    case "probe.own-calls-masked" [ "SIG-6"; "SIG-9" ] (fun (module Pk : Rig_edge.Package) ~seed ->
        let module M = Own_calls (Pk) in
        M.run ~seed);
    case "probe.SIG-7.finalisers-shielded" [ "SIG-7" ] (fun (module Pk : Rig_edge.Package) ~seed ->
        let module M = Finalisers (Pk) in
        M.run ~seed);
    case "probe.SIG-7.exit-handlers-shielded" [ "SIG-7" ] (fun (module Pk : Rig_edge.Package) ~seed ->
        let module M = Exit_handlers (Pk) in
        M.run ~seed);
    case "probe.locate-peer-quiet" [ "LOCK-6"; "LOCK-5" ] (fun (module Pk : Rig_edge.Package) ~seed ->
        let module M = Quiet (Pk) in
        M.run ~seed);
    case "probe.locks-counted" [ "LOCK-3"; "LOCK-9" ] (fun (module Pk : Rig_edge.Package) ~seed ->
        let module M = Counted (Pk) in
        M.run ~seed);
  ]
