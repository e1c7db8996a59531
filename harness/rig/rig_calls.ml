(* How the reference rig calls a driver; see rig_calls.mli.  rig's own lock
   guards its records, and keeps locate and peer from a stop (Rig's
   uncounted_on_live): no other driver call is ever made while it is held
   (LOCK-1). *)

open Rig_types
module P = Rig_edge_primitives

(* The functions whose other exceptions lose the device (EXC-1). *)
let losing_fns =
  [ "alloc"; "free"; "map_peer"; "map_host"; "dma"; "image"; "reach"; "entry"; "grow"; "unload" ]

let now_ms () = Unix.gettimeofday () *. 1000.

module type Losses = sig
  exception Device_lost of string
  exception Out_of_memory of int
end

(* The steps a mutant replaces are [Rig_mutant.step]s, dereferenced where
   they run; their variants are in Mutants, at the end. *)
let step = Rig_mutant.step

module Make (D : Rig_edge.Driver) (L : Losses) = struct
  open L

  type device = (D.t, D.region, D.image) Rig_types.device

  let rig_lock = P.Lock.create ~rig:true "rig"
  let changed = Condition.create ()
  let with_rig f = P.Lock.protect rig_lock f
  let hang_ms = ref 2000

  (* Every public call starts here: a call of rig's made inside a lock raises
     Invalid_argument as it starts (LOCK-2). *)
  let check_unheld = step P.check_unheld
  let start fn = !check_unheld ("Rig." ^ fn)

  let lose dev ?fault why =
    with_rig (fun () ->
        if dev.lost = None then begin
          dev.lost <- Some why;
          dev.fault <- fault
        end;
        Condition.broadcast changed)

  let enter dev =
    with_rig (fun () ->
        match dev.lost with
        | Some why -> raise (Device_lost why)
        | None -> dev.in_flight <- dev.in_flight + 1)

  let leave dev =
    with_rig (fun () ->
        dev.in_flight <- dev.in_flight - 1;
        Condition.broadcast changed)

  (* Whether an exception other than Fault from [fn] loses the device:
     never from prepare (EXC-3), nor an Invalid_argument from entry (EXC-2). *)
  let loses_conforming fn e =
    match e with
    | Invalid_argument _ when fn = "entry" -> false
    | _ when fn = "prepare" -> false
    | _ -> List.mem fn losing_fns

  let loses = step loses_conforming

  (* A Fault loses the device (CNT-6). *)
  let faulted = step (fun dev fn why -> lose dev ~fault:why (fn ^ ": Fault " ^ why))

  (* The reason a loss for another exception gives: the function and the
     exception's text (EXC-1). *)
  let loss_text = step (fun fn e -> fn ^ ": " ^ Printexc.to_string e)

  (* Another exception loses it where [loses] says; [finish] ends the call. *)
  let failed_conforming dev fn e ~finish =
    if !loses fn e then lose dev (!loss_text fn e);
    finish ()

  let failed = step failed_conforming

  (* A Fault's outcome, the loss, is recorded before the call ends and its
     mask is given back (SIG-1). *)
  let record_fault_conforming dev fn why ~finish =
    !faulted dev fn why;
    finish ()

  let record_fault = step record_fault_conforming

  (* A counted call: counted, masked, its outcome recorded (a loss) before
     the mask is given back (SIG-1). *)
  let counted ?(mask = true) ?(count = true) dev fn f =
    if count then enter dev
    else with_rig (fun () -> match dev.lost with Some why -> raise (Device_lost why) | None -> ());
    let m = if mask then Some (P.mask ()) else None in
    let finish () =
      if count then leave dev;
      Option.iter P.restore m
    in
    match f () with
    | v -> finish (); v
    | exception D.Fault why ->
        !record_fault dev fn why ~finish;
        raise (Device_lost why)
    | exception e ->
        !failed dev fn e ~finish;
        raise e

  (* The C functions: masked, counted where the device declares may_block (CNT-3). *)
  let counts_c_calls = step (fun (dev : device) -> dev.facts.may_block)
  let c_call dev fn f = counted ~count:(!counts_c_calls dev) dev fn f

  let uncounted_masked f = P.masked f

  (* After stop: uncounted, faults dropped (STOP-7). *)
  let dropping_faults_conforming f = match P.masked f with () -> true | exception _ -> false
  let dropping_faults = step dropping_faults_conforming

  (* rig lets go of what the submissions up to [upto] keep alive (CNT-5). *)
  let let_go_conforming dev ~upto = dev.kept <- List.filter (fun (v, _) -> v > upto) dev.kept
  let let_go = step let_go_conforming

  let note_word dev w =
    with_rig (fun () ->
        if w > dev.observed then begin
          dev.observed <- w;
          dev.last_move <- now_ms ();
          !let_go dev ~upto:w
        end)

  (* After stop, signaled's faults are dropped (TIME-2). *)
  let signaled_after_stop = step (fun dev -> try D.signaled dev.d with _ -> dev.observed)

  let signaled dev =
    let w =
      if dev.stopped then !signaled_after_stop dev
      else counted ~mask:false dev "signaled" (fun () -> D.signaled dev.d)
    in
    note_word dev w;
    w

  (* ---- waiting on the word ---- *)

  (* A word standing still for the hang bound loses the device with a fault
     (GUAR-7); else the sleep's bound: what is left of the hang bound. *)
  let still_for_conforming dev ~w ~stalled =
    if stalled >= float !hang_ms then begin
      let why = Printf.sprintf "hang: the word stood at %d for %d ms" w !hang_ms in
      lose dev ~fault:why why;
      raise (Device_lost why)
    end;
    max 1 (!hang_ms - int_of_float stalled)

  let still_for = step still_for_conforming

  (* sleep is counted (CNT-2). *)
  let sleep = step (fun dev ~seen ~still_ms -> counted dev "sleep" (fun () -> D.sleep dev.d ~seen ~still_ms))

  let wait_word dev v =
    let rec loop () =
      (* A device lost meanwhile (a close on another thread) is not read again. *)
      (match dev.lost with Some why -> raise (Device_lost why) | None -> ());
      let w = signaled dev in
      if w < v then begin
        let still_ms = !still_for dev ~w ~stalled:(now_ms () -. dev.last_move) in
        !sleep dev ~seen:w ~still_ms;
        loop ()
      end
    in
    loop ()

  (* ---- the mutants of these steps (Rig_mutant.all) ---- *)

  module Mutants = struct
    (* no-lock-check (LOCK-2): calls made inside a lock go on. *)
    let unchecked (_ : string) = ()

    (* prepare-unchecked (LOCK-2): prepare alone lacks the check.  Its call
       is then refused by the take of rig's lock that counts it (LOCK-7),
       and prepare reports no exception of the driver's (CODE-6): it
       returns. *)
    let all_but_prepare fn = if fn <> "Rig.prepare" then P.check_unheld fn

    (* ignore-exception (EXC-1): no exception other than Fault loses the device. *)
    let loses_nothing _ _ = false

    (* lose-on-entry-invalid (EXC-2): an Invalid_argument from entry loses it. *)
    let loses_entry_invalid fn e =
      match e with Invalid_argument _ when fn = "entry" -> true | _ -> loses_conforming fn e

    (* lose-on-prepare-exn (EXC-3): an exception from prepare loses it. *)
    let loses_prepare fn e = fn = "prepare" || loses_conforming fn e

    (* grow-exception-kept (EXC-1): an exception from grow loses nothing. *)
    let grow_kept fn e = fn <> "grow" && loses_conforming fn e

    (* lose-on-sleep-exn (EXC-3): an exception other than Fault from sleep loses it. *)
    let loses_sleep fn e = fn = "sleep" || loses_conforming fn e

    (* lose-on-signaled-exn (EXC-3): an exception other than Fault from signaled loses it. *)
    let loses_signaled fn e = fn = "signaled" || loses_conforming fn e

    (* loss-without-text (EXC-1): the loss names the function, not the exception. *)
    let function_only fn (_ : exn) = fn ^ " raised"

    (* ignore-fault (CNT-6): a Fault is kept for stop, but the device goes on. *)
    let fault_kept dev _ why = with_rig (fun () -> if dev.fault = None then dev.fault <- Some why)

    (* no-stop-after-async (ASYNC-1): an exception it does not know (an
       asynchronous one) makes it forget the device: close neither stops
       nor frees nor unloads it. *)
    let recognised = function
      | D.Fault _ | Invalid_argument _ | Failure _ | Not_found | Stdlib.Out_of_memory | Out_of_memory _ | Device_lost _ | Sys_error _ | End_of_file | Exit
      | Division_by_zero | Stack_overflow ->
          true
      | _ -> false

    let failed_forgets dev fn e ~finish =
      failed_conforming dev fn e ~finish;
      if not (recognised e) then
        with_rig (fun () ->
            dev.stopped <- true;
            dev.released <- true)

    (* after-stop-faults-raised (STOP-7): a free or unload after stop raises what it raised. *)
    let faults_raised f = P.masked f; true

    (* signaled-fault-after-stop (TIME-2): signaled's exceptions after stop escape. *)
    let signaled_raising dev = D.signaled dev.d

    (* stop-no-fault-after-hang (STOP-1): the hang bound loses the device without a fault. *)
    let unfaulted_hang dev ~w ~stalled =
      try still_for_conforming dev ~w ~stalled
      with Device_lost _ as e ->
        with_rig (fun () -> dev.fault <- None);
        raise e

    (* uncounted-c-calls (CNT-3): the C functions are never counted. *)
    let c_calls_uncounted (_ : device) = false

    (* keep-after-stop (CNT-5): after stop, the submissions' values stay. *)
    let kept_after_stop (dev : device) ~upto = if not dev.stopped then let_go_conforming dev ~upto

    (* no-hang-bound (GUAR-7): a word standing still never loses the device. *)
    let unbounded (_ : device) ~w:_ ~stalled:_ = 100

    (* unmask-before-loss (SIG-1): a Fault's call ends, its mask given back,
       before the loss is recorded. *)
    let fault_recorded_after (dev : device) fn why ~finish =
      finish ();
      !faulted dev fn why

    (* hang-bound-doubled (GUAR-7): the device is lost after twice the bound. *)
    let doubled dev ~w ~stalled = still_for_conforming dev ~w ~stalled:(stalled /. 2.)

    (* uncounted-sleep (CNT-2): close may stop the device during a sleep. *)
    let uncounted_sleep (dev : device) ~seen ~still_ms = P.masked (fun () -> D.sleep dev.d ~seen ~still_ms)

    let variants =
      [
        ("no-lock-check", fun () -> check_unheld := unchecked);
        ("prepare-unchecked", fun () -> check_unheld := all_but_prepare);
        ("ignore-exception", fun () -> loses := loses_nothing);
        ("lose-on-entry-invalid", fun () -> loses := loses_entry_invalid);
        ("lose-on-prepare-exn", fun () -> loses := loses_prepare);
        ("lose-on-sleep-exn", fun () -> loses := loses_sleep);
        ("lose-on-signaled-exn", fun () -> loses := loses_signaled);
        ("after-stop-faults-raised", fun () -> dropping_faults := faults_raised);
        ("stop-no-fault-after-hang", fun () -> still_for := unfaulted_hang);
        ("signaled-fault-after-stop", fun () -> signaled_after_stop := signaled_raising);
        ("grow-exception-kept", fun () -> loses := grow_kept);
        ("loss-without-text", fun () -> loss_text := function_only);
        ("ignore-fault", fun () -> faulted := fault_kept);
        ("no-stop-after-async", fun () -> failed := failed_forgets);
        ("uncounted-c-calls", fun () -> counts_c_calls := c_calls_uncounted);
        ("keep-after-stop", fun () -> let_go := kept_after_stop);
        ("no-hang-bound", fun () -> still_for := unbounded);
        ("hang-bound-doubled", fun () -> still_for := doubled);
        ("unmask-before-loss", fun () -> record_fault := fault_recorded_after);
        ("uncounted-sleep", fun () -> sleep := uncounted_sleep);
      ]
  end
end
