(* fxcheck: drives every fx-* driver of blindfx directly (not through the
   certifier) and prints, per driver, what each of its checks saw:

   - mem      : Device (and a bounded Mapped) memory filled to None with one
                size, all freed, then at once filled again, then other sizes,
                twice in opposite orders; every count must equal a fresh
                device's (memory free gave back comes back at once, MEM-2);
   - timeline : 150 submissions (a Fill each, a spin every tenth); signaled,
                read as fast as it answers, never goes back and never shows a
                value whose region is not filled yet; it reaches 150; stop,
                the regions and the word are freed (TIME-1);
   - uncommitted: a submission given to submit but not committed: signaled
                must still read 0 (TIME-1);
   - last-part: a submission whose last part fills 16 MiB: once signaled shows
                its value the last byte must be filled and the device idle
                (TIME-1);
   - quiet    : locate, peer and signaled take no counted lock and enter no
                wait (Prim.activity), and 300 rounds of them return within 2 s
                with stdout and stderr full pipes, on devices opened while they
                are (LOCK-5, LOCK-6);
   - peer-held: peer's time while another thread holds the driver's peer
                table lock for 0.5 s (LOCK-5).

   stderr is a pipe the check drains (the logging drivers write there); the
   check's own report goes to a copy of the original stdout. *)

open Rig_edge
module Prim = Rig_edge_primitives

let out = Unix.out_channel_of_descr (Unix.dup Unix.stdout)
let say fmt = Printf.ksprintf (fun s -> output_string out s; flush out) fmt

(* --------------------------------------------------- a drained stderr *)

let sink_lines = Atomic.make 0

let sink_fd =
  let r, w = Unix.pipe ~cloexec:true () in
  ignore
    (Thread.create
       (fun () ->
         let buf = Bytes.create 65536 in
         let rec go () =
           match Unix.read r buf 0 65536 with
           | 0 -> ()
           | n ->
               for i = 0 to n - 1 do
                 if Bytes.get buf i = '\n' then Atomic.incr sink_lines
               done;
               go ()
           | exception Unix.Unix_error (Unix.EINTR, _, _) -> go ()
         in
         go ())
       ());
  w

let saved_stdout = Unix.dup ~cloexec:true Unix.stdout
let () = Unix.dup2 ~cloexec:false sink_fd Unix.stderr

(* A pipe whose buffer is full: its read end and its (blocking) write end. *)
let full_pipe () =
  let r, w = Unix.pipe ~cloexec:true () in
  Unix.set_nonblock w;
  let chunk = Bytes.make 4096 'x' in
  (try
     while true do
       ignore (Unix.write w chunk 0 4096)
     done
   with Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) -> (
     try
       while true do
         ignore (Unix.write w chunk 0 1)
       done
     with Unix.Unix_error _ -> ()));
  Unix.clear_nonblock w;
  (r, w)

let drain r =
  Unix.set_nonblock r;
  let buf = Bytes.create 65536 in
  try
    while true do
      if Unix.read r buf 0 65536 = 0 then raise Exit
    done
  with _ -> ()

(* -------------------------------------------------------------- tools *)

let now () = Unix.gettimeofday ()

let with_timeout secs f =
  let finished = Atomic.make false in
  let t = Thread.create (fun () -> (try f () with _ -> ()); Atomic.set finished true) () in
  let t0 = now () in
  while (not (Atomic.get finished)) && now () -. t0 < secs do
    Thread.delay 0.01
  done;
  (Atomic.get finished, finished, t)

