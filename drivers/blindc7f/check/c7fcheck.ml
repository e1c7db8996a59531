(* c7fcheck: for each c7f-* driver, the sequence of blindc7f.ml's table,
   calling the Driver's functions directly, as rig would (signals masked,
   the queue's room, submit, commit on one thread), and what it shows:
   O1  a prepare that raised Fault changed free Device memory;
   O2  memory not back after unload (a leak);
   O3  on a new device, prepare of f (the function of the raised prepare)
       and of g (same scratch) are treated differently.
   A broken driver must show exactly its expected observations, a
   conforming one none. *)

open Rig_edge
module Prim = Rig_edge_primitives

let scratch = 65536

let binary =
  Printf.sprintf "hostmem-image 1\nfault fault 0\nwork nop %d\nwork2 nop %d\n" scratch scratch

let expected = function
  | "c7f-keep-entry" | "c7f-hold-reserve" | "c7f-async-runs-on" -> [ "O1" ]
  | "c7f-leak-staging" -> [ "O1"; "O2" ]
  | "c7f-stale-mark" -> [ "O3" ]
  | _ -> []

let run (module P : Package) =
  let module D = P.D in
  let m f = Prim.masked f in
  let free_mem d =
    (* the largest multiple of 4 alloc Device grants *)
    let ok w =
      match m (fun () -> D.alloc d Device (4 * w)) with
      | Some r -> m (fun () -> D.free d r); true
      | None -> false
    in
    let lo = ref 0 and hi = ref (Hostmem.capacity / 4 + 1) in
    while !hi - !lo > 1 do
      let mid = (!lo + !hi) / 2 in
      if ok mid then lo := mid else hi := mid
    done;
    4 * !lo
  in
  let image d = match m (fun () -> D.image d binary) with Ok i -> i | Error e -> failwith e in
  let prep i f =
    match m (fun () -> D.prepare i f) with () -> "returned" | exception D.Fault _ -> "Fault"
  in
  let settle () = Thread.delay 0.3 in
  let op = List.hd (m P.openers) in
  let d = m op.make in
  let i = image d in
  let hf = match m (fun () -> D.entry i "fault") with Entry h -> h | _ -> failwith "no fault entry" in
  let f0 = free_mem d in
  (* launch the fault function: room, submit, commit *)
  let q = (D.facts d).queue in
  let s = encode [ Launch { entry = hf; args = [] } ] in
  if m (fun () -> q.room s) <> Room then failwith "room";
  if not (m (fun () -> q.submit s ~value:1)) then failwith "submit";
  if not (m (fun () -> q.commit ())) then failwith "commit";
  Thread.delay 0.1;
  let f1 = free_mem d in
  let r1 = prep i "work" in
  let f2a = free_mem d in
  settle ();
  let f2 = free_mem d in
  let r2 = prep i "work" in
  settle ();
  let f3 = free_mem d in
  let e = match m (fun () -> D.entry i "work") with Entry _ -> "Entry" | Absent -> "Absent" | No_memory _ -> "No_memory" in
  let f4 = free_mem d in
  let slept = match m (fun () -> D.sleep d ~seen:0 ~still_ms:50) with () -> "returned" | exception D.Fault _ -> "Fault" in
  m (fun () -> D.unload i);
  let f5 = free_mem d in
  m (fun () -> D.stop d ~fault:(Some "c7fcheck: fault"));
  (* the name opened again *)
  let d' = m op.make in
  let i' = image d' in
  let g0 = free_mem d' in
  let rf = prep i' "work" in
  settle ();
  let g1 = free_mem d' in
  let rg = prep i' "work2" in
  settle ();
  let g2 = free_mem d' in
  m (fun () -> D.unload i');
  let g3 = free_mem d' in
  m (fun () -> D.stop d' ~fault:None);
  let obs =
    List.filter_map Fun.id
      [
        (if (r1 = "Fault" && (f2 <> f1 || f2a <> f1)) || (r2 = "Fault" && f3 <> f2) then Some "O1" else None);
        (if f5 <> f0 || g3 <> g0 then Some "O2" else None);
        (if g0 - g1 <> g1 - g2 then Some "O3" else None);
      ]
  in
  let sane = e = "Entry" && slept = "Fault" && rf = "returned" && rg = "returned" in
  let exp = expected P.name in
  let pass = sane && obs = exp in
  Printf.printf "%-18s %s  faulted dev: F0=%d F1=%d prepare work: %s F2(now)=%d F2(+300ms)=%d | again: %s F3=%d | entry %s F4=%d | sleep %s | unload F5=%d\n"
    P.name (if pass then "PASS" else "FAIL") f0 f1 r1 f2a f2 r2 f3 e f4 slept f5;
  Printf.printf "%-18s       new dev: G0=%d prepare work: G1=%d (made %d) prepare work2: G2=%d (made %d) unload G3=%d\n"
    "" g0 g1 (g0 - g1) g2 (g1 - g2) g3;
  Printf.printf "%-18s       observed [%s], expected [%s]%s\n%!" "" (String.concat " " obs) (String.concat " " exp)
    (if sane then "" else "  (sanity failed)");
  pass

let () =
  let results = List.map (fun (_, p) -> run p) Blindc7f.drivers in
  let k = List.length (List.filter Fun.id results) and n = List.length results in
  Printf.printf "c7fcheck: %d of %d as expected\n" k n;
  exit (if k = n then 0 else 1)
