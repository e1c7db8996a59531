(* mccheck: drives every mc-* driver directly, calling it as the document
   says rig does (signals blocked around every call but locate, peer and
   signaled; no lock held; room before submit, grow after a RIG_GROW; stop
   with no call in flight, then free and unload once the word reads the last
   value), and runs one check per clause the broken drivers break.  Each
   driver gets every check: a broken driver must fail exactly the check of
   its clause, a conforming one none; the conforming ones also show the
   unusual thing they do.  One line per driver. *)

open Rig_edge
module Prim = Rig_edge_primitives

external pages : int -> nativeint = "mccheck_pages"
external peek : nativeint -> int -> int -> string = "mccheck_peek"

exception Bug of string

let bug fmt = Printf.ksprintf (fun s -> raise (Bug s)) fmt
let now () = Unix.gettimeofday ()
let ms_since t = int_of_float ((now () -. t) *. 1000.)

module Run (P : Rig_edge.Package) = struct
  module D = P.D

  (* as rig calls the driver: signals blocked, no lock held *)
  let call f = Prim.masked f
  let open_dev k = call (fun () -> (List.nth (P.openers ()) k).make ())
  let alloc d m n = call (fun () -> D.alloc d m n)

  let alloc_some d m n =
    match alloc d m n with Some r -> r | None -> bug "alloc of %d bytes answered None with memory free" n

  let free d r = call (fun () -> D.free d r)
  let handle d r = (D.locate d r).handle
  let size d r = (D.locate d r).size

  let reach d r =
    match (D.locate d r).reach with Some f -> f | None -> bug "a region the host cannot reach"

  let write d r off s = call (fun () -> reach d r (Write { off; from = s }))

  let read d r off n =
    let b = Bytes.create n in
    call (fun () -> reach d r (Read { off; into = b }));
    Bytes.to_string b

  let image d b = match call (fun () -> D.image d b) with Ok i -> i | Error e -> bug "image refused: %s" e

  let entry i f =
    match call (fun () -> D.entry i f) with Entry e -> e | _ -> bug "entry %s answered no Entry" f

  (* room, grow while it asks, submit, commit *)
  let submit d parts ~value =
    let q = (D.facts d).queue in
    let s = encode parts in
    let rec ask k =
      match call (fun () -> q.room s) with
      | Room -> ()
      | Grow when k > 0 -> (
          match call (fun () -> D.grow d) with Grown -> ask (k - 1) | Short n -> bug "grow Short %d" n)
      | Grow -> bug "room asks to grow after four growths"
    in
    ask 4;
    if not (call (fun () -> q.submit s ~value)) then bug "submit failed";
    if not (call (fun () -> q.commit ())) then bug "commit failed"

  (* as rig waits: read the word, sleep while it is unmoved *)
  let wait_for d v =
    let t = now () in
    let rec go () =
      let s = D.signaled d in
      if s < v then begin
        if ms_since t > 3000 then bug "the word reads %d 3 s after work of value %d" s v;
        call (fun () -> D.sleep d ~seen:s ~still_ms:200);
        go ()
      end
    in
    go ()

  (* close: stop, wait (bounded) for the last value, then free and unload
     dropping what they raise, as rig does after stop *)
  let close ?(fault = None) ?(last = 0) d ~regions ~images =
    call (fun () -> D.stop d ~fault);
    let t = now () in
    while D.signaled d <> last && ms_since t < 1000 do
      Thread.delay 0.002
    done;
    List.iter (fun r -> try free d r with _ -> ()) regions;
    List.iter (fun i -> try call (fun () -> D.unload i) with _ -> ()) images;
    match (D.facts d).own_word with Some w -> ( try free d w with _ -> ()) | None -> ()

  (* Allocate Device memory until the budget is spent. *)
  let fill d =
    let rec go n acc =
      if n < 4 then acc else match alloc d Device n with Some r -> go n (r :: acc) | None -> go (n / 2) acc
    in
    go (1 lsl 21) []

  (* ---------------------------------------------------------------- checks *)

  (* MEM-2: n bytes of d's memory m, none shared with another live region *)
  let mem2 () =
    let d = open_dev 0 in
    let live = ref [] in
    List.iter
      (fun m ->
        List.iter
          (fun n ->
            let r = alloc_some d m n in
            live := r :: !live;
            if size d r < n then bug "alloc of %d bytes made a region of %d" n (size d r);
            let s = String.init n (fun k -> Char.chr (k land 0xff)) in
            write d r 0 s;
            if read d r 0 n <> s then bug "a region of %d bytes does not keep them" n)
          [ 4; 12; 100; 4096 ])
      [ Device; Mapped; Pinned ];
    List.iter
      (fun m ->
        let a = alloc_some d m 100 in
        free d a;
        let b = alloc_some d m 100 and c = alloc_some d m 100 in
        live := b :: c :: !live;
        write d b 0 (String.make 100 'b');
        write d c 0 (String.make 100 'c');
        if read d b 0 100 <> String.make 100 'b' then bug "two live regions of 100 bytes share their bytes")
      [ Mapped; Pinned ];
    close d ~regions:!live ~images:[]

  (* MEM-4: peer says what map_peer does, before and after a stop *)
  let mem4 () =
    let d0 = open_dev 0 and d1 = open_dev 1 in
    let before = D.peer d0 d1 and before' = D.peer d1 d0 in
    let r = alloc_some d1 Device 64 in
    write d1 r 0 (String.make 64 'p');
    let m = call (fun () -> D.map_peer d0 d1 r) in
    let maps = read d0 m 0 64 = String.make 64 'p' in
    free d0 m;
    free d1 r;
    if maps <> before then bug "peer d0 d1 is %b, map_peer maps d1's Device memory: %b" before maps;
    close d1 ~regions:[] ~images:[];
    let after = D.peer d0 d1 and after' = D.peer d1 d0 in
    close d0 ~regions:[] ~images:[];
    if after <> before || after' <> before' then
      bug "peer was (%b, %b) while both ran, (%b, %b) once d1 was stopped" before before' after after'

  (* MEM-7: map_host maps the whole pages that hold the n bytes *)
  let mem7 () =
    let d = open_dev 0 in
    let p = pages 2 in
    let m = call (fun () -> D.map_host d p 100) in
    let sz = size d m in
    if sz < 4096 then begin
      close d ~regions:[ m ] ~images:[];
      bug "map_host of 100 bytes at a page made a mapping of %d bytes, not the page's 4096" sz
    end;
    submit d [ Fill { dst = handle d m; off = 4092; len = 4; byte = 0xab } ] ~value:1;
    wait_for d 1;
    let got = peek p 4092 4 in
    close d ~last:1 ~regions:[ m ] ~images:[];
    if got <> "\xab\xab\xab\xab" then bug "work's Fill of the page's last word did not reach the host memory"

  (* CODE-1: image takes b or is Error *)
  let code1 () =
    let d = open_dev 0 in
    let refused = Option.get P.kit.refused_binary in
    let r = try call (fun () -> D.image d refused) with e -> bug "image of a binary it refuses raised %s" (Printexc.to_string e) in
    let i = image d P.kit.binary in
    (match r with Ok i' -> call (fun () -> D.unload i') | Error _ -> ());
    close d ~regions:[] ~images:[ i ];
    match r with Ok _ -> bug "took the kit's refused binary" | Error _ -> ()

  (* CODE-6: an entry after a prepare answers as entry would itself *)
  let code6 () =
    let d = open_dev 0 in
    let b, f = (Option.get P.kit.scratch) 65536 in
    let i = image d b in
    let filler = fill d in
    call (fun () -> D.prepare i f);
    List.iter (free d) filler;
    (* rig asks again after each of its three rounds *)
    let rec ask k =
      match call (fun () -> D.entry i f) with
      | Entry _ -> true
      | No_memory _ when k > 1 -> ask (k - 1)
      | No_memory n -> (
          close d ~regions:[] ~images:[ i ];
          bug "entry answers No_memory %d four times with the memory free (a prepare met it full)" n)
      | Absent -> bug "entry answers Absent"
    in
    ignore (ask 4);
    close d ~regions:[] ~images:[ i ]

  (* QUEUE-3: after Short n, what grow made stays: n bytes more suffice *)
  let queue3 () =
    let d = open_dev 0 in
    let spare = alloc_some d Device 65536 in
    let target = alloc_some d Device 4096 in
    let gap = alloc_some d Device 4096 in
    let filler = fill d in
    free d gap;
    let parts = List.init 100 (fun k -> Fill { dst = handle d target; off = 4 * k; len = 4; byte = k }) in
    let s = encode parts in
    let q = (D.facts d).queue in
    let regions = ref (spare :: target :: filler) in
    let fail fmt =
      Printf.ksprintf
        (fun m ->
          close d ~regions:!regions ~images:[];
          raise (Bug m))
        fmt
    in
    (match call (fun () -> q.room s) with Room -> fail "room held 101 slots at once: nothing to judge" | Grow -> ());
    let n = match call (fun () -> D.grow d) with Short n -> n | Grown -> fail "grow answered Grown: nothing to judge" in
    (* meanwhile other allocations take whatever memory is free (what grow
       made must not be among it), then rig's round sets exactly n bytes
       free *)
    regions := fill d @ !regions;
    free d spare;
    regions := List.filter (fun r -> r != spare) !regions;
    let keep = alloc_some d Device (65536 - n) in
    regions := keep :: !regions;
    let rec ask k =
      match call (fun () -> q.room s) with
      | Room -> ()
      | Grow when k > 0 -> (
          match call (fun () -> D.grow d) with
          | Grown -> ask (k - 1)
          | Short n' ->
              fail "grow answered Short %d; with the memory then free taken and %d bytes set free, it is Short %d again" n
                n n')
      | Grow -> fail "room asks to grow after four growths"
    in
    ask 4;
    if not (call (fun () -> q.submit s ~value:1)) then fail "submit failed";
    if not (call (fun () -> q.commit ())) then fail "commit failed";
    wait_for d 1;
    close d ~last:1 ~regions:!regions ~images:[]

  (* TIME-1: signaled is the value in the word, without a sleep *)
  let time1 () =
    let d = open_dev 0 in
    let r = alloc_some d Device 64 in
    submit d [ Fill { dst = handle d r; off = 0; len = 64; byte = 0x11 } ] ~value:1;
    let t = now () in
    while read d r 60 4 <> "\x11\x11\x11\x11" && ms_since t < 1000 do
      Thread.delay 0.001
    done;
    let t = now () in
    while D.signaled d < 1 && ms_since t < 1000 do
      Thread.delay 0.002
    done;
    let s = D.signaled d in
    if s < 1 then begin
      (* rig would sleep: let the driver see the word, then close *)
      wait_for d 1;
      close d ~last:1 ~regions:[ r ] ~images:[];
      bug "signaled reads %d a second after the work of value 1 ended (a sleep then reads %d)" s (D.signaled d)
    end;
    close d ~last:1 ~regions:[ r ] ~images:[]

  (* TIME-3: sleep returns at once when the word already differs *)
  let time3 () =
    let d = open_dev 0 in
    let r = alloc_some d Device 64 in
    submit d [ Fill { dst = handle d r; off = 0; len = 64; byte = 1 } ] ~value:1;
    wait_for d 1;
    let t = now () in
    call (fun () -> D.sleep d ~seen:0 ~still_ms:1000);
    let took = ms_since t in
    close d ~last:1 ~regions:[ r ] ~images:[];
    if took > 100 then bug "sleep ~seen:0 with the word at 1 returned after %d ms" took

  (* TIME-5: Fault once faulted, at every later sleep *)
  let time5 () =
    let d = open_dev 0 in
    let i = image d P.kit.binary in
    let e = entry i (Option.get P.kit.fault) in
    submit d [ Launch { entry = e; args = [] } ] ~value:1;
    let t = now () in
    let rec first () =
      if ms_since t > 2000 then bug "no Fault in 2 s after a launch of the kit's fault function";
      match call (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:200) with
      | () -> first ()
      | exception D.Fault why -> why
    in
    let why = first () in
    let again k =
      match call (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:200) with
      | () -> Some k
      | exception D.Fault _ -> None
    in
    let missed = List.filter_map again [ 2; 3 ] in
    close d ~fault:(Some why) ~last:1 ~regions:[] ~images:[ i ];
    match missed with [] -> () | k :: _ -> bug "sleep number %d after the device faulted returned without Fault" k

  (* STOP-5: stop releases nothing rig made, the word stays until rig frees it *)
  let stop5 () =
    let d = open_dev 0 in
    let r = alloc_some d Device 64 in
    List.iter (fun v -> submit d [ Fill { dst = handle d r; off = 0; len = 64; byte = v } ] ~value:v) [ 1; 2; 3 ];
    wait_for d 3;
    call (fun () -> D.stop d ~fault:None);
    let t = now () in
    while D.signaled d <> 3 && ms_since t < 1000 do
      Thread.delay 0.002
    done;
    let at_stop = D.signaled d in
    (* an open of its name: a new device of the same hardware *)
    let d2 = open_dev 0 in
    let after_open = D.signaled d in
    let freed = try free d r; None with e -> Some (Printexc.to_string e) in
    (match (D.facts d).own_word with Some w -> ( try free d w with _ -> ()) | None -> ());
    close d2 ~regions:[] ~images:[];
    if at_stop <> 3 then bug "the word reads %d after stop, not 3" at_stop;
    if after_open <> 3 then bug "the stopped device's word reads %d once a new device opened, before rig freed it" after_open;
    match freed with
    | Some e -> bug "rig's free of a region after stop raised %s: stop released it" e
    | None -> ()

  let checks =
    [
      ("MEM-2", mem2);
      ("MEM-4", mem4);
      ("MEM-7", mem7);
      ("CODE-1", code1);
      ("CODE-6", code6);
      ("QUEUE-3", queue3);
      ("TIME-1", time1);
      ("TIME-3", time3);
      ("TIME-5", time5);
      ("STOP-5", stop5);
    ]

  (* ------------------------------------- what the conforming ones show *)

  let feature = function
    | "mc-ok-size-classes" ->
        let d = open_dev 0 in
        let a = alloc_some d Mapped 100 in
        let h = handle d a in
        free d a;
        let b = alloc_some d Mapped 100 and c = alloc_some d Mapped 100 in
        let reused = handle d b = h and distinct = handle d b <> handle d c in
        close d ~regions:[ b; c ] ~images:[];
        Printf.sprintf "a freed 100-byte Mapped buffer came back for the next alloc (%b), live ones distinct (%b)" reused
          distinct
    | "mc-ok-sleep-tick" ->
        let d = open_dev 0 in
        let t = now () in
        call (fun () -> D.sleep d ~seen:0 ~still_ms:1000);
        let took = ms_since t in
        close d ~regions:[] ~images:[];
        Printf.sprintf "sleep ~still_ms:1000 on an unmoved word returned after %d ms (its own timer)" took
    | "mc-ok-image-checks-scratch" ->
        let d = open_dev 0 in
        let b, _ = (Option.get P.kit.scratch) ((4 lsl 20) + 4) in
        let r = call (fun () -> D.image d b) in
        close d ~regions:[] ~images:[];
        (match r with
        | Error e -> Printf.sprintf "image with scratch beyond the device: Error %S" e
        | Ok _ -> "image with scratch beyond the device: taken (unexpected)")
    | "mc-ok-word-pool" ->
        let d = open_dev 0 in
        let r = alloc_some d Device 64 in
        submit d [ Fill { dst = handle d r; off = 0; len = 64; byte = 7 } ] ~value:5;
        wait_for d 5;
        call (fun () -> D.stop d ~fault:None);
        let d2 = open_dev 0 in
        let kept = D.signaled d in
        free d r;
        (match (D.facts d).own_word with Some w -> free d w | None -> ());
        let d3 = open_dev 1 in
        let fresh = D.signaled d3 in
        close d2 ~regions:[] ~images:[];
        close d3 ~regions:[] ~images:[];
        Printf.sprintf "pooled word read %d after a new open, until rig freed it; the next open's word starts at %d"
          kept fresh
    | _ -> ""
end

let () =
  let t0 = now () in
  let all_ok = ref true in
  List.iter
    (fun (name, clause, _what, pkg) ->
      let module P = (val pkg : Rig_edge.Package) in
      let module R = Run (P) in
      let failed =
        List.filter_map
          (fun (c, check) ->
            match check () with
            | () -> None
            | exception Bug m -> Some (c, m)
            | exception e -> Some (c, "raised " ^ Printexc.to_string e))
          R.checks
      in
      let expected = if clause = "conforming" then [] else [ clause ] in
      let ok = List.map fst failed = expected in
      if not ok then all_ok := false;
      let shown =
        match failed with
        | [] -> "no check fails. " ^ (try R.feature name with Bug m -> "feature: " ^ m | e -> Printexc.to_string e)
        | l -> String.concat "; " (List.map (fun (c, m) -> Printf.sprintf "%s: %s" c m) l)
      in
      Printf.printf "%-27s %-10s %s  %s\n%!" name clause (if ok then "AS-EXPECTED" else "UNEXPECTED") shown)
    Blindmc.packages;
  Printf.printf "%d drivers, %d checks each, %.1f s: %s\n" (List.length Blindmc.packages) 10 (now () -. t0)
    (if !all_ok then "every broken driver fails exactly its clause, every conforming one none" else "SOME UNEXPECTED");
  exit (if !all_ok then 0 else 1)