module Run (M : Blindfx.FX) = struct
  module D = M.D

  let opened = ref []

  let dev k =
    let d = (List.nth (M.openers ()) k).make () in
    opened := d :: !opened;
    d

  let q d = (D.facts d).queue

  let submit d parts v =
    let s = encode parts in
    let rec room n =
      match (q d).room s with
      | Room -> ()
      | Grow when n < 4 -> ( match D.grow d with Grown -> room (n + 1) | Short k -> failwith (Printf.sprintf "grow: Short %d" k))
      | Grow -> failwith "room: Grow four times"
    in
    room 0;
    if not ((q d).submit s ~value:v) then failwith "submit failed";
    s

  let commit d = if not ((q d).commit ()) then failwith "commit failed"
  let handle d r = (D.locate d r).handle

  let read d r off n =
    match (D.locate d r).reach with
    | Some f ->
        let b = Bytes.create n in
        f (Read { off; into = b });
        Bytes.to_string b
    | None -> failwith "no reach"

  let wait_value d v secs =
    let t0 = now () in
    while D.signaled d < v && now () -. t0 < secs do
      (try D.sleep d ~seen:(D.signaled d) ~still_ms:50 with _ -> ())
    done;
    D.signaled d >= v

  let close d ~last =
    D.stop d ~fault:None;
    ignore (wait_value d last 5.);
    match (D.facts d).own_word with Some w -> D.free d w | None -> ()

  (* ----------------------------------------------------------- mem *)

  let fill d m size ~cap_bytes =
    let rec go acc n total =
      if total + size > cap_bytes then (acc, n, true)
      else match D.alloc d m size with Some r -> go (r :: acc) (n + 1) (total + size) | None -> (acc, n, false)
    in
    go [] 0 0

  let count d m size ~cap_bytes =
    let rs, n, capped = fill d m size ~cap_bytes in
    List.iter (D.free d) rs;
    (n, capped)

  let mem () =
    let sizes = [ 65536; 64; 1000; 1 lsl 20; 2 lsl 20; 4096 ] in
    let bad = ref [] in
    let kinds =
      (* Mapped too where it is bounded (below 64 MiB) *)
      let d = dev 0 in
      let _, capped = count d Mapped 65536 ~cap_bytes:(64 lsl 20) in
      close d ~last:0;
      if capped then [ (Device, "Device") ] else [ (Device, "Device"); (Mapped, "Mapped") ]
    in
    let summary = Buffer.create 80 in
    List.iter
      (fun (m, mname) ->
        let cap_bytes = 64 lsl 20 in
        let fresh =
          List.map
            (fun s ->
              let d = dev 1 in
              let n, _ = count d m s ~cap_bytes in
              close d ~last:0;
              (s, n))
            sizes
        in
        let d = dev 0 in
        let first = List.map (fun s -> (s, fst (count d m s ~cap_bytes))) sizes in
        let second = List.map (fun s -> (s, fst (count d m s ~cap_bytes))) (List.rev sizes) in
        List.iter
          (fun (s, n) ->
            let n1 = List.assoc s first and n2 = List.assoc s second in
            if n1 <> n || n2 <> n then
              bad := Printf.sprintf "%s %d B: fresh %d, after free %d then %d" mname s n n1 n2 :: !bad)
          fresh;
        Printf.bprintf summary "%s 64K x%d 64B x%d 2M x%d; " mname (List.assoc 65536 fresh) (List.assoc 64 fresh)
          (List.assoc (2 lsl 20) fresh);
        close d ~last:0)
      kinds;
    match !bad with
    | [] -> (true, Printf.sprintf "given back at once (%s)" (Buffer.contents summary))
    | l -> (false, "NOT given back: " ^ String.concat "; " (List.rev l))

  (* ------------------------------------------------------ timeline *)

  let timeline () =
    let d = dev 0 in
    let n = 150 in
    let regions = Array.init (n + 1) (fun _ -> Option.get (D.alloc d Device 64)) in
    let img = match D.image d Hostmem.kit.binary with Ok i -> i | Error e -> failwith e in
    let spin = match D.entry img "spin" with Entry e -> e | _ -> failwith "no spin" in
    let back = ref 0 and ahead = ref 0 and reads = ref 0 and prev = ref 0 and first_bad = ref "" in
    let look () =
      let w = D.signaled d in
      incr reads;
      if w < !prev then (
        incr back;
        if !first_bad = "" then first_bad := Printf.sprintf "went back from %d to %d" !prev w);
      prev := max !prev w;
      if w > 0 then
        if w > n || read d regions.(w) 0 64 <> String.make 64 '\xaa' then (
          incr ahead;
          if !first_bad = "" then first_bad := Printf.sprintf "showed %d before its Fill ran" w)
    in
    for v = 1 to n do
      let fill = Fill { dst = handle d regions.(v); off = 0; len = 64; byte = 0xaa } in
      let parts = if v mod 10 = 0 then [ Launch { entry = spin; args = [ 5L ] }; fill ] else [ fill ] in
      ignore (submit d parts v);
      commit d;
      look ()
    done;
    let t0 = now () in
    while D.signaled d < n && now () -. t0 < 5. do
      look ()
    done;
    look ();
    let reached = D.signaled d = n in
    close d ~last:n;
    Array.iter (D.free d) regions;
    D.unload img;
    let ok = reached && !back = 0 && !ahead = 0 in
    ( ok,
      Printf.sprintf "%s (%d reads%s%s)"
        (if ok then "signaled = completed work, never back" else "BAD: " ^ !first_bad)
        !reads
        (if reached then "" else ", never reached 150")
        (if !back + !ahead > 0 then Printf.sprintf ", %d back, %d ahead" !back !ahead else "") )

  (* --------------------------------------------------- uncommitted *)

  let uncommitted () =
    let d = dev 0 in
    let r = Option.get (D.alloc d Device 64) in
    ignore (submit d [ Fill { dst = handle d r; off = 0; len = 64; byte = 1 } ] 1);
    let w = D.signaled d in
    commit d;
    ignore (wait_value d 1 2.);
    close d ~last:1;
    D.free d r;
    if w = 0 then (true, "0 while submitted, not committed")
    else (false, Printf.sprintf "BAD: %d while submitted, not committed (nothing ran)" w)

  (* ----------------------------------------------------- last part *)

  let last_part () =
    let d = dev 0 in
    let big = 16 lsl 20 in
    let r = Option.get (D.alloc d Pinned big) in
    let img = match D.image d Hostmem.kit.binary with Ok i -> i | Error e -> failwith e in
    let spin = match D.entry img "spin" with Entry e -> e | _ -> failwith "no spin" in
    let bad = ref [] in
    (* 1: the last part is a 300 ms spin *)
    ignore (submit d [ Fill { dst = handle d r; off = 0; len = 64; byte = 7 }; Launch { entry = spin; args = [ 300L ] } ] 1);
    commit d;
    let t0 = now () in
    while D.signaled d < 1 && now () -. t0 < 3. do () done;
    let dt = now () -. t0 in
    if M.busy d then bad := Printf.sprintf "1 after %.0f ms while its 300 ms spin ran" (dt *. 1000.) :: !bad;
    (* 2: the last part fills 16 MiB *)
    ignore (submit d [ Launch { entry = spin; args = [ 50L ] }; Fill { dst = handle d r; off = 0; len = big; byte = 0xcd } ] 2);
    commit d;
    let t0 = now () in
    while D.signaled d < 2 && now () -. t0 < 3. do () done;
    let t_seen = now () -. t0 in
    let last = read d r (big - 1) 1 in
    if Sys.getenv_opt "FXDEBUG" <> None then
      say "  [last-part 2: signaled %d after %.2f ms, busy %b, last byte %02x]\n" (D.signaled d) (t_seen *. 1000.) (M.busy d) (Char.code last.[0]);
    if last <> "\xcd" then bad := "2 before the last byte of its 16 MiB Fill" :: !bad;
    ignore (wait_value d 2 3.);
    close d ~last:2;
    D.free d r;
    D.unload img;
    match !bad with
    | [] -> (true, "value shown once its last part is done")
    | l -> (false, "BAD: signaled showed " ^ String.concat "; " (List.rev l))

  (* --------------------------------------------------------- quiet *)

  let quiet () =
    (* counted locks and waits *)
    let d0 = dev 0 and d1 = dev 1 in
    let r = Option.get (D.alloc d0 Device 64) in
    let a0 = Prim.activity () in
    for _ = 1 to 100 do
      ignore (D.locate d0 r);
      ignore (D.peer d0 d1);
      ignore (D.signaled d0)
    done;
    let act = Prim.activity () - a0 in
    D.free d0 r;
    close d0 ~last:0;
    close d1 ~last:0;
    (* full pipes *)
    let r1, w1 = full_pipe () and r2, w2 = full_pipe () in
    Unix.dup2 ~cloexec:false w1 Unix.stdout;
    Unix.dup2 ~cloexec:false w2 Unix.stderr;
    let d0 = dev 0 and d1 = dev 1 in
    let r = Option.get (D.alloc d0 Device 64) in
    let t0 = now () in
    let finished, done_, th =
      with_timeout 2. (fun () ->
          for _ = 1 to 300 do
            ignore (D.locate d0 r);
            ignore (D.peer d0 d1);
            ignore (D.signaled d0)
          done)
    in
    let dt = now () -. t0 in
    (* unblock whoever waits on the pipes, then give the fds back *)
    let t1 = now () in
    while (not (Atomic.get done_)) && now () -. t1 < 10. do
      drain r1;
      drain r2;
      Thread.delay 0.01
    done;
    if Atomic.get done_ then Thread.join th;
    Unix.dup2 ~cloexec:false saved_stdout Unix.stdout;
    Unix.dup2 ~cloexec:false sink_fd Unix.stderr;
    List.iter Unix.close [ r1; w1; r2; w2 ];
    D.free d0 r;
    close d0 ~last:0;
    close d1 ~last:0;
    let ok = act = 0 && finished in
    ( ok,
      Printf.sprintf "%s%s"
        (if act = 0 then "no lock, no wait" else Printf.sprintf "BAD: %d counted lock takes/waits in 100 rounds" act)
        (if finished then Printf.sprintf ", 300 rounds on full pipes in %.1f ms" (dt *. 1000.)
         else ", BAD: blocked on full stdout/stderr pipes (not done in 2 s)") )

  (* ----------------------------------------------------- peer held *)

  let peer_held () =
    let d0 = dev 0 and d1 = dev 1 in
    let holder = Thread.create (fun () -> M.hold_peer_table 0.5) () in
    Thread.delay 0.05;
    let t0 = now () in
    let p = D.peer d0 d1 in
    let dt = now () -. t0 in
    Thread.join holder;
    close d0 ~last:0;
    close d1 ~last:0;
    if dt < 0.1 then (true, Printf.sprintf "peer = %b in %.2f ms" p (dt *. 1000.))
    else (false, Printf.sprintf "BAD: peer waited %.0f ms for the table's lock" (dt *. 1000.))

  let run () =
    let checks =
      [ ("mem", mem); ("timeline", timeline); ("uncommitted", uncommitted); ("last-part", last_part); ("quiet", quiet); ("peer-held", peer_held) ]
    in
    List.map
      (fun (n, f) ->
        let ok, what = try f () with e -> (false, "BAD: raised " ^ Printexc.to_string e) in
        (n, ok, what))
      checks
