(* Queue probes; see queue_probes.mli.  They drive the C functions as rig
   does: room, grow on the same thread after RIG_GROW, room again. *)

open Case
module P = Rig_edge_primitives

(* The largest submission probed: a driver whose room never answers
   RIG_GROW below it is not applicable (QUEUE-6: it is never asked). *)
let max_parts = 1 lsl 14

module Probe (Pk : Rig_edge.Package) = struct
  module D = Pk.D

  exception Not_applicable_here of string

  (* An opener's make that raises (a device busy, a thread refused) leaves
     the round with nothing to judge. *)
  let open_first () =
    match Pk.openers () with
    | o :: _ -> (
        match P.masked o.make with
        | d -> d
        | exception e -> raise (Not_applicable_here ("setup: the opener's make raised " ^ Printexc.to_string e)))
    | [] -> raise (Not_applicable_here "the driver has no device")

  let alloc d n = P.masked (fun () -> D.alloc d Rig_edge.Device n)

  let fills d r k =
    let dst = (D.locate d r).handle in
    Rig_edge.encode (List.init k (fun i -> Rig_edge.Fill { dst; off = 0; len = 4; byte = i land 255 }))

  let room d s = P.masked (fun () -> (D.facts d).queue.room s)
  let grow d = P.masked (fun () -> D.grow d)

  let value = ref 0

  (* Submits what room made room for, and waits (bounded) until its work is
     done, so that the queue's state does not depend on the worker's pace. *)
  let finish d s =
    let q = (D.facts d).queue in
    incr value;
    ignore (P.masked (fun () -> q.submit s ~value:!value));
    ignore (P.masked (fun () -> q.commit ()));
    let rec await k =
      let w = D.signaled d in
      if w < !value && k > 0 then begin
        (try P.masked (fun () -> D.sleep d ~seen:w ~still_ms:20) with _ -> ());
        await (k - 1)
      end
    in
    await 250

  (* The parts of the smallest power-of-two submission whose room answers
     RIG_GROW (that room is the calling thread's last). *)
  let growing_parts d r =
    let rec go k =
      if k > max_parts then raise (Not_applicable_here "room never answered RIG_GROW")
      else
        let s = fills d r k in
        match room d s with
        | Rig_edge.Grow -> k
        | Room -> finish d s; go (k * 2)
    in
    go 8

  let growing_submission d r = fills d r (growing_parts d r)

  (* Stop the device and give back what the probe made, once the word reads
     the last value (bounded: a stuck word leaves it to the process's end). *)
  let close d regions =
    P.masked (fun () -> D.stop d ~fault:None);
    if Probes.word_reaches ~signaled:(fun () -> D.signaled d) ~last:!value ~ms:5000 then begin
      List.iter (fun r -> try P.masked (fun () -> D.free d r) with _ -> ()) regions;
      Option.iter (fun w -> try P.masked (fun () -> D.free d w) with _ -> ()) (D.facts d).own_word
    end

  (* Give back at least [n] bytes from [pool] ((size, region) pairs, the
     small pieces first) and no more than a piece over; answers what stays. *)
  let rec give_back d pool n =
    match pool with
    | (size, x) :: rest when n > 0 -> P.masked (fun () -> D.free d x); give_back d rest (n - size)
    | _ -> pool

  (* Device memory taken in (size, region) pieces: [size] bytes at a time
     until alloc answers None. *)
  let rec take size d acc = match alloc d size with Some x -> take size d ((size, x) :: acc) | None -> acc

  (* All of it, coarse to fine, so that a device with much of it costs a
     few hundred allocs, not one per 64 bytes (a driver whose alloc is slow
     is no worse for it): the coarse pieces and the fine ones. *)
  let take_all d =
    let coarse = List.concat_map (fun size -> take size d []) [ 1 lsl 20; 1 lsl 16; 1 lsl 12 ] in
    (coarse, take 4 d [] @ take 64 d [])

  (* Full memory: Short n1.  Half of it back: a partial growth, Short n2.
     n2 more bytes: what the partial growth made stayed, so Grown. *)
  let queue3 ~seed =
    let d = open_first () in
    let r = Option.get (alloc d 64) in
    let acc = ref [] in
    let s = growing_submission d r in
    let coarse, fine = take_all d in
    (* What is given back comes from pieces no bigger than a word and a
       queue part's likely cost, so that it stays close to what grow asked:
       coarse chunks (the smallest first) become such pieces until they hold
       [need] bytes, the memory staying full. *)
    let by_size = List.sort (fun (a, _) (b, _) -> compare (a : int) b) in
    let take size acc = take size d acc in
    let rec refine fine coarse need =
      let held = List.fold_left (fun a (size, _) -> a + size) 0 fine in
      match by_size coarse with
      | (_, x) :: rest when held < need ->
          P.masked (fun () -> D.free d x);
          refine (take 4 (take 64 fine)) rest need
      | sorted -> (by_size fine, sorted)
    in
    let regrow s =
      match room d s with
      | Rig_edge.Room -> None
      | Grow -> Some (grow d)
    in
    (* With the memory full, the first grow that answers Short.  A Grown
       there made nothing that needs memory (a room that answers RIG_GROW
       once per submission, say, whose grow finds nothing missing): that
       submission goes in, and a bigger one, which needs a real growth, is
       asked for. *)
    let rec first_short k s =
      match grow d with
      | Rig_edge.Short n1 -> Some (s, n1)
      | Grown -> (
          match room d s with
          | Rig_edge.Grow -> None
          | Room ->
              finish d s;
              let rec bigger k =
                if k > max_parts then None
                else
                  let s = fills d r k in
                  match room d s with
                  | Rig_edge.Grow -> first_short k s
                  | Room -> finish d s; bigger (2 * k)
              in
              bigger (2 * k))
    in
    let kept =
      match first_short (List.length (Rig_edge.parts s)) s with
      | None -> raise (Not_applicable_here "grow needs no Device memory")
      | Some (s, n1) -> (
          let fine, coarse = refine fine coarse ((2 * n1) + 4096) in
          let pool = fine @ coarse in
          let first = (n1 / 2) + (4 * (seed mod 3)) in
          let pool = give_back d pool first in
          match regrow s with
          | None | Some Grown -> pool
          | Some (Short n2) -> (
              let pool = give_back d pool n2 in
              match regrow s with
              | None -> pool
              | Some Grown -> (
                  match room d s with
                  | Room -> finish d s; pool
                  | Grow -> acc := [ value_finding "QUEUE-2" "after Grown, room answered RIG_GROW again" ]; pool)
              | Some (Short n3) ->
                  acc :=
                    [ value_finding "QUEUE-3"
                        "grow answered Short %d, then with %d bytes back Short %d, then with %d more bytes back Short %d: what it made did not stay"
                        n1 first n2 n2 n3 ];
                  pool))
    in
    close d (r :: List.map snd kept);
    !acc

  (* A thread of the probe's that runs what it is given, one call at a
     time, until [quit].  The three of QUEUE-1 live for the whole probe: a
     thread that ended could hand its pthread_t, and with it the driver's
     per-thread state, to the next one. *)
  type agent = { ask : (unit -> unit) option Event.channel; told : exn option Event.channel; th : Thread.t }

  let agent () =
    let ask = Event.new_channel () and told = Event.new_channel () in
    let rec serve () =
      match Event.sync (Event.receive ask) with
      | None -> ()
      | Some f ->
          Event.sync (Event.send told (match f () with () -> None | exception e -> Some e));
          serve ()
    in
    { ask; told; th = Thread.create serve () }

  let on a f =
    let r = ref None in
    Event.sync (Event.send a.ask (Some (fun () -> r := Some (f ()))));
    match Event.sync (Event.receive a.told) with Some e -> raise e | None -> Option.get !r

  let quit a = Event.sync (Event.send a.ask None); Thread.join a.th

  (* One thread: room answers RIG_GROW, grow Grown, room again must make
     room.  Then with another thread's turn in between, "whatever other
     submissions' growths answer": A's room answers RIG_GROW; B's room (and,
     where it answers RIG_GROW, B's grow and room again), for a submission
     of 1 part or of as many as A's, comes before A's grow or after it; A's
     room after Grown must make room.  Growths that hold nothing of what
     A's room saw free, that go to a pool any room takes from, or that a
     later grow on another thread takes over, each fail one of the four. *)
  let queue2 ~seed:_ =
    let d = open_first () in
    let r = Option.get (alloc d 64) in
    let acc = ref [] in
    let a = agent () and b = agent () in
    let grown_or_skip () =
      match grow d with
      | Rig_edge.Short _ -> raise (Not_applicable_here "grow answered Short with the device's memory free")
      | Grown -> ()
    in
    (* B's turn: whether B got room (its submission then waits in the
       queues until A's room was judged). *)
    let b_turn sb =
      on b (fun () ->
          match room d sb with
          | Rig_edge.Room -> true
          | Grow -> (match grow d with Rig_edge.Grown -> room d sb = Rig_edge.Room | Short _ -> false))
    in
    let interleaved (before_grow, b_parts) =
      if !acc = [] then begin
        let parts = on a (fun () -> growing_parts d r) in
        let sa = fills d r parts and sb = fills d r (b_parts parts) in
        let b_has_room =
          if before_grow then begin
            let h = b_turn sb in
            on a grown_or_skip;
            h
          end
          else begin
            on a grown_or_skip;
            b_turn sb
          end
        in
        (match on a (fun () -> room d sa) with
        | Rig_edge.Room -> on a (fun () -> finish d sa)
        | Grow ->
            acc :=
              [ value_finding "QUEUE-2"
                  "after grow answered Grown, room answered RIG_GROW again for the same %d parts: another thread's room for %d part(s)%s came %s"
                  parts (b_parts parts)
                  (if b_parts parts > 1 then " (and its grow where its room answered RIG_GROW)" else "")
                  (if before_grow then "between the first room and the grow" else "between the grow and the room after it") ]);
        if b_has_room then on b (fun () -> finish d sb)
      end
    in
    Fun.protect
      ~finally:(fun () -> List.iter quit [ a; b ]; close d [ r ])
      (fun () ->
        on a (fun () ->
            let s = growing_submission d r in
            grown_or_skip ();
            match room d s with
            | Rig_edge.Room -> finish d s
            | Grow -> acc := [ value_finding "QUEUE-2" "after grow answered Grown, room answered RIG_GROW again for the same parts" ]);
        List.iter interleaved [ (true, fun _ -> 1); (true, Fun.id); (false, fun _ -> 1); (false, Fun.id) ]);
    !acc

  (* QUEUE-2, "whatever other submissions' growths answer", where one
     answered Short: with Device memory taken, B's room answers RIG_GROW
     and its grow Short; the memory given back, A's room answers RIG_GROW,
     its grow Grown, and A's room after must make room, B not asked again
     yet (rig asks B's room again after its round of reclamation, on B's
     thread, in its own time).  A driver that serves growers in the order
     they asked makes A wait for B.  None when a step does not come as
     described (room with room to spare, a grow that needs no memory). *)
  let queue2_beside_short () =
    let d = open_first () in
    let r = Option.get (alloc d 64) in
    let p = agent () and a = agent () and b = agent () in
    let taken = ref [] and submitted = ref [] in
    Fun.protect
      ~finally:(fun () ->
        List.iter (fun (_, x) -> P.masked (fun () -> D.free d x)) !taken;
        List.iter (fun (t, s) -> on t (fun () -> finish d s)) !submitted;
        List.iter quit [ p; a; b ];
        close d [ r ])
      (fun () ->
        (* p's last room answered RIG_GROW: p rooms no more *)
        let parts = on p (fun () -> growing_parts d r) in
        let small = fills d r parts and big = fills d r (2 * parts) in
        let coarse, fine = take_all d in
        taken := coarse @ fine;
        match on b (fun () -> room d big) with
        | Rig_edge.Room -> submitted := [ (b, big) ]; None
        | Grow -> (
            match on b (fun () -> grow d) with
            | Rig_edge.Grown -> None
            | Short _ -> (
                List.iter (fun (_, x) -> P.masked (fun () -> D.free d x)) !taken;
                taken := [];
                match on a (fun () -> room d small) with
                | Rig_edge.Room -> submitted := [ (a, small) ]; None
                | Grow -> (
                    match on a (fun () -> grow d) with
                    | Rig_edge.Short _ -> None
                    | Grown -> (
                        match on a (fun () -> room d small) with
                        | Rig_edge.Room -> submitted := [ (a, small) ]; None
                        | Grow ->
                            Some
                              (value_finding "QUEUE-2"
                                 "after grow answered Grown for %d parts, room answered RIG_GROW again for them: another thread's grow, for %d parts, had answered Short before (Device memory taken then, given back since), and that thread's room was not asked again"
                                 parts (2 * parts)))))))

  (* Thread A: room (small) answers RIG_GROW.  Thread B: room (big, twice
     the parts) answers RIG_GROW, then grow answers Grown.  Thread C: room
     (small) must still answer RIG_GROW: grow changed nothing the C
     functions read, and what it made is B's, for B's next room.  A grow
     that put its slots where every room looks would let C's parts in. *)
  let queue1 ~seed:_ =
    let d = open_first () in
    let r = Option.get (alloc d 64) in
    let a = agent () and b = agent () and c = agent () in
    let acc = ref [] in
    Fun.protect
      ~finally:(fun () -> List.iter quit [ a; b; c ]; close d [ r ])
      (fun () ->
        let parts = on a (fun () -> growing_parts d r) in
        let small = fills d r parts in
        let big = fills d r (2 * parts) in
        match on b (fun () -> room d big) with
        | Rig_edge.Room -> raise (Not_applicable_here "room took a submission twice as big as one it refused")
        | Grow -> (
            match on b (fun () -> grow d) with
            | Rig_edge.Short _ -> raise (Not_applicable_here "grow answered Short with the device's memory free")
            | Grown ->
                (match on c (fun () -> room d small) with
                | Rig_edge.Grow -> ()
                | Room ->
                    on c (fun () -> finish d small);
                    acc :=
                      [ value_finding "QUEUE-1"
                          "grow on one thread (for %d parts) changed what room reads: another thread's room for %d parts answered RIG_GROW before that grow and Room after it, with no work run between"
                          (2 * parts) parts ]);
                (* B's own room takes what its grow made (QUEUE-2 judges it). *)
                match on b (fun () -> room d big) with Rig_edge.Room -> on b (fun () -> finish d big) | Grow -> ()));
    !acc

  (* QUEUE-1 where rooms not yet submitted hold the whole pool: a grow that
     puts what it made where every room looks shows even when what it left
     over is smaller than any submission the round above asks.  Rooms of
     threads of their own, each held where it answered Room, fill the
     queues until one for 1 part answers RIG_GROW (none submitted: no
     work's end frees anything meanwhile).  B's room for [b_parts] then
     answers RIG_GROW and its grow Grown; a new thread's room for 1 part
     must still answer RIG_GROW.  B's size is tried at three values, each
     on a new device, since a growth made in fixed chunks may leave nothing
     over for one of them.  A thread whose room answered RIG_GROW rooms no
     more (rig would grow first). *)
  let queue1_exhausted ~b_parts =
    let d = open_first () in
    let r = Option.get (alloc d 64) in
    let agents = ref [] in
    let fresh () = let a = agent () in agents := a :: !agents; a in
    let held = ref [] in
    let room_held parts =
      let a = fresh () and s = fills d r parts in
      match on a (fun () -> room d s) with
      | Rig_edge.Room -> held := (a, s) :: !held; true
      | Grow -> false
    in
    (* Up by doubling while room takes it, then down by halving: few asks
       that do not fit, since a room that answers RIG_GROW may keep
       something for its thread (a layer over another queue, say).  False
       when 1 part always finds room (a bound on held rooms). *)
    let rec up parts = if parts <= max_parts && room_held parts then up (2 * parts) else down (parts / 2)
    and down parts = if parts > 1 then (ignore (room_held parts); down (parts / 2)) else ones 64
    and ones left = left > 0 && ((not (room_held 1)) || ones (left - 1)) in
    Fun.protect
      ~finally:(fun () ->
        List.iter (fun (a, s) -> on a (fun () -> finish d s)) (List.rev !held);
        List.iter quit !agents;
        close d [ r ])
      (fun () ->
        if not (up 1) then None
        else
          let b = fresh () and big = fills d r b_parts in
          match on b (fun () -> room d big) with
          | Rig_edge.Room -> held := (b, big) :: !held; None
          | Grow -> (
              match on b (fun () -> grow d) with
              | Rig_edge.Short _ -> None
              | Grown ->
                  let c = fresh () and one = fills d r 1 in
                  let finding =
                    match on c (fun () -> room d one) with
                    | Rig_edge.Grow -> None
                    | Room ->
                        held := (c, one) :: !held;
                        Some
                          (value_finding "QUEUE-1"
                             "with rooms not yet submitted holding the queues (a room for 1 part answering RIG_GROW), grow on another thread (for %d parts) changed what room reads: a new thread's room for 1 part then answered Room, with no work run between"
                             b_parts)
                  in
                  (match on b (fun () -> room d big) with Rig_edge.Room -> held := (b, big) :: !held | Grow -> ());
                  finding))

  let queue1_all ~seed =
    match queue1 ~seed with
    | _ :: _ as found -> found
    | [] ->
        let rec rounds = function
          | [] -> []
          | b_parts :: rest -> (
              match queue1_exhausted ~b_parts with
              | Some x -> [ x ]
              | None | (exception Not_applicable_here _) -> rounds rest)
        in
        rounds [ 2; 3; 5 ]

  let run name ~seed =
    try
      Ran
        ((match name with
         | "probe.QUEUE-1.grow-changes-nothing" -> queue1_all
         | "probe.QUEUE-2.grown-holds" ->
             fun ~seed ->
               (match queue2 ~seed with
               | [] -> ( match queue2_beside_short () with f -> Option.to_list f | exception Not_applicable_here _ -> [])
               | found -> found)
         | _ -> queue3)
           ~seed)
    with Not_applicable_here why -> Not_applicable why
end

let case name clause =
  { name; clauses = [ clause ];
    run = (fun (module Pk : Rig_edge.Package) ~seed -> let module M = Probe (Pk) in M.run name ~seed) }

let cases =
  [ case "probe.QUEUE-1.grow-changes-nothing" "QUEUE-1"; case "probe.QUEUE-2.grown-holds" "QUEUE-2";
    case "probe.QUEUE-3.short-keeps" "QUEUE-3" ]
