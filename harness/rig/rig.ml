(* The reference rig; see rig.mli.  How it calls a driver (counting, masks,
   losses, the word) is Rig_calls; here is what it asks of the driver for
   each of the program's calls.  The steps a mutant replaces are
   [Rig_mutant.step]s, dereferenced where they run; their variants are in
   Mutants, at the end. *)

exception Device_lost of string
exception Out_of_memory of int

open Rig_types
module P = Rig_edge_primitives

(* An allocation tries four times: once, then after each of three rounds of
   reclamation (spec/decisions.md, "Rounds of reclamation"). *)
let asks = 4

let step = Rig_mutant.step
let now_ms = Rig_calls.now_ms

module Make (D : Rig_edge.Driver) = struct
  module C =
    Rig_calls.Make (D)
      (struct
        exception Device_lost = Device_lost
        exception Out_of_memory = Out_of_memory
      end)

  open C

  type device = C.device
  type buffer = (D.t, D.region, D.image) Rig_types.buffer
  type image = (D.t, D.region, D.image) Rig_types.image
  type arg = Buf of buffer | Int of int

  type part =
    | Fill of buffer * int * int * int
    | Copy of buffer * int * buffer * int * int
    | Launch of int64 * arg list

  let set_hang_ms ms = hang_ms := ms
  let by_name : (string, device) Hashtbl.t = Hashtbl.create 8

  (* ---- giving memory back ---- *)

  (* A buffer is given back once no mapping over it lives (GUAR-2) and no
     work that uses it may run (MEM-3). *)
  let mapped = step (fun b -> b.maps > 0)
  let work_done = step (fun b -> b.last_use <= b.dev.observed)
  let releasable b = b.user_freed && (not b.freed) && (not (!mapped b)) && !work_done b

  (* The word goes last: once no buffer of the stopped device is left, and
     is not read after (TIME-2). *)
  let free_own_word_conforming dev =
    Option.iter (fun w -> ignore (!dropping_faults (fun () -> D.free dev.d w))) dev.facts.own_word

  let free_own_word = step free_own_word_conforming

  let free_word dev =
    if not dev.word_freed then begin
      dev.word_freed <- true;
      !free_own_word dev
    end

  (* rig's record of a buffer given back: it is not the device's any more. *)
  let forget_buffer_conforming dev b = dev.buffers <- List.filter (( != ) b) dev.buffers
  let forget_buffer = step forget_buffer_conforming

  (* A free is never asked again, also when it raised (GUAR-1).  A mapping
     whose free raised may still map what it maps: that buffer then stays
     for good (GUAR-2).  Giving back the last mapping over a buffer of a
     drained device gives back that buffer too, which its device's release
     had to leave. *)
  let rec give_back b =
    let dev = b.dev in
    let call () = D.free dev.d b.b in
    let outcome =
      if dev.stopped then (if !dropping_faults call then Ok () else Error None)
      else
        match counted dev "free" call with
        | () -> Ok ()
        | exception Device_lost _ -> Error None
        | exception e -> Error (Some e)
    in
    let freed_over =
      with_rig (fun () ->
          b.freed <- true;
          !forget_buffer dev b;
          match b.kind with
          | Peer_of over when Result.is_ok outcome ->
              over.maps <- over.maps - 1;
              if over.maps = 0 && over.dev.drained && not over.freed then Some over else None
          | _ -> None)
    in
    Option.iter
      (fun over ->
        give_back over;
        if over.dev.buffers = [] then free_word over.dev)
      freed_over;
    match outcome with Error (Some e) -> raise e | _ -> ()

  (* Frees every buffer the program freed that no work and no mapping needs
     any more; mappings first, since they free what they map. *)
  let release_ready dev =
    if dev.lost = None then begin
      if dev.buffers <> [] then ignore (signaled dev);
      let rec go () =
        match List.find_opt releasable dev.buffers with
        | Some b -> give_back b; go ()
        | None -> ()
      in
      go ()
    end

  (* ---- reclamation ---- *)

  (* Round k of the reclamation an allocation runs: give back what finished
     work no longer needs; then also collect garbage; then also wait for all
     of the device's work. *)
  let reclaim dev k =
    if k >= 2 then Gc.full_major ();
    if k >= 3 && dev.last_submitted > dev.observed then
      (try wait_word dev dev.last_submitted with Device_lost _ -> ());
    release_ready dev

  let with_rounds dev ~asks_total attempt on_out =
    let rec go k =
      match attempt () with
      | Some v -> v
      | None when k >= asks_total -> on_out ()
      | None -> reclaim dev k; go (k + 1)
    in
    go 1

  (* ---- devices ---- *)

  let new_device d name facts : device =
    { d; name; facts; in_flight = 0; lost = None; fault = None; stopped = false; released = false; word_freed = false; drained = false;
      next_value = 1; last_submitted = 0; observed = 0; last_move = now_ms (); buffers = [];
      images = []; kept = [] }

  (* stop is called once (CNT-1), with the Fault that lost the device (STOP-1). *)
  let call_stop ?(raised = fun _ -> ()) dev ~fault =
    dev.stopped <- true;
    try P.masked (fun () -> D.stop dev.d ~fault) with _ -> raised dev

  let stop = step (fun dev -> if not dev.stopped then call_stop dev ~fault:dev.fault)

  (* After stop, only signaled reads the word (CNT-4). *)
  let word_reached_conforming dev = signaled dev >= dev.last_submitted
  let word_reached = step word_reached_conforming

  (* Whether the word read the last value within the hang bound (STOP-7),
     also after a stop that raised. *)
  let await_word_conforming dev =
    let deadline = now_ms () +. float !hang_ms in
    let rec await pause =
      if !word_reached dev then true
      else if now_ms () > deadline then false
      else (Thread.delay pause; await (Float.min 0.05 (pause *. 2.)))
    in
    await 0.0005

  let await_word = step await_word_conforming

  (* What close gives back: each buffer and image once (GUAR-1, GUAR-5). *)
  let left = step (fun dev -> dev.buffers)
  let to_free = step (fun b -> not b.freed)
  let loaded = step (fun im -> not im.unloaded)

  (* Stop waits until no counted call is in flight (CNT-1, STOP-1); called
     with rig's lock held. *)
  let await_idle = step (fun dev -> while dev.in_flight > 0 do P.Lock.await rig_lock changed done)

  (* Stop once no counted call is in flight, then give back everything
     once the word reads the last value (STOP-7). *)
  let stop_and_release dev ~reason =
    with_rig (fun () ->
        if dev.lost = None then dev.lost <- Some reason;
        !await_idle dev);
    !stop dev;
    if not dev.released then begin
      dev.released <- true;
      (* rig lets go of what the device's submissions keep (CNT-5). *)
      with_rig (fun () -> !let_go dev ~upto:max_int);
      (* A word that never reads the last value keeps everything: freeing
         memory that work may still write is worse than leaking it. *)
      if !await_word dev then begin
        dev.drained <- true;
        let mappings, others = List.partition (fun b -> match b.kind with Peer_of _ -> true | _ -> false) (!left dev) in
        List.iter (fun b -> if !to_free b then give_back b) mappings;
        (* A buffer another device still maps stays until that mapping goes. *)
        List.iter (fun b -> if !to_free b && not (!mapped b) then give_back b) others;
        List.iter
          (fun im ->
            if !loaded im then begin
              im.unloaded <- true;
              ignore (!dropping_faults (fun () -> D.unload im.i))
            end)
          dev.images;
        if dev.buffers = [] then free_word dev
      end
    end

  let open_ (o : D.t Rig_edge.opener) =
    start "open";
    (match Hashtbl.find_opt by_name o.name with
    | Some old -> stop_and_release old ~reason:("reopened " ^ o.name)
    | None -> ());
    let d = uncounted_masked o.make in
    let facts = uncounted_masked (fun () -> D.facts d) in
    if facts.own_word = None then
      invalid_arg "Rig.open: the reference rig needs a word of the driver's own (spec/decisions.md)";
    let dev = new_device d o.name facts in
    Hashtbl.replace by_name o.name dev;
    dev

  let close dev =
    start "close";
    stop_and_release dev ~reason:"closed";
    match Hashtbl.find_opt by_name dev.name with
    | Some current when current == dev -> Hashtbl.remove by_name dev.name
    | _ -> ()

  let name dev = dev.name
  let lost dev = dev.lost
  let drained dev = dev.drained

  (* ---- memory ---- *)

  let make_buffer dev b bsize kind =
    let buf = { b; dev; bsize; kind; user_freed = false; freed = false; maps = 0; last_use = 0 } in
    with_rig (fun () -> dev.buffers <- buf :: dev.buffers);
    buf

  (* The length asked: rounded up to a whole word (MEM-1). *)
  let round_up = step (fun n -> (n + Rig_edge.word - 1) / Rig_edge.word * Rig_edge.word)

  (* alloc is counted and masked (SIG-1), outside any lock (LOCK-1). *)
  let call_alloc = step (fun dev m n -> counted dev "alloc" (fun () -> D.alloc dev.d m n))

  (* After Mapped: Pinned, or Device where host_addresses (GUAR-6). *)
  let fallback = step (fun dev -> if dev.facts.host_addresses then Rig_edge.Device else Pinned)

  let alloc dev m n =
    start "alloc";
    if n <= 0 then invalid_arg "Rig.alloc: size must be positive";
    let n' = !round_up n in
    let one m = !call_alloc dev m n' in
    let attempt () =
      match one m with
      | Some r -> Some (r, m)
      | None when m = Rig_edge.Mapped ->
          let fallback = !fallback dev in
          Option.map (fun r -> (r, fallback)) (one fallback)
      | None -> None
    in
    let r, _ = with_rounds dev ~asks_total:asks attempt (fun () -> raise (Out_of_memory n')) in
    make_buffer dev r n' Allocated

  let free b =
    start "free";
    if b.user_freed then invalid_arg "Rig.free: buffer freed twice";
    b.user_freed <- true;
    release_ready b.dev

  (* locate and peer are uncounted, so that only rig's lock keeps them
     from a stop another thread makes (CNT-4): a device is lost under that
     lock before its stop.  They take no lock (LOCK-5), and rig may call
     them holding its own ("at any time", LOCK-6). *)
  let uncounted_on_live devs f =
    let outcome =
      with_rig (fun () ->
          match List.find_map (fun (dev : device) -> dev.lost) devs with
          | Some why -> Error (Device_lost why)
          | None -> ( try Ok (f ()) with e -> Error e))
    in
    match outcome with Ok v -> v | Error e -> raise e

  (* peer is never asked of a device with itself (GUAR-3). *)
  let peers_conforming a b = uncounted_on_live [ a; b ] (fun () -> D.peer a.d b.d)
  let peers = step peers_conforming

  (* A buffer asked onto its own device is the program's error (GUAR-3). *)
  let refuse_own = step (fun dev b -> if b.dev == dev then invalid_arg "Rig.map_peer: the buffer is already the device's")

  let map_peer dev b =
    start "map_peer";
    !refuse_own dev b;
    if not (!peers dev b.dev) then invalid_arg "Rig.map_peer: the devices are not peers";
    let r = counted dev "map_peer" (fun () -> D.map_peer dev.d b.dev.d b.b) in
    with_rig (fun () -> b.maps <- b.maps + 1);
    make_buffer dev r b.bsize (Peer_of b)

  (* map_host only of a device that declares maps_host (MEM-6). *)
  let refuse_map_host =
    step (fun dev -> if not dev.facts.maps_host then invalid_arg "Rig.map_host: the device does not map host memory")

  let map_host dev p n =
    start "map_host";
    !refuse_map_host dev;
    if n <= 0 || Nativeint.rem p 4096n <> 0n then invalid_arg "Rig.map_host: p must start a page, n be positive";
    let r = counted dev "map_host" (fun () -> D.map_host dev.d p n) in
    make_buffer dev r n Host

  (* dma only of a region alloc made (GUAR-4). *)
  let refuse_dma = step (fun b -> if b.kind <> Allocated then invalid_arg "Rig.dma: only for memory alloc made")

  let dma b ~fn =
    start "dma";
    !refuse_dma b;
    counted b.dev "dma" (fun () -> D.dma b.dev.d b.b ~fn)

  (* No exception from locate loses anything (EXC-3). *)
  let locate_conforming b = uncounted_on_live [ b.dev ] (fun () -> D.locate b.dev.d b.b)
  let locate = step locate_conforming
  let place b = !locate b

  let reach b access =
    match (place b).reach with
    | None -> invalid_arg "Rig: the host cannot reach this buffer"
    | Some f -> counted b.dev "reach" (fun () -> f access)

  let write b off s =
    start "write";
    reach b (Rig_edge.Write { off; from = s })

  let read b off len =
    start "read";
    let into = Bytes.create len in
    reach b (Rig_edge.Read { off; into });
    Bytes.to_string into

  let size b = b.bsize

  (* ---- code ---- *)

  let load dev bin =
    start "load";
    match counted dev "image" (fun () -> D.image dev.d bin) with
    | Ok i ->
        let im = { i; idev = dev; unloaded = false } in
        with_rig (fun () -> dev.images <- im :: dev.images);
        Ok im
    | Error why -> Error why

  let unload im =
    start "unload";
    if im.unloaded then invalid_arg "Rig.unload: image unloaded twice";
    let dev = im.idev in
    (* Work launched from it may still run: unload once all of it is done. *)
    if dev.last_submitted > dev.observed then wait_word dev dev.last_submitted;
    im.unloaded <- true;
    counted dev "unload" (fun () -> D.unload im.i)

  (* After No_memory: the rounds of an allocation (CODE-4). *)
  let entry_asks = step asks

  let entry im f =
    start "entry";
    let dev = im.idev in
    let last = ref 0 in
    let attempt () =
      match counted dev "entry" (fun () -> D.entry im.i f) with
      | Rig_edge.Entry h -> Some (Some h)
      | Absent -> Some None
      | No_memory n -> last := n; None
    in
    with_rounds dev ~asks_total:!entry_asks attempt (fun () -> raise (Out_of_memory !last))

  let prepare im f =
    start "prepare";
    (* prepare reports nothing: its exceptions other than Fault lose nothing
       and are not the program's business (EXC-3, CODE-6). *)
    try counted im.idev "prepare" (fun () -> D.prepare im.i f) with
    | Device_lost _ as e -> raise e
    | _ -> ()

  (* ---- work ---- *)

  (* A submission asks grow only after room answered RIG_GROW (QUEUE-5), at
     most four times (QUEUE-6), and after a Short asks room again (QUEUE-4). *)
  let max_grows = step asks
  let grow dev = counted dev "grow" (fun () -> D.grow dev.d)

  (* After a fourth grow that answered Grown, RIG_GROW again is no memory. *)
  let grown_out = step (fun grows -> grows >= !max_grows)

  (* After a Short: the round of reclamation that follows the [grows]th
     grow; answers how many grows the submission has had. *)
  let short_round_conforming dev ~grows = reclaim dev (min grows 3); grows
  let short_round = step short_round_conforming

  (* The n Out_of_memory carries after a submission's last Short: that
     Short's, not the one before ([previous]) (QUEUE-6). *)
  let short_out = step (fun ~previous:_ n -> n)

  (* [short]: the n of the last Short, for the Out_of_memory of a
     submission whose fourth grow answered Grown and whose room still
     answers RIG_GROW. *)
  let rec asking dev s grows short =
    match c_call dev "room" (fun () -> dev.facts.queue.room s) with
    | Rig_edge.Room -> ()
    | Grow when !grown_out grows -> raise (Out_of_memory short)
    | Grow -> (
        match grow dev with
        | Grown -> asking dev s (grows + 1) short
        | Short n ->
            let grows = grows + 1 in
            if grows >= !max_grows then raise (Out_of_memory (!short_out ~previous:short n));
            asking dev s (!short_round dev ~grows) n)

  let ask_room_conforming dev s = asking dev s 0 0
  let ask_room = step ask_room_conforming

  (* A failed submit or commit loses the device (CNT-6). *)
  let lose_failed = step (fun dev why -> lose dev why)

  let submit dev parts =
    start "submit";
    let handle b =
      if b.dev != dev && (match b.kind with Peer_of _ -> false | _ -> true) then
        invalid_arg "Rig.submit: a buffer of another device";
      (place b).handle
    in
    let arg = function Buf b -> handle b | Int n -> Int64.of_int n in
    let lay_out = function
      | Fill (b, off, len, byte) -> Rig_edge.Fill { dst = handle b; off; len; byte }
      | Copy (s, so, d, doff, len) -> Copy { src = handle s; src_off = so; dst = handle d; dst_off = doff; len }
      | Launch (e, args) -> Launch { entry = e; args = List.map arg args }
    in
    let uses = List.concat_map (function
      | Fill (b, _, _, _) -> [ b ] | Copy (s, _, d, _, _) -> [ s; d ]
      | Launch (_, args) -> List.filter_map (function Buf b -> Some b | Int _ -> None) args) parts
    in
    let s = Rig_edge.encode (List.map lay_out parts) in
    let q = dev.facts.queue in
    !ask_room dev s;
    let value = with_rig (fun () ->
        let v = dev.next_value in
        dev.next_value <- v + 1;
        if dev.observed >= dev.last_submitted then dev.last_move <- now_ms ();
        dev.last_submitted <- v;
        List.iter (fun b -> b.last_use <- v) uses;
        dev.kept <- (v, List.map Obj.repr uses) :: dev.kept;
        v)
    in
    if not (c_call dev "submit" (fun () -> q.submit s ~value)) then begin
      !lose_failed dev "failed submit";
      raise (Device_lost "failed submit")
    end;
    if not (c_call dev "commit" (fun () -> q.commit ())) then begin
      !lose_failed dev "failed commit";
      raise (Device_lost "failed commit")
    end;
    value

  let wait dev v =
    start "wait";
    wait_word dev v

  (* ---- the mutants of these steps (Rig_mutant.all) ---- *)

  module Mutants = struct
    (* free-before-mapping (GUAR-2): a mapping over a buffer does not keep it. *)
    let unmapped (_ : buffer) = false

    (* free-under-work (MEM-3): a buffer goes at once, whatever work uses it. *)
    let work_ignored (_ : buffer) = true

    (* signaled-after-word-freed (TIME-2): reads signaled once more after. *)
    let free_own_word_then_read dev =
      free_own_word_conforming dev;
      ignore (try D.signaled dev.d with _ -> 0)

    (* double-free (GUAR-1): close frees again the regions the program freed. *)
    module Double_free = struct
      let given : (device * buffer) list ref = ref []

      let forget_buffer dev b =
        forget_buffer_conforming dev b;
        given := (dev, b) :: !given

      let left dev = dev.buffers @ List.filter_map (fun (d, b) -> if d == dev then Some b else None) !given
      let to_free (_ : buffer) = true
    end

    (* stop-twice (CNT-1): stop again at every close, stopped or not. *)
    let stop_again dev = call_stop dev ~fault:dev.fault

    (* free-after-stop-raised (STOP-7): a stop that raised is taken for the
       device's work ended, and what it kept is given back at once. *)
    module Stop_raised = struct
      let raised : device list ref = ref []

      let stop dev =
        if not dev.stopped then
          call_stop dev ~fault:dev.fault ~raised:(fun dev -> with_rig (fun () -> raised := dev :: !raised))

      let await_word dev = with_rig (fun () -> List.memq dev !raised) || await_word_conforming dev
    end

    (* stop-waits-for-none (CNT-1): rig counts its calls, but close stops
       the device while they are in flight. *)
    let idle_unawaited (_ : device) = ()

    (* stop-no-fault (STOP-1): stop is told no Fault. *)
    let stop_no_fault dev = if not dev.stopped then call_stop dev ~fault:None

    (* call-after-stop (CNT-4): after stop, sleeps on the word too. *)
    let word_reached_after_sleep dev =
      (try P.masked (fun () -> D.sleep dev.d ~seen:dev.observed ~still_ms:10) with _ -> ());
      word_reached_conforming dev

    (* free-before-word (STOP-7): frees without waiting for the word. *)
    let word_unawaited (_ : device) = true

    (* map-peer-own (GUAR-3): a buffer of the device itself goes to the driver. *)
    let own_allowed (_ : device) (_ : buffer) = ()

    (* kept-after-failed-submit (CNT-6): a failed submit or commit loses nothing. *)
    let failure_kept (_ : device) (_ : string) = ()

    (* unload-twice (GUAR-5): close unloads the images unloaded already. *)
    let still_loaded (_ : image) = true

    (* unrounded-alloc (MEM-1): the buffer's length as it is. *)
    let unrounded n = n

    (* call-in-lock (LOCK-1): alloc inside a lock of rig's. *)
    let alloc_in_lock dev m n =
      counted dev "alloc" (fun () -> P.Lock.protect (P.Lock.create "rig.alloc") (fun () -> D.alloc dev.d m n))

    (* unmasked-call (SIG-1): alloc with the thread's signals unblocked. *)
    let alloc_unmasked dev m n = counted ~mask:false dev "alloc" (fun () -> D.alloc dev.d m n)

    (* no-pinned-fallback (GUAR-6): Device after Mapped, whatever host_addresses says. *)
    let device_fallback (_ : device) = Rig_edge.Device

    (* peer-self (GUAR-3): asks peer of the device with itself first. *)
    let peers_self a b =
      ignore (D.peer a.d a.d);
      peers_conforming a b

    (* [f ()], an exception from which loses [dev], as one from the
       functions of EXC-1's list does *)
    let losing dev fn f =
      try f ()
      with e ->
        lose dev (fn ^ ": " ^ Printexc.to_string e);
        raise e

    (* lose-on-peer-exn (EXC-3): an exception from peer loses the device that asked. *)
    let peers_losing a b = losing a "peer" (fun () -> peers_conforming a b)

    (* lose-on-locate-exn (EXC-3): an exception from locate loses the region's device. *)
    let locate_losing b = losing b.dev "locate" (fun () -> locate_conforming b)

    (* map-host-anyway (MEM-6), dma-any-region (GUAR-4): no refusal. *)
    let refuses_nothing _ = ()

    (* grow-unasked (QUEUE-5): grow before room answered RIG_GROW. *)
    let grow_first dev s =
      ignore (grow dev);
      ask_room_conforming dev s

    (* grown-unbounded (QUEUE-6): RIG_GROW after a fourth Grown asks grow again. *)
    let never_grown_out (_ : int) = false

    (* grow-again (QUEUE-4): after the first Short, asks grow again, not room. *)
    let short_grows_again dev ~grows =
      let grows = if grows = 1 then (ignore (grow dev); grows + 1) else grows in
      short_round_conforming dev ~grows

    (* short-no-round (QUEUE-4): after a Short, room again with no round. *)
    let short_unreclaimed (_ : device) ~grows = grows

    let variants =
      [
        ("kept-after-failed-submit", fun () -> lose_failed := failure_kept);
        ("map-peer-own", fun () -> refuse_own := own_allowed);
        ("free-before-mapping", fun () -> mapped := unmapped);
        ("free-under-work", fun () -> work_done := work_ignored);
        ("signaled-after-word-freed", fun () -> free_own_word := free_own_word_then_read);
        ("double-free", fun () ->
            forget_buffer := Double_free.forget_buffer;
            left := Double_free.left;
            to_free := Double_free.to_free);
        ("stop-twice", fun () -> stop := stop_again);
        ("stop-waits-for-none", fun () -> await_idle := idle_unawaited);
        ("stop-no-fault", fun () -> stop := stop_no_fault);
        ("call-after-stop", fun () -> word_reached := word_reached_after_sleep);
        ("free-before-word", fun () -> await_word := word_unawaited);
        ("free-after-stop-raised", fun () ->
            stop := Stop_raised.stop;
            await_word := Stop_raised.await_word);
        ("unload-twice", fun () -> loaded := still_loaded);
        ("unrounded-alloc", fun () -> round_up := unrounded);
        ("call-in-lock", fun () -> call_alloc := alloc_in_lock);
        ("unmasked-call", fun () -> call_alloc := alloc_unmasked);
        ("no-pinned-fallback", fun () -> fallback := device_fallback);
        ("peer-self", fun () -> peers := peers_self);
        ("lose-on-peer-exn", fun () -> peers := peers_losing);
        ("lose-on-locate-exn", fun () -> locate := locate_losing);
        ("map-host-anyway", fun () -> refuse_map_host := refuses_nothing);
        ("dma-any-region", fun () -> refuse_dma := refuses_nothing);
        ("three-asks", fun () -> entry_asks := asks - 1);
        ("five-asks", fun () -> max_grows := asks + 1);
        ("short-gives-up", fun () ->
            max_grows := 1;
            grown_out := fun grows -> grows >= asks);
        ("oom-previous-short", fun () -> short_out := fun ~previous _ -> previous);
        ("grow-unasked", fun () -> ask_room := grow_first);
        ("grown-unbounded", fun () -> grown_out := never_grown_out);
        ("grow-again", fun () -> short_round := short_grows_again);
        ("short-no-round", fun () -> short_round := short_unreclaimed);
      ]
  end

  (* Every mutant of Rig_mutant.all has its variant here or in Rig_calls. *)
  let () =
    let variants = C.Mutants.variants @ Mutants.variants in
    List.iter
      (fun (n, _, _) -> if not (List.mem_assoc n variants) then invalid_arg ("Rig: no variant of the mutant " ^ n))
      Rig_mutant.all;
    Rig_mutant.register variants
end
