(* Whether a signal sent as a wait opens runs its handler inside the wait,
   for a wait inside rig_mask, inside rig_shield, and inside rig_shield
   inside rig_mask (a finaliser or exit handler run inside a driver call).
   A shield keeps every wait's signals blocked ("waits included", SIG-7):
   the handler then runs once the shield ends, outside the wait. *)
module P = Rig_edge_primitives

let inside = ref 0
let ran = ref 0

let () =
  Sys.set_signal Sys.sigusr2
    (Sys.Signal_handle
       (fun _ ->
         incr ran;
         if P.in_wait () then incr inside))

(* the signal comes as the next wait opens *)
let try_wait around =
  inside := 0;
  ran := 0;
  around (fun () ->
      P.signal_at_wait 1;
      P.wait (fun () -> Unix.sleepf 0.001));
  (* a signal a shield held runs its handler at the first poll point
     after the shield's end: an allocation *)
  ignore (Sys.opaque_identity (ref 0));
  (!ran, !inside)

let expect what around ~inside_wait =
  let ran, inside = try_wait around in
  if ran <> 1 || (inside > 0) <> inside_wait then begin
    Printf.eprintf "shield_waits: %s: the handler ran %d time(s), %d inside the wait (expected once, %s)\n" what ran inside
      (if inside_wait then "inside" else "outside");
    exit 1
  end

let () =
  expect "a wait in a masked call" (fun f -> P.masked f) ~inside_wait:true;
  expect "a wait in a shield" (fun f -> P.shield f) ~inside_wait:false;
  expect "a wait in a shield in a masked call" (fun f -> P.masked (fun () -> P.shield f)) ~inside_wait:false;
  expect "a wait in a masked call in a shield" (fun f -> P.shield (fun () -> P.masked f)) ~inside_wait:false;
  print_endline "shield_waits: OK"
