(* The edge checks; see edge_checks.mli. *)

open Case
module P = Rig_edge_primitives

exception Handler_ran of bool  (* whether inside a wait *)

(* LOCK-7: refused, and the lock count as before the take. *)
let lock7 ~seed:_ =
  let acc = ref [] in
  let refused what take =
    let before = P.holds () in
    match take () with
    | () -> acc := value_finding "LOCK-7" "%s was taken instead of refused" what :: !acc
    | exception Invalid_argument _ ->
        if P.holds () <> before then
          acc := value_finding "LOCK-7" "%s was refused but the thread's lock count went from %d to %d" what before (P.holds ()) :: !acc
    | exception e -> acc := value_finding "LOCK-7" "%s raised %s, not Invalid_argument" what (Printexc.to_string e) :: !acc
  in
  let mine = P.Lock.create "edge check's lock" and rigs = P.Lock.create ~rig:true "edge check's rig lock" in
  P.Lock.protect mine (fun () ->
      refused "a lock the thread holds" (fun () -> P.Lock.protect mine ignore);
      refused "a lock of rig's, inside another lock" (fun () -> P.Lock.protect rigs ignore));
  if P.holds () <> 0 then acc := value_finding "LOCK-7" "%d lock(s) still counted after the checks" (P.holds ()) :: !acc;
  Ran (List.rev !acc)

(* SIG-4: a signal that comes during a wait's blocking step, on this very
   thread: its handler's exception must end the wait.  The handler raises
   only inside a wait, so that a late run is recorded, not thrown about. *)
let sig4 ~seed:_ =
  let late = ref false in
  Sys.set_signal Sys.sigusr1
    (Sys.Signal_handle (fun _ -> if P.in_wait () then raise (Handler_ran true) else late := true));
  let outcome =
    match P.masked (fun () -> P.wait (fun () -> Self_thread.kill Sys.sigusr1)) with
    | () -> Some "the wait returned normally; its handler had not run"
    | exception Handler_ran _ -> None
  in
  for _ = 1 to 100 do ignore (Sys.opaque_identity (List.init 16 Fun.id)) done;
  Sys.set_signal Sys.sigusr1 Sys.Signal_default;
  match outcome with
  | None -> Ran []
  | Some what ->
      Ran [ finding "SIG-4" "SIGUSR1 came during a wait: %s%s" what (if !late then " (it ran after the call)" else "") ]

(* SIG-5: a signal that comes outside a wait runs its handler at the call's
   next wait, or once the call returned. *)
let sig5 ~seed:_ =
  let ran = ref None in
  Sys.set_signal Sys.sigusr2 (Sys.Signal_handle (fun _ -> ran := Some (P.in_wait ())));
  let acc = ref [] in
  P.masked (fun () ->
      Self_thread.kill Sys.sigusr2;
      P.wait ignore);
  (match !ran with
  | Some true -> ()
  | Some false -> acc := finding "SIG-5" "a signal pending before a wait ran its handler outside it, inside the call" :: !acc
  | None -> acc := finding "SIG-5" "a signal pending before a wait did not run its handler at that wait" :: !acc);
  ran := None;
  P.masked (fun () -> Self_thread.kill Sys.sigusr2);
  for _ = 1 to 100 do ignore (Sys.opaque_identity (List.init 16 Fun.id)) done;
  if !ran = None then acc := finding "SIG-5" "a signal that came in a call without a wait had not run its handler once the call returned" :: !acc;
  Ran (List.rev !acc)

let case name clause run = { name; clauses = [ clause ]; run = (fun _ ~seed -> run ~seed) }

let cases =
  [
    case "edge.LOCK-7.refused-take" "LOCK-7" lock7;
    case "edge.SIG-4.handler-ends-wait" "SIG-4" sig4;
    case "edge.SIG-5.pending-runs-later" "SIG-5" sig5;
  ]
