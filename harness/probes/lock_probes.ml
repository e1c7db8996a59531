(* Lock discipline and signal probes; see lock_probes.mli. *)

open Case
module P = Rig_edge_primitives

let spf = Printf.sprintf

exception Skip of string

(* ------------------------------------------------- /proc/self/task *)

(* The process's threads.  One read of /proc/self/task can skip a live
   thread: the kernel's walk stops early when the thread it stands on exits
   (seen under load: a thread started before the LOCK-4 snapshot looked
   new).  So read until two reads in a row agree (at most 50 reads), and
   keep every thread any read saw. *)
let tasks () =
  let rec settle seen prev k =
    let now = Self_thread.tasks () in
    let seen = List.sort_uniq compare (now @ seen) in
    if now = prev || k = 0 then seen else settle seen now (k - 1)
  in
  let first = Self_thread.tasks () in
  settle first first 49

(* The SigBlk line of a task's status, as a 64-bit set (bit n-1 for signal
   n); None once the task is gone. *)
let sigblk tid =
  match open_in (spf "/proc/self/task/%d/status" tid) with
  | exception Sys_error _ -> None
  | ic ->
      let rec find () =
        match input_line ic with
        | exception End_of_file -> None
        | l when String.length l > 7 && String.sub l 0 7 = "SigBlk:" ->
            Int64.of_string_opt ("0x" ^ String.trim (String.sub l 7 (String.length l - 7)))
        | _ -> find ()
      in
      let r = try find () with Sys_error _ -> None in
      close_in_noerr ic;
      r

(* The signal numbers of a 64-bit set. *)
let signals_of set =
  List.filter (fun n -> Int64.logand set (Int64.shift_left 1L (n - 1)) <> 0L) (List.init 64 (fun i -> i + 1))

let task_name tid =
  match open_in (spf "/proc/self/task/%d/comm" tid) with
  | exception Sys_error _ -> "?"
  | ic ->
      let n = try String.trim (input_line ic) with _ -> "?" in
      close_in_noerr ic;
      n

