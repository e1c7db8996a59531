(* st8check: runs, on every st8-* driver, sequences rig may make around a
   second open of the same name (STOP-1, STOP-7, STOP-8), and judges what
   the new device shows through the Driver functions only:
     - its word (signaled) against the values given to its submit;
     - its regions' bytes, through locate's reach;
     - its free Device memory, as the largest alloc it grants;
     - a launch of its entry, and a Fill of its region, through its queue.
   Also a sequence with one device per name ("alone"), where every driver
   must be clean. *)

open Rig_edge

let sp = Printf.sprintf

module Check (P : Package) = struct
  module D = P.D

  let opener n =
    match List.find_opt (fun (o : D.t opener) -> o.name = n) (P.openers ()) with
    | Some o -> o
    | None -> failwith ("no opener " ^ n)

  let hw0 = P.name ^ ":hostmem0"
  let hw1 = P.name ^ ":hostmem1"

  let alloc d n = match D.alloc d Device n with Some r -> r | None -> failwith "alloc: None"
  let handle d r = (D.locate d r).handle

  let reach d r = match (D.locate d r).reach with Some f -> f | None -> failwith "no reach"
  let fill d r c = reach d r (Write { off = 0; from = String.make (D.locate d r).size c })

  (* What the region's bytes are: Ok of the byte they all hold, or Error. *)
  let bytes_of d r c =
    let p = D.locate d r in
    let b = Bytes.create p.size in
    match reach d r (Read { off = 0; into = b }) with
    | exception D.Fault s -> Error (sp "reach raises Fault %S" s)
    | exception e -> Error (sp "reach raises %s" (Printexc.to_string e))
    | () ->
        if Bytes.for_all (( = ) c) b then Ok ()
        else Error (sp "bytes changed (first %C, expected %C)" (Bytes.get b 0) c)

  let submit d parts value =
    let q = (D.facts d).queue in
    let s = encode parts in
    if q.room s <> Room then failwith "room: Grow";
    if not (q.submit s ~value) then failwith "submit failed";
    if not (q.commit ()) then failwith "commit failed"

  (* Sleeps until the word reads [value]: Ok, or Error why. *)
  let wait d value =
    let deadline = Unix.gettimeofday () +. 2. in
    let rec go () =
      let w = D.signaled d in
      if w = value then Ok ()
      else if Unix.gettimeofday () > deadline then Error (sp "word %d, not %d, after 2 s" w value)
      else
        match D.sleep d ~seen:w ~still_ms:100 with
        | () -> go ()
        | exception D.Fault s -> Error (sp "sleep raises Fault %S" s)
    in
    go ()

  let ok_wait d v = match wait d v with Ok () -> () | Error e -> failwith e

  (* The largest Device alloc d grants, a multiple of 4: its free Device
     memory as seen from outside. *)
  let free_space d =
    let lo = ref 0 and hi = ref (Hostmem.capacity + 4) in
    while !hi - !lo > 4 do
      let mid = !lo + ((!hi - !lo) / 8 * 4) in
      match D.alloc d Device mid with
      | Some r ->
          D.free d r;
          lo := mid
      | None -> hi := mid
    done;
    !lo

  let entry i f = match D.entry i f with Entry e -> e | _ -> failwith ("no entry " ^ f)
  let image d b = match D.image d b with Ok i -> i | Error e -> failwith e

  (* A call on the new device between the old device's frees. *)
  let probe d =
    let r = alloc d 4096 in
    fill d r 'p';
    D.free d r

  let quiet f = try f () with _ -> ()

  (* One device per name: free and unload while it lives, and after its
     stop with no second open.  Every driver must be clean. *)
  let alone () =
    let issues = ref [] in
    let note s = issues := s :: !issues in
    let e = (opener hw1).make () in
    let er = alloc e 4096 in
    let d = (opener hw0).make () in
    let base = free_space d in
    let a = alloc d 4096 in
    fill d a 'a';
    let m = D.map_peer d e er in
    let img = image d Hostmem.kit.binary in
    let en = entry img "nop" in
    submit d [ Fill { dst = handle d a; off = 0; len = 4096; byte = 0x11 }; Launch { entry = en; args = [] } ] 1;
    ok_wait d 1;
    (match bytes_of d a '\x11' with Ok () -> () | Error s -> note ("live work: " ^ s));
    D.free d m;
    D.free d a;
    D.unload img;
    Thread.delay 0.2;
    probe d;
    let now = free_space d in
    if now <> base then note (sp "live: free Device memory %d after the frees, %d before" now base);
    (* again, then stop and free everything after it *)
    let a = alloc d 4096 and b = alloc d 8192 in
    fill d b 'b';
    let m = D.map_peer d e er in
    let img = image d Hostmem.kit.binary and eimg = image d Hostmem.empty_image in
    let en = entry img "nop" in
    submit d [ Launch { entry = en; args = [] } ] 2;
    ok_wait d 2;
    D.stop d ~fault:None;
    if D.signaled d <> 2 then note (sp "stop: word %d, not 2" (D.signaled d));
    List.iter
      (fun (what, f) -> try f () with ex -> note (sp "%s after stop raises %s" what (Printexc.to_string ex)))
      [
        ("free M", fun () -> D.free d m);
        ("free A", fun () -> D.free d a);
        ("unload img", fun () -> D.unload img);
        ("free B", fun () -> D.free d b);
        ("unload eimg", fun () -> D.unload eimg);
        ("free word", fun () -> Option.iter (D.free d) (D.facts d).own_word);
      ];
    Thread.delay 0.2;
    if D.signaled d <> 2 then note (sp "after the frees: word %d, not 2" (D.signaled d));
    D.stop e ~fault:None;
    quiet (fun () -> D.free e er);
    List.rev !issues

  (* Old device of hw0, stop, second open of hw0, then the old device's
     frees and unloads in [order], interleaved with calls on the new one. *)
  let reopen order =
    let issues = ref [] in
    let note s = issues := s :: !issues in
    let e = (opener hw1).make () in
    let er = alloc e 4096 in
    let o = opener hw0 in
    let old = o.make () in
    (* old: A (object 1), M (object 2), img (image 1, entry), eimg (image 2) *)
    let a = alloc old 4096 in
    fill old a 'a';
    let m = D.map_peer old e er in
    let img = image old Hostmem.kit.binary in
    let eimg = image old Hostmem.empty_image in
    let en = entry img "nop" in
    submit old [ Fill { dst = handle old a; off = 0; len = 4096; byte = 0x11 }; Launch { entry = en; args = [] } ] 1;
    ok_wait old 1;
    submit old [ Launch { entry = en; args = [] } ] 2;
    ok_wait old 2;
    D.stop old ~fault:None;
    (* STOP-7: rig frees and unloads once the word reads the last value *)
    if D.signaled old <> 2 then note (sp "old word %d after stop, not 2" (D.signaled old));
    let nw = o.make () in
    let old_things =
      [
        ("free A", fun () -> D.free old a);
        ("free M", fun () -> D.free old m);
        ("unload img", fun () -> D.unload img);
        ("unload eimg", fun () -> D.unload eimg);
      ]
    in
    let run_old after =
      let l = match order with `Reverse -> List.rev old_things | _ -> old_things in
      List.iter
        (fun (what, f) ->
          (try f () with ex -> note (sp "old %s raises %s" what (Printexc.to_string ex)));
          after ())
        l
    in
    if order = `Early then run_old (fun () -> ());
    (* new: X (object 1), Y (object 2), img2 (image 1) and its entry e2 *)
    let x = alloc nw 4096 and y = alloc nw 8192 in
    let img2 = image nw Hostmem.kit.binary in
    let e2 = entry img2 "nop" in
    submit nw [ Launch { entry = e2; args = [] } ] 10;
    ok_wait nw 10;
    submit nw [ Launch { entry = e2; args = [] } ] 11;
    ok_wait nw 11;
    fill nw x 'x';
    fill nw y 'y';
    let base = free_space nw in
    if order <> `Early then run_old (fun () -> probe nw);
    (try Option.iter (D.free old) (D.facts old).own_word with ex -> note ("old free word raises " ^ Printexc.to_string ex));
    Thread.delay 0.2;
    probe nw;
    (* what the new device shows *)
    let w = D.signaled nw in
    if w <> 11 then note (sp "new word %d, not 11" w);
    (match bytes_of nw x 'x' with Ok () -> () | Error s -> note ("new X: " ^ s));
    (match bytes_of nw y 'y' with Ok () -> () | Error s -> note ("new Y: " ^ s));
    let now = free_space nw in
    if now <> base then note (sp "new free Device memory %d, was %d (%+d)" now base (now - base));
    (match
       submit nw [ Fill { dst = handle nw x; off = 0; len = 4096; byte = 0x22 }; Launch { entry = e2; args = [] } ] 12;
       wait nw 12
     with
    | Ok () -> ()
    | Error s -> note ("new launch of e2: " ^ s)
    | exception ex -> note ("new launch of e2: " ^ Printexc.to_string ex));
    (* close the new device as rig would *)
    D.stop nw ~fault:None;
    quiet (fun () -> D.free nw x);
    quiet (fun () -> D.free nw y);
    quiet (fun () -> D.unload img2);
    D.stop e ~fault:None;
    quiet (fun () -> D.free e er);
    Thread.delay 0.1;
    List.rev !issues
end

let () =
  let mismatches = ref 0 in
  List.iter
    (fun (expected, (module P : Package)) ->
      let module C = Check (P) in
      Printf.printf "%s (expected: %s)\n%!" P.name expected;
      let show label issues =
        Printf.printf "  %-12s %s\n%!" (label ^ ":")
          (match issues with [] -> "clean" | l -> String.concat "; " l);
        issues <> []
      in
      let run label f = try f () with ex -> [ "ABORTED: " ^ Printexc.to_string ex ] |> show label in
      let alone_bad = run "alone" (fun () -> show "alone" (C.alone ())) in
      let reopen_bad =
        List.map
          (fun (label, order) -> run label (fun () -> show label (C.reopen order)))
          [ ("interleaved", `Interleaved); ("reverse", `Reverse); ("early", `Early) ]
      in
      let bug = List.exists Fun.id reopen_bad in
      let verdict =
        match expected with
        | "STOP-8" when bug && not alone_bad -> "ok: STOP-8 bug shown, only after a second open"
        | "conforming" when (not bug) && not alone_bad -> "ok: clean"
        | _ ->
            incr mismatches;
            "MISMATCH"
      in
      Printf.printf "  => %s\n%!" verdict)
    Blindst8.drivers;
  Printf.printf "%d mismatch(es)\n" !mismatches;
  exit (if !mismatches = 0 then 0 else 1)
