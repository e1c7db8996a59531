(* fwcheck: for each fw-* driver of drivers/blindfw, shows its bug (broken
   drivers) or that it behaves (conforming ones), in a few seconds, by
   driving the driver as rig would: through its Package and its C queue,
   plus the device's own word (Blindfw.S.raw_word) to compare against.  It
   links the blindfw library directly and loads nothing of the certifier.
   Exit 0 iff every broken driver showed its bug and every conforming one
   behaved. *)

open Rig_edge
module Prim = Rig_edge_primitives

let mib = 1 lsl 20
let sentence = function
  | "MEM-2" ->
      "\"alloc d m n is n bytes of d's memory m, or None if d has none.\" (and free's \"free d r gives back r\")"
  | "TIME-1" -> "\"signaled d is the value in d's word, read with acquire order.\""
  | "LOCK-5" -> "\"Driver.locate, Driver.peer and Driver.signaled check nothing and must take no lock\""
  | "LOCK-6" -> "\"rig calls locate and peer at any time, and they must call nothing that may block or fault.\""
  | _ -> ""

exception Fail of string

let failf fmt = Printf.ksprintf (fun s -> raise (Fail s)) fmt

module Scenario (P : Blindfw.S) = struct
  module D = P.D

  let open1 () = match P.openers () with o :: _ -> o.make () | [] -> failf "no opener"

  let open2 () =
    match P.openers () with o0 :: o1 :: _ -> (o0.make (), o1.make ()) | _ -> failf "fewer than two openers"

  let stop d = D.stop d ~fault:None
  let alloc_exn d m n = match D.alloc d m n with Some r -> r | None -> failf "alloc %d answered None" n
  let handle d r = (D.locate d r).handle

  let submit ?(commit = true) d parts value =
    let q = (D.facts d).queue in
    let s = encode parts in
    let rec go k =
      match q.room s with
      | Room ->
          if not (q.submit s ~value) then failf "submit of %d failed" value;
          if commit && not (q.commit ()) then failf "commit failed"
      | Grow -> (
          if k >= 4 then failf "room answered RIG_GROW four times";
          match D.grow d with Grown -> go (k + 1) | Short n -> failf "grow: Short %d" n)
    in
    go 0

  let fill d r value = submit d [ Fill { dst = handle d r; off = 0; len = 4; byte = value land 0xff } ] value

  (* the device's word reaches v, within 5 s *)
  let wait_value d v =
    let deadline = Unix.gettimeofday () +. 5. in
    let rec go () =
      let w = P.raw_word d in
      if w >= v then true
      else if Unix.gettimeofday () > deadline then false
      else (
        P.wait_word d ~seen:w ~ms:100;
        go ())
    in
    go ()

  let wait_exn d v = if not (wait_value d v) then failf "the word never reached %d (reads %d)" v (P.raw_word d)

  let fill64 d =
    let rec go acc = match D.alloc d Device 65536 with Some r -> go (r :: acc) | None -> acc in
    go []

  let free_all d rs = List.iter (D.free d) rs

  let in_rig_lock f =
    let l = Prim.Lock.create ~rig:true "fwcheck.rig" in
    Prim.Lock.protect l (fun () -> try Ok (f ()) with e -> Error (Printexc.to_string e))

  let spin_entry d =
    match D.image d Hostmem.kit.binary with
    | Error e -> failf "image refused: %s" e
    | Ok i -> ( match D.entry i "spin" with Entry e -> e | _ -> failf "no spin entry")

  (* ---------------------------------------------- the scenarios *)

  (* Each answers (what happened, whether it is the bug [broken] or
     conforming behaviour [ok]). *)

  let free_leaks_mapped () =
    let d = open1 () in
    for _ = 1 to 3 do
      match D.alloc d Mapped mib with Some r -> D.free d r | None -> failf "alloc Mapped 1 MiB answered None"
    done;
    let r = D.alloc d Device mib in
    let u = P.used d in
    stop d;
    ( Printf.sprintf
        "3 x (alloc Mapped 1 MiB; free it): nothing live, yet %d of %d bytes still charged; alloc Device 1 MiB then answered %s"
        u Blindfw.capacity
        (if r = None then "None" else "a region"),
      r = None )

  let size_bins_or_pool ~ok () =
    let d = open1 () in
    let rs = fill64 d in
    let n1 = List.length rs in
    free_all d rs;
    let big = D.alloc d Device (2 * 65536) in
    let big_ok = big <> None in
    Option.iter (D.free d) big;
    if not ok then (
      stop d;
      ( Printf.sprintf "%d regions of 64 KiB until None, all freed; alloc Device 128 KiB then answered %s (%d bytes charged)"
          n1
          (if big_ok then "a region" else "None")
          (P.used d),
        not big_ok ))
    else begin
      let rs2 = fill64 d in
      let n2 = List.length rs2 in
      free_all d rs2;
      (* small regions: n bytes each, their own *)
      let a = alloc_exn d Device 4 and b = alloc_exn d Device 4 in
      let write r s = match (D.locate d r).reach with Some f -> f (Write { off = 0; from = s }) | None -> () in
      let read r = match (D.locate d r).reach with
        | Some f -> let by = Bytes.create 4 in f (Read { off = 0; into = by }); Bytes.to_string by
        | None -> "" in
      write a "AAAA";
      write b "BBBB";
      let sa = read a and sb = read b in
      let sizes = ((D.locate d a).size, (D.locate d b).size) in
      D.free d a;
      let c = alloc_exn d Device 4 in
      write c "CCCC";
      let sb' = read b in
      D.free d b;
      D.free d c;
      stop d;
      let good = big_ok && n1 = n2 && sa = "AAAA" && sb = "BBBB" && sb' = "BBBB" && sizes = (4, 4) in
      ( Printf.sprintf
          "%d x 64 KiB until None, freed; alloc 128 KiB: %s; again %d x 64 KiB; two alloc 4: sizes %d,%d, bytes %S %S; after free+realloc, the other reads %S"
          n1 (if big_ok then "a region" else "None") n2 (fst sizes) (snd sizes) sa sb sb',
        good )
    end

  let deferred ~ok () =
    let d = open1 () in
    let rs = fill64 d in
    let n = List.length rs in
    (match rs with r :: _ -> D.free d r | [] -> failf "no memory at all");
    let t0 = Unix.gettimeofday () in
    let again = D.alloc d Device 65536 in
    let ms = (Unix.gettimeofday () -. t0) *. 1000. in
    stop d;
    ( Printf.sprintf "%d x 64 KiB until None; free of one returned; alloc 64 KiB right after answered %s (in %.1f ms)" n
        (if again = None then "None" else "a region")
        ms,
      if ok then again <> None else again = None )

  let completions () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    fill d r 5;
    wait_exn d 5;
    let s = D.signaled d in
    stop d;
    (Printf.sprintf "submitted value 5, the word reads %d; signaled answered %d" (P.raw_word d) s, s <> 5)

  let last_submitted () =
    let d = open1 () in
    let e = spin_entry d in
    submit d [ Launch { entry = e; args = [ 300L ] } ] 1;
    let s = D.signaled d and w = P.raw_word d in
    wait_exn d 1;
    stop d;
    ( Printf.sprintf "value 1 = a 300 ms spin, just committed: the word read %d, signaled answered %d%s" w s
        (if s > w then " (ahead of the work)" else ""),
      s = 1 && w = 0 )

  (* A reader domain polls signaled while the word steps over 2^32
     boundaries (k*2^32 - 1, then k*2^32), for up to 3 s: the broken
     driver's scenario stops at the first value that went back. *)
  let halves ~ok () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    let stop_flag = Atomic.make false and back = Atomic.make 0 in
    let reader =
      Domain.spawn (fun () ->
          let last = ref 0 and ex = ref (0, 0) and reads = ref 0 in
          while not (Atomic.get stop_flag) do
            let v = D.signaled d in
            incr reads;
            if v < !last then (
              if Atomic.get back = 0 then ex := (!last, v);
              Atomic.incr back);
            last := v
          done;
          (!reads, !ex))
    in
    let deadline = Unix.gettimeofday () +. if ok then 1.5 else 3. in
    let k = ref 0 in
    (try
       while Unix.gettimeofday () < deadline && (ok || Atomic.get back = 0) do
         for _ = 1 to 100 do
           incr k;
           fill d r ((!k lsl 32) - 1);
           fill d r (!k lsl 32);
           wait_exn d (!k lsl 32)
         done
       done
     with e ->
       Atomic.set stop_flag true;
       ignore (Domain.join reader);
       raise e);
    Atomic.set stop_flag true;
    let reads, (a, b) = Domain.join reader in
    let back = Atomic.get back in
    stop d;
    ( Printf.sprintf "%d values stepping over 2^32 boundaries, %d reads of signaled from another domain: it went back %d times%s"
        (2 * !k) reads back
        (if back > 0 then Printf.sprintf " (e.g. 0x%x then 0x%x; the word's values only increase)" a b else ""),
      if ok then back = 0 else back > 0 )

  let raises_stopped () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    fill d r 7;
    wait_exn d 7;
    stop d;
    let w = P.raw_word d in
    let s = try Ok (D.signaled d) with e -> Error (Printexc.to_string e) in
    ( Printf.sprintf "after stop the word reads %d; signaled %s" w
        (match s with Ok v -> Printf.sprintf "answered %d" v | Error e -> "raised " ^ e),
      Result.is_error s )

  let checks_holds () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    fill d r 3;
    wait_exn d 3;
    let s = in_rig_lock (fun () -> D.signaled d) in
    stop d;
    ( Printf.sprintf "signaled called holding a lock of rig's (the word reads 3): %s"
        (match s with Ok v -> Printf.sprintf "answered %d" v | Error e -> "raised " ^ e),
      Result.is_error s )

  let validates_locked () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    let t = Thread.create (fun () -> P.hold_mu d ~ms:300) () in
    P.await_mu d;
    let t0 = Unix.gettimeofday () in
    ignore (D.locate d r);
    let ms = (Unix.gettimeofday () -. t0) *. 1000. in
    Thread.join t;
    D.free d r;
    let after = try ignore (D.locate d r); "answered" with e -> "raised " ^ Printexc.to_string e in
    stop d;
    ( Printf.sprintf
        "another thread held the device's mutex for 300 ms: locate blocked %.0f ms on it (and locate of a freed region %s)" ms
        after,
      ms >= 200. )

  let peer_trylock () =
    let d0, d1 = open2 () in
    let p1 = D.peer d0 d1 in
    let t = Thread.create (fun () -> Blindfw.hold_registry ~ms:300) () in
    Blindfw.await_registry ();
    let p2 = D.peer d0 d1 in
    Thread.join t;
    let p3 = D.peer d0 d1 in
    stop d0;
    stop d1;
    ( Printf.sprintf
        "peer d0 d1 = %b; while another thread held the device registry (as an open does), it took the registry's lock with a try and answered %b; after: %b"
        p1 p2 p3,
      p1 && not p2 )

  let locate_logs () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    let rd, wr = Unix.pipe ~cloexec:true () in
    Unix.set_nonblock wr;
    let buf = Bytes.make 4096 'x' in
    (try
       while true do
         ignore (Unix.single_write wr buf 0 4096)
       done
     with Unix.Unix_error ((EAGAIN | EWOULDBLOCK), _, _) -> ());
    (try
       while true do
         ignore (Unix.single_write wr buf 0 1)
       done
     with Unix.Unix_error ((EAGAIN | EWOULDBLOCK), _, _) -> ());
    Unix.clear_nonblock wr;
    flush stderr;
    let saved = Unix.dup ~cloexec:true Unix.stderr in
    Unix.dup2 wr Unix.stderr;
    let done_r, done_w = Unix.pipe ~cloexec:true () in
    let t =
      Thread.create
        (fun () ->
          ignore (D.locate d r);
          ignore (Unix.write_substring done_w "x" 0 1))
        ()
    in
    let ready, _, _ = Unix.select [ done_r ] [] [] 1.0 in
    let blocked = ready = [] in
    (* drain the pipe until locate returns *)
    let rec drain () =
      let rs, _, _ = Unix.select [ rd; done_r ] [] [] 5.0 in
      if List.mem done_r rs then ()
      else if rs = [] then failf "locate never returned"
      else (
        ignore (Unix.read rd buf 0 4096);
        drain ())
    in
    drain ();
    Thread.join t;
    Unix.dup2 saved Unix.stderr;
    List.iter Unix.close [ saved; rd; wr; done_r; done_w ];
    stop d;
    ( Printf.sprintf "with stderr a full pipe, locate %s"
        (if blocked then "had not returned after 1 s (blocked in its log write); it returned once the pipe was read"
         else "returned within 1 s"),
      blocked )

  let locate_stats () =
    let d0, d1 = open2 () in
    let r = alloc_exn d0 Device 64 in
    let res =
      in_rig_lock (fun () ->
          let a0 = Prim.activity () in
          let p = D.locate d0 r and pe = D.peer d0 d1 and pe' = D.peer d1 d0 in
          (p.size, pe, pe', Prim.activity () - a0))
    in
    stop d1;
    let after = D.peer d0 d1 in
    let n = P.locates d0 in
    stop d0;
    match res with
    | Error e -> ("locate/peer inside a lock of rig's raised " ^ e, false)
    | Ok (size, pe, pe', act) ->
        ( Printf.sprintf
            "inside a lock of rig's: locate size %d, peer %b/%b, locks taken or waits entered %d; %d locate counted; peer after d1's stop %b"
            size pe pe' act n after,
          size = 64 && pe && pe' && act = 0 && n >= 1 && after )

  (* The timeline as rig drives it, for every conforming driver: signaled
     follows the word, answers inside a lock of rig's, and after stop
     answers the last value given to submit (here one never committed);
     then rig frees the word. *)
  let timeline () =
    let d = open1 () in
    let r = alloc_exn d Device 64 in
    let mapped0 = P.word_mapped d in
    fill d r 5;
    wait_exn d 5;
    let s1 = D.signaled d in
    let s2 = in_rig_lock (fun () -> D.signaled d) in
    submit ~commit:false d [ Fill { dst = handle d r; off = 0; len = 4; byte = 9 } ] 9;
    stop d;
    let s3 = D.signaled d in
    D.free d r;
    (match (D.facts d).own_word with Some w -> D.free d w | None -> ());
    let mapped1 = P.word_mapped d in
    let good = s1 = 5 && s2 = Ok 5 && s3 = 9 in
    ( Printf.sprintf "signaled %d after value 5; inside a lock of rig's %s; after stop (9 submitted, not committed) %d%s" s1
        (match s2 with Ok v -> string_of_int v | Error e -> "raised " ^ e)
        s3
        (if mapped0 then Printf.sprintf "; word page mapped %b, after rig's free of the word %b" mapped0 mapped1 else ""),
      good && ((not mapped0) || not mapped1) )

  (* The scenario that shows a broken behaviour's bug: (what happened,
     whether the bug showed). *)
  let bug_scenario : Blindfw.behaviour -> unit -> string * bool =
    let open Blindfw in
    function
    | Free_leaks_mapped -> free_leaks_mapped
    | Free_size_bins -> size_bins_or_pool ~ok:false
    | Free_deferred -> deferred ~ok:false
    | Signaled_completions -> completions
    | Signaled_last_submitted -> last_submitted
    | Signaled_torn -> halves ~ok:false
    | Signaled_raises_stopped -> raises_stopped
    | Signaled_checks_holds -> checks_holds
    | Locate_validates_locked -> validates_locked
    | Peer_trylock -> peer_trylock
    | Locate_logs -> locate_logs
    | _ -> invalid_arg "bug_scenario: not a broken behaviour"

  (* The conforming driver's scenarios: (what happened, whether it behaved). *)
  let ok_scenarios : Blindfw.behaviour -> (unit -> string * bool) list =
    let open Blindfw in
    function
    | Ok_pool_classes -> [ size_bins_or_pool ~ok:true; timeline ]
    | Ok_free_deferred_drain -> [ deferred ~ok:true; size_bins_or_pool ~ok:true; timeline ]
    | Ok_word_mapping -> [ timeline ]
    | Ok_signaled_cached_ptr -> [ timeline ]
    | Ok_signaled_seqlock -> [ halves ~ok:true; timeline ]
    | Ok_locate_stats -> [ locate_stats; timeline ]
    | _ -> invalid_arg "ok_scenarios: not a conforming behaviour"
end

let () =
  let only = Array.to_list Sys.argv |> List.tl in
  let results =
    List.filter_map
      (fun (name, clause, what, m) ->
        if only <> [] && not (List.mem name only) then None
        else begin
          let module P = (val m : Blindfw.S) in
          let module S = Scenario (P) in
          let t0 = Unix.gettimeofday () in
          let module CP = (val Blindfw.control : Blindfw.S) in
          let module C = Scenario (CP) in
          let guard f = try f () with Fail s -> ("check failed: " ^ s, false) | e -> ("raised " ^ Printexc.to_string e, false) in
          let broken = clause <> "conforming" in
          let lines =
            if broken then
              (* the bug on the driver, and none on the control *)
              let l, shown = guard (S.bug_scenario P.behaviour) in
              let cl, cshown = guard (C.bug_scenario P.behaviour) in
              [ ("bug shown: " ^ l, shown); ("control (hostmem's driver) shows none: " ^ cl, not cshown) ]
            else List.map (fun sc -> let l, ok = guard sc in ("behaves: " ^ l, ok)) (S.ok_scenarios P.behaviour)
          in
          let pass = List.for_all snd lines in
          Printf.printf "%s %s (%s: %s) [%.2f s]\n" (if pass then "PASS" else "FAIL") name clause what
            (Unix.gettimeofday () -. t0);
          List.iter
            (fun (l, ok) -> Printf.printf "     %s%s\n" (if ok then "" else "NOT AS EXPECTED: ") l)
            lines;
          if broken then Printf.printf "     the document: %s %s\n" clause (sentence clause);
          print_newline ();
          Some pass
        end)
      Blindfw.modules
  in
  let n = List.length results and ok = List.length (List.filter Fun.id results) in
  Printf.printf "%d/%d drivers as expected\n" ok n;
  exit (if ok = n then 0 else 1)