module Probe (Pk : Rig_edge.Package) = struct
  module D = Pk.D

  let openers () = P.masked Pk.openers

  let first () = match openers () with o :: _ -> o | [] -> raise (Skip "the driver has no device")

  (* Stops d and, once its word reads [last] (bounded), frees what the probe
     made and the driver's own word; a word that never gets there leaves
     them to the process's end. *)
  let close d ?(stopped = false) ?(images = []) ?(regions = []) last =
    (* rig stops a device once (CNT-1) *)
    if not stopped then (try P.masked (fun () -> D.stop d ~fault:None) with _ -> ());
    if Probes.word_reaches ~signaled:(fun () -> D.signaled d) ~last ~ms:5000 then begin
      List.iter (fun r -> try P.masked (fun () -> D.free d r) with _ -> ()) regions;
      List.iter (fun i -> try P.masked (fun () -> D.unload i) with _ -> ()) images;
      Option.iter (fun w -> try P.masked (fun () -> D.free d w) with _ -> ()) (D.facts d).own_word
    end

  (* Sleeps on d (still_ms each, [tries] times at most) until the word
     reads [v]: the last sleep is the one that saw it move. *)
  let await_word ?(still_ms = 20) ?(tries = 250) d v =
    let rec await k =
      let w = D.signaled d in
      if w < v && k > 0 then begin
        (try P.masked (fun () -> D.sleep d ~seen:w ~still_ms) with _ -> ());
        await (k - 1)
      end
    in
    await tries

  (* Fills 4 bytes of [r] as value [v] on d's queue (grow as rig does) and
     waits (bounded) for the word to read it. *)
  let fill d r v =
    let q = (D.facts d).queue in
    let s = Rig_edge.encode [ Rig_edge.Fill { dst = (D.locate d r).handle; off = 0; len = 4; byte = v land 255 } ] in
    if Probes.has_room ~room:(fun () -> P.masked (fun () -> q.room s)) ~grow:(fun () -> P.masked (fun () -> D.grow d)) ~grows:4 then begin
      ignore (P.masked (fun () -> q.submit s ~value:v));
      ignore (P.masked (fun () -> q.commit ()));
      await_word d v
    end

  (* ------------------------------------------------------------ LOCK-4 *)

  (* openers and each opener's make, called while the thread holds a
     counted lock of its own: each must raise Invalid_argument, and a
     refused make must open nothing (no new thread in the process; a make
     outside the lock still works). *)
  let lock4 () =
    let acc = ref [] in
    let lock = P.Lock.create "prober" in
    let in_lock f = P.Lock.protect lock (fun () -> P.masked f) in
    let openers_in_lock when_ =
      match in_lock Pk.openers with
      | _ -> acc := value_finding "LOCK-4" "the capability (openers) called inside a lock%s returned instead of raising Invalid_argument" when_ :: !acc
      | exception Invalid_argument _ -> ()
      | exception e ->
          acc := value_finding "LOCK-4" "the capability (openers) called inside a lock%s raised %s, not Invalid_argument" when_ (Printexc.to_string e) :: !acc
    in
    openers_in_lock "";
    let os = openers () in
    if os = [] then raise (Skip "the driver has no device");
    (* Every call starts with the check, not only the first (a capability
       that keeps its list from an earlier call, say). *)
    openers_in_lock ", after a call outside it had answered,";
    List.iter
      (fun (o : D.t Rig_edge.opener) ->
        let before = tasks () in
        (match in_lock o.make with
        | d ->
            acc := value_finding "LOCK-4" "%s's make called inside a lock opened a device instead of raising Invalid_argument" o.name :: !acc;
            close d 0
        | exception Invalid_argument _ ->
            let fresh = List.filter (fun t -> not (List.mem t before)) (tasks ()) in
            if fresh <> [] then
              (* a thread seen new may be another's, started meanwhile *)
              acc :=
                finding "LOCK-4" "%s's make raised Invalid_argument inside a lock but started %d thread(s) (%s): it changed something"
                  o.name (List.length fresh) (String.concat ", " (List.map task_name fresh))
                :: !acc
        | exception e ->
            acc := value_finding "LOCK-4" "%s's make called inside a lock raised %s, not Invalid_argument" o.name (Printexc.to_string e) :: !acc);
        (* Nothing changed: the same make, outside the lock, still opens.
           A make may be refused of itself now and then (a device busy): it
           is asked three times, and what the refused one left refuses
           each. *)
        let rec outside tries =
          match P.masked o.make with
          | d -> close d 0
          | exception _ when tries > 1 -> outside (tries - 1)
          | exception e ->
              (* the system may refuse an open now and then (a loaded machine) *)
              acc :=
                finding "LOCK-4" "after a make refused inside a lock, %s's make outside it raised %s, three times in a row" o.name
                  (Printexc.to_string e)
                :: !acc
        in
        outside 3)
      os;
    List.rev !acc

  (* ------------------------------------------------------------ SIG-8 *)

  (* Every thread that appears while devices open and run work, or that the
     plugin started as it loaded (Plugin_load), must block every signal
     rig_mask blocks, for its life: checked on each such task's SigBlk
     (/proc/self/task/<tid>/status) while the devices still run. *)
  let sig8 ~seed =
    (* The runtime's tick thread starts with the first OCaml thread: make
       it exist before the first snapshot.  The probe starts no other. *)
    Thread.join (Thread.create ignore ());
    let own = Self_thread.gettid () in
    let need = match P.masked (fun () -> sigblk own) with Some m -> m | None -> raise (Skip "no /proc/self/task status") in
    let at_load = Plugin_load.threads_started () in
    let before = List.filter (fun t -> not (List.mem t at_load)) (tasks ()) in
    (* A driver thread may open its mask any time after it starts: look at
       every new task after the opens and again after the work, and keep
       the widest opening seen per task. *)
    let seen = Hashtbl.create 8 in
    let look () =
      List.iter
        (fun tid ->
          if not (List.mem tid before) then
            match sigblk tid with
            | None -> ()
            | Some m ->
                let open_ = Int64.logand need (Int64.lognot m) in
                let prev = match Hashtbl.find_opt seen tid with Some (o, _) -> o | None -> 0L in
                if Int64.logor prev open_ <> prev || not (Hashtbl.mem seen tid) then Hashtbl.replace seen tid (Int64.logor prev open_, m))
        (tasks ())
    in
    let os = openers () in
    if os = [] then raise (Skip "the driver has no device");
    let opened = List.filter_map (fun (o : D.t Rig_edge.opener) -> try Some (P.masked o.make) with _ -> None) os in
    look ();
    let work =
      List.map
        (fun d ->
          match P.masked (fun () -> D.alloc d Rig_edge.Device 64) with
          | Some r -> fill d r (1 + (seed mod 7)); (d, [ r ], 1 + (seed mod 7))
          | None | (exception _) -> (d, [], 0))
        opened
    in
    look ();
    let acc =
      Hashtbl.fold
        (fun tid (open_, m) acc ->
          if open_ = 0L then acc
          else
            value_finding "SIG-8" "thread %d (%s), started %s, lets signals %s through (SigBlk %016Lx; rig_mask blocks %016Lx)"
              tid (task_name tid)
              (if List.mem tid at_load then "as the driver's plugin loaded" else "while the driver's devices opened and ran work")
              (String.concat "," (List.map string_of_int (signals_of open_)))
              m need
            :: acc)
        seen []
      |> List.sort compare
    in
    List.iter (fun (d, regions, last) -> close d ~regions last) work;
    acc

  (* ------------------------------------------------------------ SIG-2 *)

  (* Where SIGUSR1's handler ran: on which thread, in which call (or none),
     inside a wait or not. *)
  type run = { thread : int; call : string; waiting : bool }

  let runs : run list ref = ref []
  let in_call = ref ""

  let handler _ =
    runs := { thread = Thread.id (Thread.self ()); call = !in_call; waiting = P.in_wait () } :: !runs

  (* [call name f] calls f as rig does, inside rig's mask, with SIGUSR1
     sent to this thread first: blocked, it stays pending on this thread
     until the mask opens, which a conforming driver does only inside a
     wait; otherwise it runs once the call has returned (rig's restore). *)
  let call name f =
    P.masked (fun () ->
        Self_thread.kill Sys.sigusr1;
        in_call := name;
        match f () with
        | v -> in_call := ""; Ok v
        | exception e -> in_call := ""; Error e)

  (* A wait ends with rig_block "whether the step returns or raises": a
     device that faults during a sleep's wait (a spin of 300 ms, then the
     kit's fault function) makes sleep raise Fault, and the thread, still
     inside rig's mask, must block rig_mask's signals again and be out of
     its wait then. *)
  let fault_during_sleep (o : D.t Rig_edge.opener) =
    match (Pk.kit.spin, Pk.kit.fault) with
    | Some spin, Some fault -> (
        match P.masked o.make with
        | exception _ -> []
        | d2 -> (
            match P.masked (fun () -> D.image d2 Pk.kit.binary) with
            | exception _ -> close d2 0; []
            | Error _ -> close d2 0; []
            | Ok i ->
                let entry f = match P.masked (fun () -> D.entry i f) with Rig_edge.Entry h -> Some h | _ | (exception _) -> None in
                let found =
                  match (entry spin, entry fault) with
                  | Some hs, Some hf ->
                      let q = (D.facts d2).queue in
                      let s =
                        Rig_edge.encode
                          [ Rig_edge.Launch { entry = hs; args = [ 300L ] }; Rig_edge.Launch { entry = hf; args = [] } ]
                      in
                      if Probes.has_room ~room:(fun () -> P.masked (fun () -> q.room s)) ~grow:(fun () -> P.masked (fun () -> D.grow d2)) ~grows:4
                         && P.masked (fun () -> q.submit s ~value:1) && P.masked (fun () -> q.commit ()) then begin
                        let w = D.signaled d2 in
                        let after =
                          P.masked (fun () ->
                              match D.sleep d2 ~seen:w ~still_ms:3000 with
                              | () -> None
                              | exception D.Fault why -> Some (why, P.in_wait (), P.blocks_rig_set ())
                              | exception _ -> None)
                        in
                        match after with
                        | Some (why, waiting, blocked) when waiting || not blocked ->
                            [ finding "SIG-2"
                                "sleep raised Fault (%s) for a fault during its wait with the thread %s: its wait did not call rig_block after its blocking step"
                                why
                                (if not blocked then "letting rig_mask's signals through" else "still inside the wait") ]
                        | _ -> []
                      end
                      else []
                  | _ -> []
                in
                close d2 ~images:[ i ] 1;
                found))
    | _ -> []

  let sig2 ~seed =
    let self = Thread.id (Thread.self ()) in
    let previous = Sys.signal Sys.sigusr1 (Sys.Signal_handle handler) in
    Fun.protect ~finally:(fun () -> Sys.set_signal Sys.sigusr1 previous) @@ fun () ->
    let o = first () in
    let get name = function Ok v -> v | Error e -> raise (Skip (spf "%s raised %s" name (Printexc.to_string e))) in
    let d = get "make" (call "make" o.make) in
    let last = ref 0 in
    let regions = ref [] and images = ref [] and shut = ref [] in
    let finish () =
      ignore (call "stop" (fun () -> D.stop d ~fault:None));
      close d ~stopped:true ~regions:!regions ~images:!images !last
    in
    Fun.protect ~finally:finish (fun () ->
        (match get "alloc" (call "alloc" (fun () -> D.alloc d Rig_edge.Device 64)) with
        | Some r ->
            regions := [ r ];
            ignore (call "dma" (fun () -> D.dma d r ~fn:(Option.value Pk.kit.bus_function ~default:"not a bus address")));
            (* A submission, then sleeps: one that waits on the idle word,
               one once the work's value shows. *)
            let v = 1 + (seed mod 5) in
            fill d r v;
            last := v;
            let w = D.signaled d in
            ignore (call "sleep" (fun () -> D.sleep d ~seen:w ~still_ms:30));
            ignore (call "sleep" (fun () -> D.sleep d ~seen:(w - 1) ~still_ms:30));
            (* A sleep that blocks (200 ms on the idle word) blocks in a
               wait, which opens the mask: the signal pending since the
               call began must run its handler inside it. *)
            let before = List.length !runs and t0 = Unix.gettimeofday () in
            ignore (call "sleep" (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:200));
            let blocked_ms = (Unix.gettimeofday () -. t0) *. 1000. in
            (* [runs] grows at its head: the runs of this call come first *)
            let fresh = List.length !runs - before in
            let inside = List.exists (fun r -> r.thread = self && r.call = "sleep") (List.filteri (fun k _ -> k < fresh) !runs) in
            if blocked_ms >= 150. && not inside then
              shut := [ finding "SIG-2" "sleep blocked %.0f ms on the idle word and never opened rig's mask: SIGUSR1, pending since the call began, ran its handler only after it returned (a wait calls rig_unblock right before its blocking step)" blocked_ms ];
            (* A signal that comes while sleep blocks, halfway through its
               still_ms of 400 (past a first wait that a sleep in slices may
               have ended):
               its handler must run inside a wait of that sleep, not once
               it returned (blind lk-sleep-retry-masked: only its first
               slice is a wait, the later ones block with rig's signals
               blocked).  Judged where the sleep returned 30 ms or more
               after the signal was sent; no signal is pending as it
               starts. *)
            if !shut = [] then begin
              let tid = Self_thread.gettid () and sent = Atomic.make None in
              let sender =
                Thread.create
                  (fun () ->
                    (* the handler runs on a thread that lets SIGUSR1 through
                       and polls first: not this one *)
                    ignore (Thread.sigmask Unix.SIG_BLOCK [ Sys.sigusr1 ]);
                    Thread.delay 0.2;
                    Atomic.set sent (Some (Unix.gettimeofday ()));
                    Self_thread.kill_tid tid Sys.sigusr1)
                  ()
              in
              let before = List.length !runs and t0 = Unix.gettimeofday () in
              (try
                 P.masked (fun () ->
                     in_call := "sleep";
                     Fun.protect ~finally:(fun () -> in_call := "") (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:400))
               with _ -> ());
              let returned = Unix.gettimeofday () in
              Thread.join sender;
              ignore (Sys.opaque_identity (ref ()));
              let fresh = List.filteri (fun k _ -> k < List.length !runs - before) !runs in
              match Atomic.get sent with
              (* a handler another thread ran (one of the driver's that lets
                 SIGUSR1 through: SIG-8's) says nothing of this sleep *)
              | Some at when returned -. at >= 0.03 && List.for_all (fun r -> r.thread = self) fresh ->
                  if not (List.exists (fun r -> r.call = "sleep" && r.waiting) fresh) then
                    shut :=
                      [ finding "SIG-2"
                          "SIGUSR1, sent to the thread %.0f ms into a sleep on the idle word (still_ms 400), ran its handler only after sleep returned %.0f ms later: the sleep blocked outside a wait, with rig's signals blocked"
                          ((at -. t0) *. 1000.) ((returned -. at) *. 1000.) ]
              | _ -> ()
            end;
            ignore (call "grow" (fun () -> D.grow d))
        | None -> ());
        match call "image" (fun () -> D.image d Pk.kit.binary) with
        | Ok (Ok i) ->
            images := [ i ];
            let fn = List.find_opt (fun _ -> true) (List.filter_map Fun.id [ Pk.kit.spin; Pk.kit.hang; Pk.kit.fault ]) in
            Option.iter
              (fun f ->
                ignore (call "prepare" (fun () -> D.prepare i f));
                ignore (call "entry" (fun () -> D.entry i f)))
              fn
        | _ -> ());
    let faulted = fault_during_sleep o in
    (* Whatever is still pending runs now, outside any call. *)
    ignore (Sys.opaque_identity (ref ()));
    faulted @ !shut
    @ List.filter_map
      (fun r ->
        if r.thread = self && r.call <> "" && not r.waiting then
          Some (finding "SIG-2" "SIGUSR1, sent before %s under rig's mask, ran its handler inside %s outside a wait: the driver unblocked signals outside its waits" r.call r.call)
        else None)
      (List.rev !runs)
    |> List.sort_uniq compare

  (* ------------------------------------------------------------ SIG-3 *)

  (* While a sleep blocks on an idle device (the word unmoved), another
     OCaml thread must run.  That thread, the counter, loops on naps of
     0.5 ms that release the runtime (a C stub that notes when each nap
     began and ended); the probe compares what it got while sleeps were in
     flight with what it gets while this thread waits in Thread.delay
     (which releases the runtime), just before and just after, as long
     each time.

     First measure: the time the counter waited for the runtime.  The
     kernel accounts each thread's time it ran and the time it waited,
     runnable, for a CPU (/proc/<pid>/task/<tid>/schedstat); the rest of
     the wall time the thread slept, and the counter sleeps only in its
     naps, which it notes, and while it waits for the runtime.  (A nap's
     note ends once the thread runs again: a nap counts as long as it was
     asked at most, since a wait for a CPU at its end is queued time, taken
     off already.  Taken off twice, it hid on a loaded machine a runtime
     kept half of each sleep.)  The counter
     used to spin on Thread.yield instead, at the cost of a CPU for the
     whole probe: 0.8 s of a certification's 4.  What other threads of
     the process (the driver's helpers, the runtime's tick) ran or waited
     for a CPU meanwhile is taken off: an OCaml helper that runs holds the
     runtime as of right (a C thread that runs is taken off too, which can
     only hide a kept runtime, never show one).  Load does not move that figure: under a
     dozen busy processes on two cores a conforming sleep's counter slept
     0-4 ms of some 270, where it waited for a CPU most of the time (a
     sleeping thread that holds the runtime for a moment between two waits
     is seldom descheduled in that moment).  Only the part of it that
     falls in the counter's own pauses of 1 ms or more (from a nap's end
     to its next turn) counts: a runtime handed to and fro with a busy
     helper of the driver thousands of times leaves some tens of us per
     hand-over in which neither thread runs (the wake-up), 70 ms in 260
     (s3c-helper-busy-in-sleep), and no such pause.  So this one stands
     alone where the kernel keeps these figures.  A wait keeps the runtime
     when that held time is 15% of the sleeps' time beyond what the free
     waits show, or at least 10 ms and half of one sleep beyond it (a wait
     that keeps it for one call in three, or for long sleeps only).

     Without those figures, two proxies, both bent by load:
     - the rate of turns: under a quarter of the free rate.  A wait that
       releases the runtime only between slices of a blocking step that
       keeps it lets the thread in at each hand-over: a few per cent;
     - the longest pause inside one sleep: at least 10 ms and twice the
       longest in the free waits (on a loaded machine the thread is
       descheduled for some 16 ms now and then, in either).  A wait that
       keeps the runtime for part of a call (its second half, its short
       calls only, one call in three) leaves the rate high but the thread
       stopped that long.

     The sleeps ask for varied still_ms (still_cycle below), so that a
     wait that keeps the runtime only for some lengths or some calls is
     met, the whole cycle and until 250 ms were spent inside sleeps ("it
     may return earlier": a sleep that returns early is asked again, and a
     driver whose sleeps last 1 ms is judged on as much blocked time).

     Where the runtime's blocking-section hooks are the primitives' (they
     chain them as they start: time_in_waits), the sleeping thread's own
     hold of the runtime inside its waits is read from the runtime's side
     and judges alone (kept_in_waits below); the counter judges where it
     cannot, or where sleeps block outside any wait.  The measures vote: a
     measure that shows a plainly released runtime counts two votes,
     another one.  A kept runtime is reported when three
     measures show it; a released one when its votes reach two more than
     the kept measures (two with none kept: one plain measure ends the
     vote, as before; after a kept one it does not).  After
     seven measures without either, SIG-3 is not judged in that run. *)
  let blocked_goal_ms = 250.
  (* Every measure runs the whole cycle (and on until 250 ms): in it,
     each sleep's position modulo 2 to 6 meets a sleep of 15 ms or more,
     so that a step that keeps the runtime on every k-th sleep only (k up
     to 6: blind nj-sig3-every-kth, cs-sig3-every-third) keeps it for one
     at least, whatever the phase; the short ones come last. *)
  let still_cycle = [| 60; 20; 100; 15; 40; 30; 2; 2; 1; 5; 1 |]
  let max_sleeps = 400

  let enough_sleeps ~calls ~blocked_ms =
    (blocked_ms >= blocked_goal_ms && calls >= Array.length still_cycle) || calls >= max_sleeps
  let kept_share = 0.25
  let free_wait_max_ms = 4000.
  (* RIG_CONFORM_SIG3_COUNTER=1 (or the proxies) leaves SIG-3 to the
     other thread's measures, so that their own tests reach them. *)
  let hooks_judge =
    Sys.getenv_opt "RIG_CONFORM_SIG3_COUNTER" <> Some "1" && Sys.getenv_opt "RIG_CONFORM_SIG3_PROXIES" <> Some "1"

  let kept_votes = 3
  let released_votes = 2
  let max_measures = 7

  (* Held time beyond the free waits' share: of all sleeps, of one. *)
  let held_share = 0.15
  let held_share_one = 0.5
  let held_floor_ms = 10.
  let held_plain_share = 0.05

  (* Pauses of the other thread are noted from this length on. *)
  let pause_note_ms = 1.
  let pause_floor_ms = 10.
  let pause_over_free = 2.

  (* The counter's nap: short next to the pauses that count, long next to
     a turn (some us), so that the counter costs a few per cent of a CPU. *)
  let nap_us = 500

  external nap : int -> Float.Array.t -> unit = "rig_probe_nap"

  type held = {
    in_sleeps : float;  (** ms the runtime was held over all sleeps *)
    free_share : float;  (** share of the free waits it was held *)
    worst : float * float * int;  (** the sleep held most beyond free_share: held ms, its length, its still_ms *)
  }

  (* Short sleeps, as a group: a step may keep the runtime only for a
     timeout it deems too short to block for ("spin for latency"), which
     one sleep's bar (10 ms) cannot meet. *)
  let short_still_ms = 10
  let short_floor_ms = 2.
  let short_share = 0.25

  (** The sleeping thread's own hold of the runtime inside its waits. *)
  type own_hold = {
    own_total : float;  (** ms held over all sleeps *)
    own_worst : float * float * int;  (** the sleep held the largest share: ms held, its length, its still_ms *)
    own_short : float * float;  (** over the sleeps of still_ms [short_still_ms] or less: ms held, their ms *)
  }

  (* From each sleep's (ms held, length, still_ms); None without sleeps. *)
  let own_hold = function
    | [] -> None
    | first :: rest as own ->
        let share (h, l, _) = if l > 0. then h /. l else 0. in
        let shorts = List.filter (fun (_, _, st) -> st <= short_still_ms) own in
        Some
          { own_total = List.fold_left (fun t (h, _, _) -> t +. h) 0. own;
            own_worst = List.fold_left (fun w x -> if share x > share w then x else w) first rest;
            own_short = List.fold_left (fun (th, tl) (h, l, _) -> (th +. h, tl +. l)) (0., 0.) shorts }

  type sig3_measure = {
    calls : int;
    blocked_ms : float;
    waits_entered : int;  (** waits (rig_unblock) the sleeps entered *)
    median_unqueued_ms : float;
        (** the median sleep's length, less the time the sleeping thread
            waited for a CPU (where the kernel's figures can be read) *)
    inside : int;
    free_rate : float;
    pause_in_sleep : float * int;  (** the longest pause within one sleep, and that sleep's still_ms *)
    pause_free : float;  (** the longest pause within a free wait *)
    held : held option;  (** None where the kernel's figures cannot be read *)
    held_in_waits : own_hold option;
        (** the time the sleeping thread held the OCaml runtime inside its
            waits, outside blocking sections: over all sleeps, and in the
            sleep where it was the largest share (ms held, the sleep's
            length, its still_ms); None where the blocking-section hooks do
            not note it *)
  }

  let now_ms () = Unix.gettimeofday () *. 1000.

  (* The calling thread's id, from /proc/thread-self ("pid/task/tid"). *)
  let own_tid () =
    match Unix.readlink "/proc/thread-self" with
    | exception Unix.Unix_error _ -> None
    | p -> Option.bind (String.rindex_opt p '/') (fun i -> int_of_string_opt (String.sub p (i + 1) (String.length p - i - 1)))


  (* What one window's ends show of the runtime held by the sleeping
     thread: the time the counter slept, less the time every other thread
     (neither the counter nor the sleeper) ran or waited for a CPU, since
     a thread of the driver that runs OCaml code holds the runtime as of
     right.  The kernel brings a running thread's figure up to date at its
     ticks, so a window can be off by a tick either way. *)
  type mark = { at : float; counter : (float * float) option; others : (int * float) list; sleeper_queued : float option }

  let mark ~counter ~sleeper =
    let others =
      List.filter_map
        (fun tid ->
          if tid = counter || tid = sleeper then None
          else Option.map (fun (r, q) -> (tid, r +. q)) (Probes.sched_ms ~tid ()))
        (Self_thread.tasks ())
    in
    let sleeper_queued = Option.map snd (Probes.sched_ms ~tid:sleeper ()) in
    { at = now_ms (); counter = Probes.sched_ms ~tid:counter (); others; sleeper_queued }

  (* The time intervals (from, to) give to the window (w0, w1). *)
  let overlap intervals (w0, w1) = List.fold_left (fun s (p0, p1) -> s +. Float.max 0. (Float.min p1 w1 -. Float.max p0 w0)) 0. intervals

  let held_between ~naps a b =
    match (a.counter, b.counter) with
    | Some (r0, q0), Some (r1, q1) ->
        let others_busy =
          List.fold_left
            (fun s (tid, t1) -> s +. t1 -. Option.value (List.assoc_opt tid a.others) ~default:0.)
            0. b.others
        in
        Some (b.at -. a.at -. (r1 -. r0) -. (q1 -. q0) -. others_busy -. overlap naps (a.at, b.at))
    | _ -> None

  (* The longest part of a pause (from, to) within one window (from, to). *)
  let longest_within pauses windows =
    List.fold_left
      (fun best (w0, w1, tag) ->
        List.fold_left
          (fun (b, t) (p0, p1) ->
            let o = Float.min p1 w1 -. Float.max p0 w0 in
            if o > b then (o, tag) else (b, t))
          best pauses)
      (0., 0) windows

  let sig3_measure ?(before_sleeps = ignore) d ~turns ~pauses ~naps ~tids =
    let mark () =
      match tids with
      | Some (counter, sleeper) -> mark ~counter ~sleeper
      | None -> { at = now_ms (); counter = None; others = []; sleeper_queued = None }
    in
    (* As long as the sleeps' window, so that the load of the machine
       weighs on both alike.  Sleeps that overstay their still_ms by far
       (one 3-s sleep) make that window many times the goal, and a longer
       window meets longer pauses of a loaded machine: then the second free
       wait lasts as long (up to a bound). *)
    let free_wait ms =
      let before = Atomic.get turns and m0 = mark () in
      Thread.delay (ms /. 1000.);
      let m1 = mark () in
      (float (Atomic.get turns - before) /. (m1.at -. m0.at), (m0.at, m1.at, 0), (m0, m1))
    in
    let w = ref 0 in
    (* The sleeps' total is taken from the first mark to the last: one
       tick off at most, where a sum over hundreds of 1-ms sleeps would add
       hundreds of errors.  The moments between sleeps add a few us each. *)
    let first_mark = ref None and last_mark = ref None in
    let waits0 = ref 0 in
    (* [outside]: per sleep, the time the sleeping thread waited for a CPU
       outside the sleep's waits, holding the runtime as of right (the
       driver's OCaml code before and after its blocking steps): the
       counter's wait for the runtime meanwhile is not the wait's doing.
       What it waited for a CPU inside them stays counted: a step that
       keeps the runtime keeps it queued too. *)
    let rec sleeps ~calls ~blocked_ms ~unqueued ~inside ~windows ~helds ~outside ~own =
      if enough_sleeps ~calls ~blocked_ms then (calls, blocked_ms, unqueued, inside, windows, helds, outside, own)
      else
        let still_ms = still_cycle.(calls mod Array.length still_cycle) in
        let before = Atomic.get turns and m0 = mark () in
        if !first_mark = None then first_mark := Some m0;
        let in_waits0 = P.queued_in_waits () and _, held0 = P.time_in_waits () in
        match P.masked (fun () -> D.sleep d ~seen:!w ~still_ms) with
        | () ->
            let in_waits = P.queued_in_waits () -. in_waits0 and _, held1 = P.time_in_waits () in
            let m1 = mark () in
            last_mark := Some m1;
            let queued = match (m0.sleeper_queued, m1.sleeper_queued) with Some q0, Some q1 -> q1 -. q0 | _ -> 0. in
            sleeps ~calls:(calls + 1) ~blocked_ms:(blocked_ms +. m1.at -. m0.at)
              ~unqueued:((m1.at -. m0.at -. queued) :: unqueued)
              ~inside:(inside + Atomic.get turns - before)
              ~windows:((m0.at, m1.at, still_ms) :: windows)
              ~helds:((m0, m1) :: helds)
              ~outside:(Float.max 0. (queued -. in_waits) :: outside)
              ~own:((held1 -. held0, m1.at -. m0.at, still_ms) :: own)
        | exception e -> raise (Skip (spf "sleep on an idle device raised %s" (Printexc.to_string e)))
    in
    let r0, f0, h0 = free_wait blocked_goal_ms in
    before_sleeps ();
    w := D.signaled d;
    waits0 := P.waits ();
    let calls, blocked_ms, unqueued, inside, windows, helds, outside, own =
      P.account_queued_in_waits true;
      Fun.protect ~finally:(fun () -> P.account_queued_in_waits false) (fun () ->
          sleeps ~calls:0 ~blocked_ms:0. ~unqueued:[] ~inside:0 ~windows:[] ~helds:[] ~outside:[] ~own:[])
    in
    let held_in_waits = if (not hooks_judge) || not (P.runtime_hooks_chained ()) then None else own_hold own in
    let waits_entered = P.waits () - !waits0 in
    let r1, f1, h1 = free_wait (if blocked_ms < 2. *. blocked_goal_ms then blocked_goal_ms else Float.min free_wait_max_ms blocked_ms) in
    (* The nap under way at the last mark is noted once the counter has
       turned after it. *)
    let turned = Atomic.get turns in
    while Atomic.get turns < turned + 2 do
      Thread.delay 0.0002
    done;
    let noted = Atomic.get pauses and naps = Atomic.get naps in
    let held_between = held_between ~naps in
    let held_in_sleeps =
      match (!first_mark, !last_mark) with Some a, Some b -> held_between a b | _ -> None
    in
    let less_outside h o = Option.map (fun h -> Float.max 0. (h -. o)) h in
    let held_in_sleeps = less_outside held_in_sleeps (List.fold_left ( +. ) 0. outside) in
    let helds =
      List.map2 (fun ((m0, m1), o) (_, _, still_ms) -> (less_outside (held_between m0 m1) o, m1.at -. m0.at, still_ms))
        (List.combine helds outside) windows
    in
    let h0 = (let m0, m1 = h0 in (held_between m0 m1, m1.at -. m0.at)) and h1 = (let m0, m1 = h1 in (held_between m0 m1, m1.at -. m0.at)) in
    (* Held time counts only where the counter stood still for a pause of
       its own (1 ms or more): a runtime handed to and fro between the
       counter and a helper of the driver thousands of times (each
       hand-over a wake-up, some tens of us in which neither runs) leaves
       no such pause. *)
    let paused = overlap noted in
    let in_pauses held window = Option.map (fun h -> Float.min h (paused window)) held in
    let helds = List.map2 (fun (h, l, still) (w0, w1, _) -> (in_pauses h (w0, w1), l, still)) helds windows in
    let held_in_sleeps =
      Option.map (fun h -> Float.min h (List.fold_left (fun s (w0, w1, _) -> s +. paused (w0, w1)) 0. windows)) held_in_sleeps
    in
    let h0 = (in_pauses (fst h0) (let a, b, _ = f0 in (a, b)), snd h0) and h1 = (in_pauses (fst h1) (let a, b, _ = f1 in (a, b)), snd h1) in
    let held =
      let all_known = List.for_all (fun (h, _, _) -> h <> None) helds in
      match (h0, h1, held_in_sleeps) with
      | (Some a, la), (Some b, lb), Some total when all_known && helds <> [] ->
          let free_share = Float.max 0. ((a +. b) /. (la +. lb)) in
          let held_of (h, _, _) = Option.value h ~default:0. in
          let beyond (h, l, _) = held_of (h, l, 0) -. (free_share *. l) in
          let worst = List.fold_left (fun b x -> if beyond x > beyond b then x else b) (List.hd helds) (List.tl helds) in
          let wh, wl, ws = worst in
          Some { in_sleeps = Float.max 0. total; free_share; worst = (Float.max 0. (Option.value wh ~default:0.), wl, ws) }
      | _ -> None
    in
    let median l = match List.sort compare l with [] -> 0. | s -> List.nth s (List.length s / 2) in
    { calls; blocked_ms; waits_entered; median_unqueued_ms = median unqueued; inside; free_rate = (r0 +. r1) /. 2.;
      pause_in_sleep = longest_within noted windows; pause_free = fst (longest_within noted [ f0; f1 ]); held; held_in_waits }

  let kept_held m h =
    let wh, wl, _ = h.worst in
    (h.in_sleeps >= held_floor_ms && h.in_sleeps >= (h.free_share +. held_share) *. m.blocked_ms)
    || (wh >= held_floor_ms && wh >= (h.free_share +. held_share_one) *. wl)

  let kept_rate m = float m.inside /. m.blocked_ms < kept_share *. m.free_rate
  let kept_pause m = fst m.pause_in_sleep >= Float.max pause_floor_ms (pause_over_free *. m.pause_free)

  (* Where the runtime's hooks note it and the sleeps entered waits, the
     sleeping thread's own hold inside its waits judges alone: what a step
     that keeps the runtime across a blocking call, or spins with it, holds
     however short each call (a 250-us nanosleep in each 1.25 ms leaves the
     counter no pause of 1 ms: blind nj-sig3-slice-held passed it), and
     neither OCaml 5's unfair runtime lock (a step that gives it back for
     500 us kept a woken counter out for 444 ms of 2100: blind
     tq-spin-grace) nor the driver's code outside its waits (blind
     tq-post-compute) makes it.  A wait for a CPU while holding it counts:
     the runtime stays kept meanwhile (a step that naps holding it waits
     for a CPU at each wake on a loaded machine; taken off, that hid three
     blind drivers in the suite), and a step that holds it for
     microseconds is seldom preempted there.  The same bars as the
     counter's, without a free share.  The counter judges where the hooks
     cannot (a library set its own) and sleeps that block outside any
     wait. *)
  let in_waits m = match m.held_in_waits with Some d when m.waits_entered > 0 -> Some d | _ -> None

  let kept_in_waits_ms ~blocked_ms h =
    let wh, wl, _ = h.own_worst and sh, sl = h.own_short in
    (h.own_total >= held_floor_ms && h.own_total >= held_share *. blocked_ms)
    || (wh >= held_floor_ms && wh >= held_share_one *. wl)
    || (sh >= short_floor_ms && sh >= short_share *. sl)

  let plainly_released_ms ~blocked_ms h = (not (kept_in_waits_ms ~blocked_ms h)) && h.own_total < held_plain_share *. blocked_ms

  let describe_hold ~blocked_ms h =
    let wh, wl, ws = h.own_worst and sh, sl = h.own_short in
    spf "the sleeping thread held the OCaml runtime inside its waits (outside any blocking section) %.0f ms of the sleeps' %.0f ms, %.0f ms of one %.0f-ms sleep of still_ms %d, %.1f ms of the %.1f ms of those of still_ms %d or less"
      h.own_total blocked_ms wh wl ws sh sl short_still_ms

  let kept_in_waits m d = kept_in_waits_ms ~blocked_ms:m.blocked_ms d

  let kept_by_counter m = match m.held with Some h -> kept_held m h | None -> kept_rate m || kept_pause m
  let kept m = match in_waits m with Some d -> kept_in_waits m d | None -> kept_by_counter m

  (* A plainly released runtime: before any kept measure, one such
     measure is the whole vote, so a conforming wait costs one measure. *)
  let clearly_released m =
    match in_waits m with
    | Some h -> plainly_released_ms ~blocked_ms:m.blocked_ms h
    | None -> (
    match m.held with
    | Some h -> h.in_sleeps < (h.free_share +. held_plain_share) *. m.blocked_ms
    | None -> float m.inside /. m.blocked_ms >= 2. *. kept_share *. m.free_rate && fst m.pause_in_sleep < pause_floor_ms)

  (* Before each measure of the idle probe, a launch of kit.spin (20 ms)
     and a sleep that returns as the word moves: the measure's first sleep
     then follows one that saw the word move, where a step may keep the
     runtime "while the device is hot" (blind cs-sig3-hot-poll).  Without
     kit.spin, or where the driver refuses it, no such move. *)
  let mover d =
    match Pk.kit.spin with
    | None -> (None, fun () -> ())
    | Some fn -> (
        match P.masked (fun () -> D.image d Pk.kit.binary) with
        | exception _ -> (None, fun () -> ())
        | Error _ -> (None, fun () -> ())
        | Ok i -> (
            match P.masked (fun () -> D.entry i fn) with
            | exception _ -> (Some i, fun () -> ())
            | Rig_edge.Absent | No_memory _ -> (Some i, fun () -> ())
            | Entry h ->
                let q = (D.facts d).queue in
                let s = Rig_edge.encode [ Rig_edge.Launch { entry = h; args = [ 20L ] } ] in
                (* a move that did not come (in 4 s) is not asked again *)
                let moves = ref true in
                ( Some i,
                  fun () ->
                    let w = D.signaled d in
                    if !moves then
                      if Probes.has_room ~room:(fun () -> P.masked (fun () -> q.room s)) ~grow:(fun () -> P.masked (fun () -> D.grow d)) ~grows:4
                         && P.masked (fun () -> q.submit s ~value:(w + 1)) && P.masked (fun () -> q.commit ())
                      then begin
                        await_word ~still_ms:500 ~tries:8 d (w + 1);
                        moves := D.signaled d > w
                      end
                      else moves := false ) ))

  (* One measure's vote (see above), and whether the vote is over. *)
  let count_vote ~kept ~plain (kept_n, released_n) =
    if kept then (kept_n + 1, released_n) else if plain then (kept_n, released_n + released_votes) else (kept_n, released_n + 1)

  let vote_over ~measures (kept_n, released_n) =
    kept_n >= kept_votes || released_n >= released_votes + kept_n || measures >= max_measures

  (* Neither verdict earned: the load moved under the measures. *)
  let report_unjudged_vote ~of_what ~measures (kept_n, released_n) =
    Case.report_unjudged
      [ ( "SIG-3",
          spf "of %d measures of %s, %d showed the runtime kept and %d released it (%d votes, a plainly released one counting two): too few either way"
            measures of_what kept_n (measures - kept_n) released_n ) ]

  let sig3 ~seed:_ =
    let d = P.masked (first ()).make in
    let image, move = try mover d with _ -> (None, fun () -> ()) in
    let running = Atomic.make true and turns = Atomic.make 0 and pauses = Atomic.make [] in
    (* The counter says its thread id before its first turn: Some None
       where it cannot be read. *)
    let counter_tid = Atomic.make None and naps = Atomic.make [] in
    let t =
      Thread.create
        (fun () ->
          Atomic.set counter_tid (Some (own_tid ()));
          let span = Float.Array.make 2 0. in
          while Atomic.get running do
            nap nap_us span;
            let t = now_ms () and began = Float.Array.get span 0 and ended = Float.Array.get span 1 in
            Atomic.set naps ((began, Float.min ended (began +. (float nap_us /. 1000.))) :: Atomic.get naps);
            if t -. ended >= pause_note_ms then Atomic.set pauses ((ended, t) :: Atomic.get pauses);
            Atomic.incr turns
          done)
        ()
    in
    while Atomic.get counter_tid = None do
      Thread.yield ()
    done;
    let tids =
      match (Option.join (Atomic.get counter_tid), own_tid ()) with
      | Some c, Some s when Sys.getenv_opt "RIG_CONFORM_SIG3_PROXIES" <> Some "1" && Probes.sched_ms ~tid:c () <> None -> Some (c, s)
      | _ -> None
    in
    (* A measure without blocked time, or taken while the thread was
       starved (where only the proxies judge), ends the vote: the verdict
       below skips on it. *)
    let starved m = m.held = None && m.free_rate *. blocked_goal_ms < 20. in
    (* Sleeps block when they enter a wait, as a blocking step must
       (SIG-2); those that block without one, when the median call lasts
       0.5 ms: on a loaded machine sleeps that return at once last that
       long on average (a preemption, the runtime's hand-over delayed),
       but few of them. *)
    let blocks m = m.waits_entered > 0 || m.median_unqueued_ms >= 0.5 in
    let judgeable m = blocks m && not (starved m) in
    let rec measure ~measures ~kept_n ~released_n =
      Atomic.set pauses [];
      Atomic.set naps [];
      let m = sig3_measure ~before_sleeps:move d ~turns ~pauses ~naps ~tids in
      if not (judgeable m) then (kept_n, released_n, m, measures + 1)
      else
        let kept_n, released_n = count_vote ~kept:(kept m) ~plain:(clearly_released m) (kept_n, released_n) in
        if vote_over ~measures:(measures + 1) (kept_n, released_n) then (kept_n, released_n, m, measures + 1)
        else measure ~measures:(measures + 1) ~kept_n ~released_n
    in
    let outcome = try Ok (measure ~measures:0 ~kept_n:0 ~released_n:0) with Skip why -> Error why in
    Atomic.set running false;
    Thread.join t;
    close d ~images:(Option.to_list image) (D.signaled d);
    match outcome with
    | Error why -> raise (Skip why)
    | Ok (_, _, m, _) when not (blocks m) ->
        (* sleeps that do not block have no blocking step to judge; the
           time the thread waited for a CPU is the machine's, not a wait *)
        raise
          (Skip
             (spf "%d sleep(s) on the idle word returned in %.2f ms together (the median one in %.3f ms) and entered no wait: no blocking step to judge"
                m.calls m.blocked_ms m.median_unqueued_ms))
    | Ok (_, _, m, _) when starved m ->
        raise (Skip (spf "another OCaml thread turned only %.3f times a ms while the probe waited in Thread.delay: the runtime is too busy to judge a wait by" m.free_rate))
    | Ok (kept_n, _, m, measures) when kept_n >= kept_votes ->
        let shown =
          match (in_waits m, m.held) with
          | Some h, _ -> describe_hold ~blocked_ms:m.blocked_ms h
          | None, held -> (
          match held with
          | Some h ->
              let wh, wl, ws = h.worst in
              if h.in_sleeps >= held_floor_ms && h.in_sleeps >= (h.free_share +. held_share) *. m.blocked_ms then
                spf "another OCaml thread waited for the runtime %.0f ms of the sleeps' %.0f ms (the time it neither ran nor waited for a CPU, less what the process's other threads ran), against %.0f%% of the time while the probe waits in Thread.delay"
                  h.in_sleeps m.blocked_ms (100. *. h.free_share)
              else
                spf "another OCaml thread waited for the runtime %.0f ms of one %.0f-ms sleep of still_ms %d (the time it neither ran nor waited for a CPU, less what the process's other threads ran), against %.0f%% of the time while the probe waits in Thread.delay"
                  wh wl ws (100. *. h.free_share)
          | None ->
              if kept_rate m then
                spf "another OCaml thread got %d turn(s), %.2f a ms, under %.0f%% of the %.0f a ms it gets while the probe waits in Thread.delay" m.inside
                  (float m.inside /. m.blocked_ms) (100. *. kept_share) m.free_rate
              else
                spf "another OCaml thread did not run for %.0f ms on end within one sleep of still_ms %d, where its longest pause while the probe waits in Thread.delay is %.1f ms"
                  (fst m.pause_in_sleep) (snd m.pause_in_sleep) m.pause_free)
        in
        [ finding "SIG-3" "while sleep blocked (%d call(s), %.0f ms in all, the word unmoved), %s (%d of %d measures show a kept runtime): the wait's blocking step keeps the OCaml runtime" m.calls m.blocked_ms shown kept_n measures ]
    | Ok (kept_n, released_n, _, measures) when released_n < released_votes + kept_n ->
        report_unjudged_vote ~of_what:"sleep on the idle word" ~measures (kept_n, released_n);
        []
    | Ok _ -> []
end

(* A companion's driver call in flight, for sig3_busy below. *)
type in_call = { tid : int Atomic.t; allocs : int Atomic.t; most : int Atomic.t; want : int Atomic.t; parked : bool Atomic.t }

(* SIG-3 with work running: the idle probe above sleeps on an idle device
   only, and a step may keep the runtime only while the device has work in
   flight ("completion is near, poll for latency": blind nj-sig3-busy-poll
   naps 200 us holding it, then, on an idle device, waits as it should).
   With the kit's hang launched (the word stays put), sleeps of the same
   still_ms cycle until as much blocked time, judged only on the sleeping
   thread's own hold inside its waits (time_in_waits), with the idle
   probe's bars and vote: the other thread's measures would blame the
   device's own threads that run the work.  Where the hooks are not the
   primitives', the idle probe judges alone. *)
let sig3_busy (module Pk : Rig_edge.Package) ~seed =
  let module K = Probes.Kit (Pk) in
  let module Pr = Probe (Pk) in
  (* During each busy measure the probe's own threads keep the driver in
     use besides the judged sleeps, as a program's other threads would: a
     step may keep the runtime only while something happens elsewhere.
     - a pump: room, submit and commit of one small Fill on a second
       device, in a loop, waiting for its word every 64 submits or when
       room asks to grow (blind cs-sig3-while-other-call: another counted
       call in flight; oc-rate-poll: a high submit rate);
     - a churn: alloc and free of 64 bytes of that device, in a loop (blind
       oc-alloc-held: memory moving on another thread);
     - a second sleeper on the judged device, 20-ms sleeps in a loop (blind
       oc-shared-irq: another thread already sleeping there);
     - the kit's hang on a third device, the first opener opened again,
       launched once (blind oc-sibling-busy: another device with work);
     - a feeder of the judged device's own queue: room, submit and commit
       of one small Fill, queued behind the hang, growing the queues when
       room asks, until a grow is Short (blind oc-feed-poll: another
       thread feeding the device; oc-grow-spin: the queues growing).
     Only the sleeping thread's own hold is judged, which the others' calls
     do not add to.  What cannot be set up (one opener, no Device memory, a
     third open refused) is left out; a companion's call that fails or
     raises ends that companion for the case.
     Two judged sleeps of three start, where they can within 20 ms, while
     the pump, the churn and the feeder are each inside a call of the
     driver: the condition those drivers wait for.  A thread switch lands
     inside such a call only at an allocation there, where the runtime's
     tick happens to, so each of them stays at an allocation inside its
     call (an Alloc_points callback), about the middle one of its calls,
     until the sleep has begun.  The third sleep starts with them all at
     work, for what they did last (a growth, a submit a few ms ago).  A
     measure that met no condition counts once in the vote, never as
     plainly released: the conditions are met only by the sleeps that
     start amid them. *)
  let companions s (dev : K.dev) ~hang ~seen =
    (* per caller: the thread id of its call in flight (-1: none), the
       allocations made inside that call so far, the most any of its calls
       made, the allocation a judged sleep asks it to stay at (0: none), and
       whether it stays there now *)
    let mark () = { tid = Atomic.make (-1); allocs = Atomic.make 0; most = Atomic.make 0; want = Atomic.make 0; parked = Atomic.make false } in
    let pump_in = mark () and churn_in = mark () and feeder_in = mark () in
    let enter m = Atomic.set m.allocs 0; Atomic.set m.tid (Thread.id (Thread.self ())) in
    let leave m =
      if Atomic.get m.tid >= 0 then Atomic.set m.most (max (Atomic.get m.allocs) (Atomic.get m.most));
      Atomic.set m.tid (-1)
    in
    let forget m = Atomic.set m.tid (-1) in
    (* nothing allocates between the mark and the driver's call *)
    let calling m f =
      enter m;
      match f () with
      | v -> leave m; v
      | exception e -> leave m; raise e
    in
    let hand_on () =
      let me = Thread.id (Thread.self ()) in
      match List.find_opt (fun m -> Atomic.get m.tid = me) [ pump_in; churn_in; feeder_in ] with
      | None -> ()
      | Some m ->
          Atomic.incr m.allocs;
          let want = Atomic.get m.want in
          if want > 0 && Atomic.get m.allocs >= want then begin
            (* held here until the sleep has begun (20 ms at most) *)
            Atomic.set m.parked true;
            let until = Probes.now () +. 0.02 in
            while Atomic.get m.want > 0 && Probes.now () < until do Thread.yield () done;
            Atomic.set m.parked false
          end
    in
    (* a companion: whether it still works, and its loop, run while the
       measure lasts *)
    let companion body =
      let usable = Atomic.make true in
      (usable, fun running -> try while Atomic.get running && Atomic.get usable do body running done with _ -> Atomic.set usable false)
    in
    let sleeper = companion (fun _ -> P.masked (fun () -> Pk.D.sleep dev.d ~seen ~still_ms:20)) in
    let on_second_device =
      match K.openers () with
      | o1 :: o2 :: _ -> (
          let d2 = K.open_dev s o2 in
          (* the sibling's hang, on a device of its own *)
          (try
             let d3 = K.open_dev s o1 in
             let h3 = K.kit_entry s d3 "hang" hang in
             d3.hung <- true;
             ignore (K.launch d3 h3 "sibling's hang")
           with _ -> ());
          match K.alloc s d2 Rig_edge.Device 64 with
          | None -> []
          | Some r ->
              let q = d2.K.facts.queue and sub = Rig_edge.encode [ K.fill_part r ~off:0 ~len:64 ~byte:(K.byte s) ] in
              (* its word up to the last value, 2 s at most, while the
                 measure lasts *)
              let settle running =
                let until = Probes.now () +. 2. in
                while Atomic.get running && Pk.D.signaled d2.d < d2.last && Probes.now () < until do
                  P.masked (fun () -> Pk.D.sleep d2.d ~seen:(Pk.D.signaled d2.d) ~still_ms:20)
                done
              in
              let pumped = ref 0 in
              let pump running =
                match P.masked (fun () -> calling pump_in (fun () -> q.room sub)) with
                | Rig_edge.Room ->
                    let v = d2.last + 1 in
                    let submitted = P.masked (fun () -> calling pump_in (fun () -> q.submit sub ~value:v)) in
                    d2.last <- v;
                    if not (submitted && P.masked (fun () -> calling pump_in q.commit)) then failwith "the pump's submit or commit failed";
                    incr pumped;
                    if !pumped mod 64 = 0 then settle running;
                    (* as the churn and the feeder: none keeps the
                       runtime from the others for a tick at a time *)
                    Thread.yield ()
                | Grow when !pumped > 0 -> settle running; pumped := 0
                | Grow -> (
                    match P.masked (fun () -> Pk.D.grow d2.d) with
                    | Rig_edge.Grown -> pumped := 1
                    | Short _ -> failwith "the pump's grow was Short")
              in
              (* it hands the runtime on after each pair: it would
                 otherwise keep it from the pump for a tick at a time *)
              let churn _ =
                match P.masked (fun () -> calling churn_in (fun () -> Pk.D.alloc d2.d Rig_edge.Device 64)) with
                | Some r -> P.masked (fun () -> calling churn_in (fun () -> Pk.D.free d2.d r)); Thread.yield ()
                | None -> failwith "the churn's alloc failed"
              in
              [ (pump_in, companion pump); (churn_in, companion churn) ])
      | _ -> []
    in
    (* marked from room to commit: the device is being fed all along *)
    let feeder =
      match K.alloc s dev Rig_edge.Device 64 with
      | None -> []
      | Some r ->
          let q = dev.K.facts.queue and sub = Rig_edge.encode [ K.fill_part r ~off:0 ~len:64 ~byte:(K.byte s) ] in
          let feed _ =
            enter feeder_in;
            let fed =
              match P.masked (fun () -> q.room sub) with
              | Rig_edge.Room -> (
                  let v = dev.last + 1 in
                  match P.masked (fun () -> q.submit sub ~value:v) with
                  | submitted ->
                      dev.last <- v;
                      submitted && P.masked q.commit
                  | exception e -> leave feeder_in; raise e)
              | Grow -> (
                  (* marked while the growth is pending and runs, but its
                     allocations count for no depth: a growth is rare *)
                  match P.masked (fun () -> Pk.D.grow dev.d) with
                  | Rig_edge.Grown -> forget feeder_in; true
                  | Short _ -> forget feeder_in; failwith "the feeder's queues are full"
                  | exception e -> forget feeder_in; raise e)
              | exception e -> leave feeder_in; raise e
            in
            leave feeder_in;
            if not fed then failwith "the feeder's submit or commit failed";
            Thread.yield ()
          in
          [ (feeder_in, companion feed) ]
    in
    (* the companions that call the driver, each with its mark *)
    let callers = on_second_device @ feeder in
    let callers_in = List.map fst callers in
    let all = sleeper :: List.map snd callers in
    (* before judged sleep k: two of three hand the runtime on until each
       caller stays inside a call (20 ms at most), past the middle
       allocation of as many as its calls make at most, or the one before,
       or the one after, in turn (a driver may note its call in flight only
       after allocations of its own wrapper, blind am-held-alloc-inflight:
       two or three, and end the note before its last ones); the third
       starts with them all at work *)
    let amid_calls k =
      (* a caller whose calls allocate nothing no switch lands inside *)
      let held = List.filter (fun m -> Atomic.get m.most > 0) callers_in in
      if held <> [] && k mod 3 <> 2 then begin
        let offset = [| 0; -1; 1 |].((k - (k / 3)) mod 3) in
        List.iter (fun m -> Atomic.set m.want (max 1 (((Atomic.get m.most + 1) / 2) + offset))) held;
        let until = Probes.now () +. 0.02 in
        while (not (List.for_all (fun m -> Atomic.get m.parked) held)) && Probes.now () < until do Thread.yield () done
      end
    in
    (* called inside the judged sleep's mask, right before the sleep: the
       mask's own calls may hand the runtime on (Thread.sigmask) *)
    let let_go () = List.iter (fun m -> Atomic.set m.want 0) callers_in in
    let with_company f =
      let running = Atomic.make true in
      if callers <> [] then Alloc_points.use hand_on;
      let threads = List.filter_map (fun (usable, body) -> if Atomic.get usable then Some (Thread.create body running) else None) all in
      Fun.protect f ~finally:(fun () ->
          Atomic.set running false;
          List.iter Thread.join threads;
          if callers <> [] then Alloc_points.use ignore)
    in
    (with_company, amid_calls, let_go, callers <> [])
  in
  K.run ~clause:"SIG-3" ~seed (fun s ->
      if not (Pr.hooks_judge && P.runtime_hooks_chained ()) then
        raise (Probes.Skip "the runtime's blocking-section hooks are not the primitives': the idle probe judges SIG-3 alone");
      let hang = K.need_item "hang" Pk.kit.hang in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "hang" hang in
      dev.hung <- true;
      let w = Pk.D.signaled dev.d in
      let with_company, amid_calls, let_go, company = companions s dev ~hang ~seen:w in
      (* One measure: sleeps until [blocked_goal_ms] spent inside them, on a
         thread of its own (bounded), since a sleep with work hanging that
         never returns is TIME-4's, not this clause's. *)
      let one_measure () =
        (* fresh work before each measure: a step may keep the runtime
           only for the first sleep after a submit (blind cs-sig3-after-submit) *)
        ignore (K.launch dev h "hang");
        let run () =
          P.account_queued_in_waits true;
          Fun.protect ~finally:(fun () -> P.account_queued_in_waits false) (fun () ->
              let waits0 = P.waits () in
              let rec go ~calls ~blocked_ms ~own =
                if Pr.enough_sleeps ~calls ~blocked_ms then (calls, blocked_ms, own, None)
                else
                  let still_ms = Pr.still_cycle.(calls mod Array.length Pr.still_cycle) in
                  amid_calls calls;
                  let _, held0 = P.time_in_waits () and t0 = Probes.now () in
                  match P.masked (fun () -> let_go (); Pk.D.sleep dev.d ~seen:w ~still_ms) with
                  | () ->
                      let _, held1 = P.time_in_waits () and ms = (Probes.now () -. t0) *. 1000. in
                      go ~calls:(calls + 1) ~blocked_ms:(blocked_ms +. ms) ~own:((held1 -. held0, ms, still_ms) :: own)
                  | exception Pk.D.Fault why -> (calls, blocked_ms, own, Some why)
              in
              let calls, blocked_ms, own, faulted = go ~calls:0 ~blocked_ms:0. ~own:[] in
              (calls, blocked_ms, own, faulted, P.waits () - waits0))
        in
        match Probes.watch ~ms:(int_of_float (Pr.blocked_goal_ms *. 4.) + 8000) (fun () -> with_company run) with
        | Probes.Done r -> r
        | Probes.Raised e -> raise (Probes.Skip (spf "a sleep with work hanging raised %s" (Printexc.to_string e)))
        | Probes.Late ->
            raise (Probes.Skip "a sleep with work hanging did not return within 9 s (TIME-4's probe judges that)")
      in
      let rec vote ~measures ~kept_n ~released_n =
        let calls, blocked_ms, own, faulted, waits_entered = one_measure () in
        match faulted with
        | Some why -> raise (Probes.Skip (spf "sleep with work hanging raised Fault (%s) after %d call(s): no blocked time to judge" why calls))
        | None -> (
            match Pr.own_hold own with
            | Some h when waits_entered > 0 ->
            let kept_n, released_n =
              (* with company, a measure met only the conditions its sleeps
                 happened to start amid: one that found none counts once *)
              Pr.count_vote ~kept:(Pr.kept_in_waits_ms ~blocked_ms h)
                ~plain:((not company) && Pr.plainly_released_ms ~blocked_ms h) (kept_n, released_n)
            in
            let measures = measures + 1 in
            if kept_n >= Pr.kept_votes then
              K.flag s
                "while sleep blocked with work hanging (%d call(s), %.0f ms in all, the word unmoved), %s (%d of %d measures show a kept runtime): the wait's blocking step keeps the OCaml runtime"
                calls blocked_ms (Pr.describe_hold ~blocked_ms h) kept_n measures
            else if released_n >= Pr.released_votes + kept_n then ()
            else if Pr.vote_over ~measures (kept_n, released_n) then
              Pr.report_unjudged_vote ~of_what:"sleep with work hanging" ~measures (kept_n, released_n)
            else vote ~measures ~kept_n ~released_n
            | _ -> raise (Probes.Skip (spf "%d sleep(s) with work hanging entered no wait: no blocking step to judge" calls)))
      in
      vote ~measures:0 ~kept_n:0 ~released_n:0)

module type M = sig
  val lock4 : unit -> finding list
  val sig8 : seed:int -> finding list
  val sig2 : seed:int -> finding list
  val sig3 : seed:int -> finding list
end

let case name clause run =
  {
    name;
    clauses = [ clause ];
    run =
      (fun (module Pk : Rig_edge.Package) ~seed ->
        let module Pr = Probe (Pk) in
        try Ran (run (module Pr : M) ~seed) with Skip why -> Not_applicable why);
  }

let cases =
  [
    case "probe.LOCK-4.refused-in-lock" "LOCK-4" (fun (module M : M) ~seed:_ -> M.lock4 ());
    case "probe.SIG-2.handler-in-waits" "SIG-2" (fun (module M : M) ~seed -> M.sig2 ~seed);
    case "probe.SIG-3.wait-releases-runtime" "SIG-3" (fun (module M : M) ~seed -> M.sig3 ~seed);
    { name = "probe.SIG-3.busy-wait-releases-runtime"; clauses = [ "SIG-3" ]; run = (fun pk ~seed -> sig3_busy pk ~seed) };
    case "probe.SIG-8.driver-threads-blocked" "SIG-8" (fun (module M : M) ~seed -> M.sig8 ~seed);
  ]