end

let () =
  let t_all = now () in
  let failures = ref 0 in
  List.iter
    (fun (name, clause, (module M : Blindfx.FX)) ->
      let module R = Run (M) in
      let t0 = now () in
      let results = R.run () in
      let bad = List.filter (fun (_, ok, _) -> not ok) results in
      let conforming = clause = "conforming" in
      let extra =
        match M.variant with
        | Blindfx.Ok_log_ring -> Printf.sprintf " [ring: %d records]" (Blindfx.ring_count ())
        | Ok_log_nonblock ->
            let w, dr = Blindfx.nonblock_stats () in
            Printf.sprintf " [log: %d lines written, %d dropped]" w dr
        | Ok_log_thread ->
            Thread.delay 0.1;
            let w, dr = Blindfx.thread_stats () in
            Printf.sprintf " [log thread: %d lines written, %d dropped]" w dr
        | _ -> ""
      in
      let verdict =
        match (conforming, bad) with
        | true, [] -> "behaves"
        | true, _ -> "UNEXPECTED: a conforming driver failed"
        | false, [] -> "UNEXPECTED: bug not shown"
        | false, l -> Printf.sprintf "bug shown (%s)" (String.concat ", " (List.map (fun (n, _, _) -> n) l))
      in
      if String.length verdict > 10 && String.sub verdict 0 10 = "UNEXPECTED" then incr failures;
      say "%-24s %-10s %s (%.1f s)%s\n" name clause verdict (now () -. t0) extra;
      List.iter (fun (n, ok, what) -> say "    %-12s %s %s\n" n (if ok then "ok " else "BAD") what) results)
    Blindfx.fx;
  say "stderr got %d log lines; %d unexpected; %.1f s in all\n" (Atomic.get sink_lines) !failures (now () -. t_all);
  exit (if !failures = 0 then 0 else 1)
