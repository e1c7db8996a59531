(* What [time_in_waits] notes of a wait's steps (the SIG-3 probe's own
   measure of the sleeping thread): a step that enters a blocking section
   is not held for that section; a step that never lets the runtime go,
   spinning or asleep, is held for the wait; nothing is noted with the
   accounting off. *)
module P = Rig_edge_primitives

external nap_held : int -> unit = "held_in_waits_nap_held" [@@noalloc]
external c_step_released : int -> unit = "held_in_waits_c_step_released"

let fail fmt = Printf.ksprintf (fun s -> prerr_endline ("held_in_waits: " ^ s); exit 1) fmt

(* the figures one wait of [step] adds, with the accounting on or off; a
   wait of the primitives, or the C step's own rig_unblock and rig_block *)
let noted ?(wait = P.wait) ~on step =
  P.account_queued_in_waits on;
  let w0, h0 = P.time_in_waits () in
  wait step;
  let w1, h1 = P.time_in_waits () in
  P.account_queued_in_waits false;
  (w1 -. w0, h1 -. h0)

(* an OCaml loop that allocates nothing and enters no blocking section *)
let spin () =
  let n = ref 0 in
  for i = 1 to 2_000_000 do
    n := !n + (i land 7)
  done;
  ignore (Sys.opaque_identity !n)

let () =
  (* a thread made, as in a driver: the threads library's hooks are set *)
  Thread.join (Thread.create ignore ());
  if not (P.runtime_hooks_chained ()) then fail "the blocking-section hooks are not the primitives'";
  (* a 10-ms blocking section against the microseconds around it *)
  let waited, held = noted ~on:true (fun () -> Unix.sleepf 0.01) in
  if not (waited > 0. && held < waited /. 2.) then
    fail "a wait in Unix.sleepf: %.3f ms in the wait, %.3f ms held (the blocking section counted as held)" waited held;
  (* held from the wait's start to its end: the same two stamps, equal to
     the float rounding of ms *)
  let waited, held = noted ~on:true spin in
  if Float.abs (held -. waited) > 1e-6 then fail "a wait that spins in OCaml: %.3f ms in the wait, %.3f ms held" waited held;
  let waited, held = noted ~on:true (fun () -> nap_held 10) in
  if Float.abs (held -. waited) > 1e-6 then
    fail "a wait that sleeps holding the runtime: %.3f ms in the wait, %.3f ms held" waited held;
  let waited, held = noted ~wait:(fun f -> f ()) ~on:true (fun () -> c_step_released 10) in
  if not (waited > 0. && held = 0.) then
    fail "a C step that lets the runtime go before rig_unblock: %.3f ms in the wait, %.3f ms held" waited held;
  let waited, held = noted ~on:false (fun () -> Unix.sleepf 0.001) in
  if waited <> 0. || held <> 0. then fail "accounting off, a wait noted %.3f ms (%.3f held)" waited held;
  print_endline "held_in_waits: ok"
