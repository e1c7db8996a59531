(* st3check: for hostmem and each st3-* driver, on fresh devices, what stop
   does to the word and to the memory its work writes (STOP-3):
   - queued:  [spin 200 ms] (value 1) then [Fill R with 0xab] (value 2),
              both committed, stop 30 ms later (the spin runs);
   - running: one submission [spin 200 ms; Fill R with 0xab] (value 1),
              stop 30 ms later;
   - midfill: [Fill BIG (64 MiB Mapped) with 0xcd] (value 1), stop once its
              first byte is written (the memset runs);
     for these three: how long after stop the word read the last value
     ("L@ms"), R's (BIG's last) byte when it did, and whether it changes in
     the 3 s after.  A byte
     that changes after the word showed L is work that ran after it:
     "WRITE AFTER L" (STOP-3's "only once no work of d runs").
   - idle:    [Fill R with 1] (value 1) committed and done, then [Fill R
              with 2] (value 2) submitted, not committed; stop: the word
              when stop returned ("ret=") and 300 ms later; must be 2 at
              return (STOP-3's "before stop returns"); R must stay 1 (STOP-4);
   - hang:    [hang] (value 1), stop 30 ms later: how long stop took and
              when the word read 1 (STOP-2, STOP-3 "once that work runs no
              more"). *)

open Rig_edge

let now = Unix.gettimeofday
let ms t0 = (now () -. t0) *. 1000.

let run (module P : Package) =
  let o = List.hd (P.openers ()) in
  let fresh () = o.make () in
  let m f = Rig_edge_primitives.masked f in
  let img d = match P.D.image d P.kit.binary with Ok i -> i | Error e -> failwith e in
  let ent i f = match P.D.entry i f with Entry h -> h | _ -> failwith f in
  let sub d parts value =
    let q = (P.D.facts d).queue in
    let s = encode parts in
    (match q.room s with Room -> () | Grow -> failwith "grow");
    assert (q.submit s ~value)
  in
  let commit d = assert ((P.D.facts d).queue.commit ()) in
  let byte d r off =
    let pl = P.D.locate d r in
    let b = Bytes.create 1 in
    (Option.get pl.reach) (Read { off; into = b });
    Char.code (Bytes.get b 0)
  in
  let wait_word d v limit =
    let t0 = now () in
    while P.D.signaled d <> v && ms t0 < limit do
      Thread.delay 0.0002
    done;
    if P.D.signaled d = v then Some (ms t0) else None
  in
  let after_l d r off l =
    let t0 = now () in
    m (fun () -> P.D.stop d ~fault:None);
    let ret = ms t0 in
    let at = wait_word d l 3000. in
    let b_at = byte d r off in
    (* a late write, if any, within 3 s (a 64-MiB memset takes several
       hundred ms on a loaded machine) *)
    let t1 = now () in
    while byte d r off = b_at && ms t1 < 3000. do
      Thread.delay 0.005
    done;
    let b_later = byte d r off in
    let bad = b_at <> b_later in
    Printf.sprintf "stop %.0fms L@%s byte@L=%02x later=%02x%s" ret
      (match at with Some t -> Printf.sprintf "%.0fms" t | None -> "never")
      b_at b_later
      (if bad then " WRITE AFTER L" else "")
  in
  (* queued *)
  let queued =
    let d = fresh () in
    let i = img d in
    let spin = ent i "spin" in
    let r = Option.get (P.D.alloc d Device 64) in
    let h = (P.D.locate d r).handle in
    sub d [ Launch { entry = spin; args = [ 200L ] } ] 1;
    sub d [ Fill { dst = h; off = 0; len = 64; byte = 0xab } ] 2;
    commit d;
    Thread.delay 0.03;
    after_l d r 0 2
  in
  let running =
    let d = fresh () in
    let i = img d in
    let spin = ent i "spin" in
    let r = Option.get (P.D.alloc d Device 64) in
    let h = (P.D.locate d r).handle in
    sub d [ Launch { entry = spin; args = [ 200L ] }; Fill { dst = h; off = 0; len = 64; byte = 0xab } ] 1;
    commit d;
    Thread.delay 0.03;
    after_l d r 0 1
  in
  let midfill =
    let d = fresh () in
    let n = 64 lsl 20 in
    let r = Option.get (P.D.alloc d Mapped n) in
    let h = (P.D.locate d r).handle in
    sub d [ Fill { dst = h; off = 0; len = n; byte = 0xcd } ] 1;
    commit d;
    while byte d r 0 <> 0xcd do
      Thread.yield ()
    done;
    after_l d r (n - 1) 1
  in
  let idle =
    let d = fresh () in
    let r = Option.get (P.D.alloc d Device 64) in
    let h = (P.D.locate d r).handle in
    sub d [ Fill { dst = h; off = 0; len = 64; byte = 1 } ] 1;
    commit d;
    while P.D.signaled d <> 1 do
      m (fun () -> P.D.sleep d ~seen:(P.D.signaled d) ~still_ms:100)
    done;
    sub d [ Fill { dst = h; off = 0; len = 64; byte = 2 } ] 2;
    m (fun () -> P.D.stop d ~fault:None);
    let ret = P.D.signaled d in
    let at = wait_word d 2 300. in
    Printf.sprintf "ret=%d%s R=%d%s" ret
      (match at with Some t -> Printf.sprintf " 2@%.0fms" t | None -> " 2@never")
      (byte d r 0)
      (if ret <> 2 then " NOT L AT RETURN" else "")
  in
  let hang =
    let d = fresh () in
    let i = img d in
    let hg = ent i "hang" in
    sub d [ Launch { entry = hg; args = [] } ] 1;
    commit d;
    Thread.delay 0.03;
    let t0 = now () in
    m (fun () -> P.D.stop d ~fault:None);
    let ret = ms t0 in
    let at = wait_word d 1 3000. in
    Printf.sprintf "stop %.0fms L@%s" ret (match at with Some t -> Printf.sprintf "%.0fms" t | None -> "never")
  in
  Printf.printf "%s\n  queued:  %s\n  running: %s\n  midfill: %s\n  idle:    %s\n  hang:    %s\n%!" P.name queued
    running midfill idle hang

let () =
  let only = List.tl (Array.to_list Sys.argv) in
  List.iter
    (fun (module P : Package) -> if only = [] || List.mem P.name only then run (module P))
    ((module Hostmem : Package) :: Blindst3.packages)
