(* qscheck: calls every qs-* driver directly through its Rig_edge interface,
   in the sequences that show each twist, and says per driver and per
   clause what it saw: "BUG (clause)" where the driver breaks it, "ok"
   where the sequence shows nothing wrong.  Every driver runs every
   sequence, so that a broken driver shows its one clause and the others
   none.  Calls are made as rig makes them: on threads that hold no lock,
   with signals masked (Rig_edge_primitives.masked). *)

open Rig_edge
module Prim = Rig_edge_primitives

let now () = Unix.gettimeofday ()
let ms_since t = int_of_float ((now () -. t) *. 1000.)
let call f = Prim.masked f

(* A thread that runs jobs for the caller, so that room and grow run on the
   thread of one submission while others run elsewhere. *)
module Worker = struct
  type t = (unit -> unit) option Event.channel

  let create () : t =
    let ch = Event.new_channel () in
    let rec loop () =
      match Event.sync (Event.receive ch) with
      | None -> ()
      | Some f ->
          f ();
          loop ()
    in
    ignore (Thread.create loop ());
    ch

  let run (w : t) f =
    let back = Event.new_channel () in
    Event.sync (Event.send w (Some (fun () -> Event.sync (Event.send back (try Ok (f ()) with e -> Error e)))));
    match Event.sync (Event.receive back) with Ok x -> x | Error e -> raise e

  let quit (w : t) = Event.sync (Event.send w None)
end

type verdict = Ok_ of string | Bug of string | Na of string

let results : (string * string * verdict) list ref = ref []
let record drv clause v = results := (drv, clause, v) :: !results

let show = function
  | Ok_ s -> "ok: " ^ s
  | Bug s -> "BUG: " ^ s
  | Na s -> "n/a: " ^ s

let expected : (string * string option) list =
  [
    ("qs-grow-publishes", Some "QUEUE-1");
    ("qs-short-drops", Some "QUEUE-3");
    ("qs-short-orphans", Some "QUEUE-3");
    ("qs-sleep-holds-lock", Some "TIME-6");
    ("qs-commit-busy-in-sleep", Some "TIME-6");
    ("qs-stop-flushes-open", Some "STOP-4");
    ("qs-stop-frees-rig", Some "STOP-5");
    ("qs-fence-gone", Some "STOP-5");
    ("qs-grow-generous", None);
    ("qs-short-halves", None);
    ("qs-stop-lazy", None);
    ("qs-sleep-early", None);
  ]

module Check (Q : Blindqs.QS) = struct
  module D = Q.D

  let drv = Q.name

  let open_dev () =
    match call Q.openers with
    | o :: _ -> call o.make
    | [] -> failwith "no opener"

  let handle d r = (D.locate d r).handle
  let q d = (D.facts d).queue
  let alloc d n = match call (fun () -> D.alloc d Device n) with Some r -> r | None -> failwith "alloc: no memory"

  let write d r s =
    match (D.locate d r).reach with Some f -> call (fun () -> f (Write { off = 0; from = s })) | None -> ()

  let read d r n =
    match (D.locate d r).reach with
    | Some f ->
        let b = Bytes.create n in
        call (fun () -> f (Read { off = 0; into = b }));
        Bytes.to_string b
    | None -> failwith "no reach"

  (* A submission of n Fill parts, each of 4 bytes of r. *)
  let fills d r n = encode (List.init n (fun k -> Fill { dst = handle d r; off = 4 * (k mod 16); len = 4; byte = k land 0xff }))

  let room d s = call (fun () -> (q d).room s)
  let submit d s v = call (fun () -> (q d).submit s ~value:v)
  let commit d = call (fun () -> (q d).commit ())
  let grow d = call (fun () -> D.grow d)
  let signaled d = D.signaled d
  let room_s = function Room -> "RIG_ROOM" | Grow -> "RIG_GROW"
  let grow_s = function Grown -> "Grown" | Short n -> Printf.sprintf "Short %d" n

  (* Waits as rig does, sleep after sleep, until the word shows v. *)
  let wait_value d v =
    let t0 = now () in
    let rec go () =
      let w = signaled d in
      if w <> v && now () -. t0 < 5. then begin
        (try call (fun () -> D.sleep d ~seen:w ~still_ms:100) with D.Fault _ -> ());
        go ()
      end
    in
    go ()

  let close d = call (fun () -> D.stop d ~fault:None)

  let free_word d = match (D.facts d).own_word with Some w -> call (fun () -> D.free d w) | None -> ()

  (* Fills the device's budget: what stays free is under 4 bytes. *)
  let fill_budget d =
    let held = ref [] in
    List.iter
      (fun size ->
        let rec go () =
          match call (fun () -> D.alloc d Device size) with
          | Some r ->
              held := r :: !held;
              go ()
          | None -> ()
        in
        go ())
      [ 1 lsl 20; 1 lsl 16; 4096; 256; 4 ];
    !held

  (* ------------------------------------------------------------ QUEUE-1 *)

  (* The main thread holds 31 of the layer's 32 units (an encoded,
     uncommitted submission).  Thread A's room of 10 parts answers RIG_GROW,
     A's grow answers Grown; then, before A's next room, a room of 3 parts
     on thread B must still answer RIG_GROW: the growth is for A's next room
     and changes nothing the C functions read. *)
  let queue1 () =
    let d = open_dev () in
    let r = alloc d 64 in
    let a = Worker.create () and b = Worker.create () in
    let v =
      if room d (fills d r 30) <> Room || not (submit d (fills d r 30) 1) then Na "the first submission got no room"
      else
        let first = Worker.run a (fun () -> room d (fills d r 10)) in
        if first <> Grow then Na ("A's room answered " ^ room_s first)
        else
          let before = Q.avail d in
          let g = Worker.run a (fun () -> grow d) in
          let after = Q.avail d in
          let rb = Worker.run b (fun () -> room d (fills d r 3)) in
          let again = Worker.run a (fun () -> room d (fills d r 10)) in
          let tail =
            Printf.sprintf "A grow %s; free units others see %d -> %d; B's room (3 parts) before A's next room: %s; A's next room: %s"
              (grow_s g) before after (room_s rb) (room_s again)
          in
          ignore (Worker.run a (fun () -> if again = Room then ignore (submit d (fills d r 10) 2 && commit d)));
          ignore (commit d);
          if rb = Room then Bug (tail ^ " -- the growth reached the C functions before A's next room")
          else if again = Grow && g = Grown then Bug (tail ^ " -- RIG_GROW again after Grown (QUEUE-2)")
          else Ok_ tail
    in
    wait_value d 2;
    Worker.quit a;
    Worker.quit b;
    close d;
    free_word d;
    record drv "QUEUE-1" v

  (* ------------------------------------------------------------ QUEUE-3 *)

  (* The budget is filled but for one chunk (4096 bytes).  The main thread
     holds 31 units; thread A's room of 32 parts (33 units) answers RIG_GROW
     and A's grow can make one chunk of the three it takes: Short n.  What
     it made must stay charged (an alloc of 4096 must fail) and must serve
     A's later room: once 8192 bytes (at least n) are freed, as rig's
     reclamation would, A's next grow answers Grown. *)
  let queue3 () =
    let d = open_dev () in
    let r = alloc d 64 in
    let r4 = alloc d 4096 and r8 = alloc d 8192 in
    let held = fill_budget d in
    call (fun () -> D.free d r4);
    let a = Worker.create () in
    let v =
      if room d (fills d r 30) <> Room || not (submit d (fills d r 30) 1) then Na "the first submission got no room"
      else
        let first = Worker.run a (fun () -> room d (fills d r 32)) in
        if first <> Grow then Na ("A's room answered " ^ room_s first)
        else
          match Worker.run a (fun () -> grow d) with
          | Grown -> Na "A's grow answered Grown: no Short to look at"
          | Short n -> (
              let live = Q.chunks_live d in
              let probe = call (fun () -> D.alloc d Device 4096) in
              let given_back = probe <> None in
              Option.iter (fun p -> call (fun () -> D.free d p)) probe;
              call (fun () -> D.free d r8);
              let again = Worker.run a (fun () -> room d (fills d r 32)) in
              let g2 = if again = Grow then Some (Worker.run a (fun () -> grow d)) else None in
              let third = Worker.run a (fun () -> room d (fills d r 32)) in
              if third = Room then ignore (Worker.run a (fun () -> submit d (fills d r 32) 2 && commit d));
              ignore (commit d);
              let tail =
                Printf.sprintf "grow Short %d with %d chunk(s) made; alloc of 4096 after the Short: %s; after freeing 8192: room %s, grow %s, room %s"
                  n live
                  (if given_back then "Some (the growth was given back)" else "None")
                  (room_s again)
                  (match g2 with Some g -> grow_s g | None -> "-")
                  (room_s third)
              in
              match g2 with
              | _ when given_back -> Bug (tail ^ " -- what the Short made did not stay")
              | Some (Short _) -> Bug (tail ^ " -- what the Short made did not serve the later room")
              | Some Grown when third = Grow -> Bug (tail ^ " -- RIG_GROW again after Grown (QUEUE-2)")
              | _ -> Ok_ tail)
    in
    wait_value d 2;
    Worker.quit a;
    List.iter (fun r -> call (fun () -> D.free d r)) held;
    close d;
    free_word d;
    record drv "QUEUE-3" v

  (* ------------------------------------------------------------- TIME-6 *)

  (* Thread S sleeps on the idle device (600 ms); 50 ms later the main
     thread runs room, submit and commit of a spin of 200 ms and a Fill:
     they must work, and not wait for the sleep.  The sleep may return as
     soon as they run (an event of other work), or when the word moves,
     about 200 ms after them. *)
  let time6 () =
    let d = open_dev () in
    let r = alloc d 64 in
    let img = match call (fun () -> D.image d Hostmem.kit.binary) with Ok i -> i | Error e -> failwith e in
    let spin = match call (fun () -> D.entry img "spin") with Entry e -> e | _ -> failwith "no spin" in
    let s = Worker.create () in
    let slept = ref 0 and moved = ref false in
    let sleeper =
      Thread.create
        (fun () ->
          let t = now () in
          Worker.run s (fun () -> try call (fun () -> D.sleep d ~seen:0 ~still_ms:600) with D.Fault _ -> ());
          slept := ms_since t;
          moved := signaled d <> 0)
        ()
    in
    Thread.delay 0.05;
    let t = now () in
    let sub = encode [ Launch { entry = spin; args = [ 200L ] }; Fill { dst = handle d r; off = 0; len = 4; byte = 1 } ] in
    let rm = room d sub in
    let ok_submit = rm = Room && submit d sub 1 = true in
    let ok_commit = ok_submit && commit d in
    let took = ms_since t in
    Thread.join sleeper;
    Worker.quit s;
    let tail =
      Printf.sprintf "room/submit/commit during a 600-ms sleep: %s/%s/%s in %d ms; the sleep returned after %d ms, word %s"
        (room_s rm) (if ok_submit then "ok" else "FAILED")
        (if ok_commit then "ok" else "FAILED")
        took !slept
        (if !moved then "moved" else if !slept < 550 then "unmoved (an early return)" else "unmoved (still_ms ran out)")
    in
    let v =
      if not ok_commit then Bug (tail ^ " -- a call failed beside a sleep (the device is lost)")
      else if took > 150 then Bug (tail ^ " -- they waited for the sleep")
      else if !slept > 700 then Bug (tail ^ " -- (TIME-4) the sleep overran still_ms")
      else Ok_ tail
    in
    if ok_commit then wait_value d 1;
    call (fun () -> D.free d r);
    close d;
    call (fun () -> D.unload img);
    free_word d;
    record drv "TIME-6" v

  (* ------------------------------------------------------------- STOP-4 *)

  (* One Fill of 0xAB into a zeroed region is encoded and not committed;
     stop.  It must never run.  Then, beside a committed spin of 300 ms,
     another open command buffer: stop must return at once. *)
  let stop4 () =
    let d = open_dev () in
    let r = alloc d 64 in
    write d r (String.make 64 '\000');
    let sub = encode [ Fill { dst = handle d r; off = 0; len = 64; byte = 0xab } ] in
    let placed = room d sub = Room && submit d sub 7 = true in
    let t = now () in
    close d;
    let stop_ms = ms_since t in
    let word = signaled d in
    Thread.delay 0.05;
    let seen = try Some (read d r 64) with _ -> None in
    let v =
      if not placed then Na "no room for the Fill"
      else
        let tail =
          Printf.sprintf "stop took %d ms, word %d after it (last value 7); region after stop: %s" stop_ms word
            (match seen with
            | Some s when s = String.make 64 '\xab' -> "filled with 0xAB"
            | Some s when s = String.make 64 '\000' -> "still zero"
            | Some _ -> "changed"
            | None -> "unreadable")
        in
        if seen = Some (String.make 64 '\xab') then Bug (tail ^ " -- the uncommitted Fill ran")
        else if word <> 7 then Bug (tail ^ " -- (STOP-3) the last value is not in the word")
        else Ok_ tail
    in
    (try call (fun () -> D.free d r) with _ -> ());
    free_word d;
    (* the same beside committed work *)
    let d = open_dev () in
    let r = alloc d 64 in
    let v2 =
      match call (fun () -> D.image d Hostmem.kit.binary) with
      | Error e -> Na e
      | Ok img -> (
          match call (fun () -> D.entry img "spin") with
          | Entry e ->
              let spin = encode [ Launch { entry = e; args = [ 300L ] } ] in
              let ok = room d spin = Room && submit d spin 1 = true && commit d in
              let fill = encode [ Fill { dst = handle d r; off = 0; len = 64; byte = 0xcd } ] in
              let ok = ok && room d fill = Room && submit d fill 2 = true in
              Thread.delay 0.02;
              let t = now () in
              close d;
              let took = ms_since t in
              wait_value d 2;
              Thread.delay 0.05;
              let s = try read d r 64 with _ -> "?" in
              call (fun () -> D.unload img);
              let tail =
                Printf.sprintf "beside a running spin: stop took %d ms; open Fill %s" took
                  (if s = String.make 64 '\xcd' then "ran" else "did not run")
              in
              if not ok then Na "no room"
              else if s = String.make 64 '\xcd' then Bug (tail ^ " -- the uncommitted Fill ran")
              else if took > 100 then Bug (tail ^ " -- (STOP-2) stop waited")
              else Ok_ tail
          | _ -> Na "no spin entry")
    in
    (try call (fun () -> D.free d r) with _ -> ());
    free_word d;
    let v =
      match (v, v2) with
      | Bug a, _ -> Bug (a ^ "; " ^ show v2)
      | _, Bug b -> Bug (show v ^ "; " ^ b)
      | Ok_ a, Ok_ b -> Ok_ (a ^ "; " ^ b)
      | _ -> Na (show v ^ "; " ^ show v2)
    in
    record drv "STOP-4" v

  (* ------------------------------------------------------------- STOP-5 *)

  (* A region rig made (with a pattern), an image with an entry, and a
     submission of 40 parts (the layer grows for it), committed and done;
     stop.  Then: the word must read the last value, without a fault, until
     rig frees it; the region must still hold its pattern and free without
     error; the image must unload; the layer's chunks must all be given
     back (soon: a driver thread may do it after stop returned). *)
  let stop5 () =
    let d = open_dev () in
    let r = alloc d 4096 and r2 = alloc d 64 in
    let pattern = String.init 4096 (fun k -> Char.chr (k land 0xff)) in
    write d r pattern;
    let img = match call (fun () -> D.image d Hostmem.kit.binary) with Ok i -> Some i | Error _ -> None in
    let entry_ok = match img with Some i -> (match call (fun () -> D.entry i "nop") with Entry _ -> true | _ -> false) | None -> false in
    let sub = fills d r2 40 in
    let g = if room d sub = Grow then Some (grow d) else None in
    let placed = room d sub = Room && submit d sub 3 = true && commit d in
    wait_value d 3;
    let chunks0 = Q.chunks_live d in
    close d;
    let chunks_at_stop = Q.chunks_live d in
    let reads =
      List.init 3 (fun _ ->
          let x = try string_of_int (signaled d) with D.Fault m -> "Fault " ^ m in
          Thread.delay 0.01;
          x)
    in
    let region = try if read d r 4096 = pattern then "intact" else "changed" with e -> "unreadable (" ^ Printexc.to_string e ^ ")" in
    let freed = try call (fun () -> D.free d r); "ok" with e -> "raised " ^ Printexc.to_string e in
    (try call (fun () -> D.free d r2) with _ -> ());
    let unloaded = match img with Some i -> (try call (fun () -> D.unload i); "ok" with e -> "raised " ^ Printexc.to_string e) | None -> "-" in
    let t = now () in
    while Q.chunks_live d > 0 && now () -. t < 0.5 do Thread.delay 0.002 done;
    let chunks1 = Q.chunks_live d and release_ms = ms_since t in
    free_word d;
    let tail =
      Printf.sprintf "grow %s; layer chunks: %d before stop, %d as it returned, %d later (after %d ms more); word after stop: %s; rig's region %s, its free %s; unload %s"
        (match g with Some g -> grow_s g | None -> "-") chunks0 chunks_at_stop chunks1 release_ms (String.concat "," reads) region freed unloaded
    in
    let v =
      if not (placed && entry_ok) then Na tail
      else if List.exists (fun x -> x <> "3") reads then Bug (tail ^ " -- what signaled needs went before rig freed the word")
      else if region <> "intact" || freed <> "ok" || unloaded <> "ok" then Bug (tail ^ " -- stop released what rig made")
      else if chunks1 > 0 then Bug (tail ^ " -- stop kept what the driver made to run work")
      else Ok_ tail
    in
    record drv "STOP-5" v

  let run () =
    List.iter
      (fun (c, f) -> try f () with e -> record drv c (Na ("the check raised " ^ Printexc.to_string e)))
      [ ("QUEUE-1", queue1); ("QUEUE-3", queue3); ("TIME-6", time6); ("STOP-4", stop4); ("STOP-5", stop5) ]
end

let clauses = [ "QUEUE-1"; "QUEUE-3"; "TIME-6"; "STOP-4"; "STOP-5" ]

let () =
  let only = Array.to_list Sys.argv |> List.tl in
  List.iter
    (fun (module Q : Blindqs.QS) ->
      if only = [] || List.mem Q.name only then begin
        let module C = Check (Q) in
        C.run ()
      end)
    Blindqs.drivers;
  let wrong = ref 0 in
  List.iter
    (fun (drv, exp) ->
      let mine = List.filter (fun (d, _, _) -> d = drv) !results in
      if mine <> [] then begin
        let bugs = List.filter_map (fun (_, c, v) -> match v with Bug _ -> Some c | _ -> None) mine in
        let as_expected = match exp with None -> bugs = [] | Some c -> bugs = [ c ] in
        if not as_expected then incr wrong;
        Printf.printf "%s (%s): %s\n" drv
          (match exp with None -> "conforming" | Some c -> "breaks " ^ c)
          (if as_expected then "as expected" else "NOT AS EXPECTED");
        List.iter
          (fun c ->
            match List.find_opt (fun (_, c', _) -> c' = c) mine with
            | Some (_, _, v) ->
                Printf.printf "  %s: %s%s\n" drv
                  (match v with Bug _ -> "BUG (" ^ c ^ ") " | _ -> c ^ " ")
                  (show v)
            | None -> ())
          clauses
      end)
    expected;
  Printf.printf "%d driver(s) not as expected\n" !wrong;
  exit (if !wrong = 0 then 0 else 1)
