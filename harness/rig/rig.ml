(* The reference rig; see rig.mli.  rig's own lock guards its records only:
   no driver call is ever made while it is held (LOCK-1). *)

exception Device_lost of string
exception Out_of_memory of int

module P = Rig_edge_primitives
module M = Rig_mutant

(* An allocation tries four times: once, then after each of three rounds of
   reclamation (spec/decisions.md, "Rounds of reclamation"). *)
let asks = 4

(* The functions whose other exceptions lose the device (EXC-1). *)
let losing_fns =
  [ "alloc"; "free"; "map_peer"; "map_host"; "dma"; "image"; "reach"; "entry"; "grow"; "unload" ]

let now_ms () = Unix.gettimeofday () *. 1000.

module Make (D : Rig_edge.Driver) = struct
  type device = {
    d : D.t;
    name : string;
    facts : D.region Rig_edge.facts;
    mutable in_flight : int;
    mutable lost : string option;
    mutable fault : string option;  (* for stop: a Fault's text or the hang bound *)
    mutable stopped : bool;
    mutable released : bool;
    mutable word_freed : bool;
    mutable drained : bool;  (* stopped, and its word read the last value: its memory may go *)
    mutable next_value : int;
    mutable last_submitted : int;
    mutable observed : int;
    mutable last_move : float;
    mutable buffers : buffer list;  (* live: not yet given back to the driver *)
    mutable given_back : buffer list;  (* only for the double-free mutant *)
    mutable images : image list;
    mutable kept : (int * Obj.t list) list;  (* Rig.Submission.make: values work keeps alive *)
  }

  and buffer = {
    b : D.region;
    dev : device;
    bsize : int;
    kind : kind;
    mutable user_freed : bool;
    mutable freed : bool;
    mutable maps : int;      (* live map_peer buffers over it *)
    mutable last_use : int;  (* the value of the last work that uses it *)
  }

  and kind = Allocated | Peer_of of buffer | Host
  and image = { i : D.image; idev : device; mutable unloaded : bool }

  type arg = Buf of buffer | Int of int

  type part =
    | Fill of buffer * int * int * int
    | Copy of buffer * int * buffer * int * int
    | Launch of int64 * arg list

  let rig_lock = P.Lock.create ~rig:true "rig"
  let changed = Condition.create ()
  let with_rig f = P.Lock.protect rig_lock f
  let hang_ms = ref 2000
  let set_hang_ms ms = hang_ms := ms
  let by_name : (string, device) Hashtbl.t = Hashtbl.create 8

  (* Every public call starts here: a call of rig's made inside a lock raises
     Invalid_argument as it starts (LOCK-2). *)
  let start fn = if not (M.is "no-lock-check") then P.check_unheld ("Rig." ^ fn)

  let lose dev ?fault why =
    with_rig (fun () ->
        if dev.lost = None then begin
          dev.lost <- Some why;
          dev.fault <- fault
        end;
        Condition.broadcast changed)

  let enter dev =
    with_rig (fun () ->
        match dev.lost with
        | Some why -> raise (Device_lost why)
        | None -> dev.in_flight <- dev.in_flight + 1)

  let leave dev =
    with_rig (fun () ->
        dev.in_flight <- dev.in_flight - 1;
        Condition.broadcast changed)

  let loses fn e =
    match e with
    | Invalid_argument _ when fn = "entry" -> M.is "lose-on-entry-invalid"
    | _ when fn = "prepare" -> M.is "lose-on-prepare-exn"
    | _ -> List.mem fn losing_fns && not (M.is "ignore-exception")

  (* The no-stop-after-async mutant: an exception it does not know (an
     asynchronous one) makes it forget the device: close neither stops nor
     frees nor unloads it. *)
  let recognised = function
    | D.Fault _ | Invalid_argument _ | Failure _ | Not_found | Stdlib.Out_of_memory | Out_of_memory _ | Device_lost _ | Sys_error _ | End_of_file | Exit
    | Division_by_zero | Stack_overflow ->
        true
    | _ -> false

  let forget dev =
    with_rig (fun () ->
        dev.stopped <- true;
        dev.released <- true)

  (* A counted call: counted, masked, its outcome recorded (a loss) before
     the mask is given back (SIG-1). *)
  let counted ?(mask = true) ?(count = true) dev fn f =
    if count then enter dev
    else with_rig (fun () -> match dev.lost with Some why -> raise (Device_lost why) | None -> ());
    let m = if mask then Some (P.mask ()) else None in
    let finish () =
      if count then leave dev;
      Option.iter P.restore m
    in
    match f () with
    | v -> finish (); v
    | exception D.Fault why ->
        if M.is "ignore-fault" then with_rig (fun () -> if dev.fault = None then dev.fault <- Some why)
        else lose dev ~fault:why (fn ^ ": Fault " ^ why);
        finish ();
        raise (Device_lost why)
    | exception e ->
        if loses fn e then lose dev (fn ^ ": " ^ Printexc.to_string e);
        finish ();
        if M.is "no-stop-after-async" && not (recognised e) then forget dev;
        raise e

  (* The C functions: masked, counted where the device declares may_block (CNT-3). *)
  let c_call dev fn f = counted ~count:(dev.facts.may_block && not (M.is "uncounted-c-calls")) dev fn f

  let uncounted_masked f = P.masked f

  (* After stop, and for reclamation on a stopped device: uncounted, faults dropped. *)
  let dropping_faults f = try Some (P.masked f) with _ -> None

  let note_word dev w =
    with_rig (fun () ->
        if w > dev.observed then begin
          dev.observed <- w;
          dev.last_move <- now_ms ();
          if not (M.is "keep-after-stop" && dev.stopped) then
            dev.kept <- List.filter (fun (v, _) -> v > w) dev.kept
        end)

  let signaled dev =
    let w =
      if dev.stopped then (try D.signaled dev.d with _ -> dev.observed)
      else counted ~mask:false dev "signaled" (fun () -> D.signaled dev.d)
    in
    note_word dev w;
    w

  (* ---- giving memory back ---- *)

  let releasable b =
    b.user_freed && (not b.freed)
    && (b.maps = 0 || M.is "free-before-mapping")
    && (b.last_use <= b.dev.observed || M.is "free-under-work")

  (* The word goes last: once no buffer of the stopped device is left. *)
  let free_word dev =
    if not dev.word_freed then begin
      dev.word_freed <- true;
      Option.iter (fun w -> ignore (dropping_faults (fun () -> D.free dev.d w))) dev.facts.own_word;
      if M.is "signaled-after-word-freed" then ignore (try D.signaled dev.d with _ -> 0)
    end

  (* A free is never asked again, also when it raised (GUAR-1).  A mapping
     whose free raised may still map what it maps: that buffer then stays
     for good (GUAR-2).  Giving back the last mapping over a buffer of a
     drained device gives back that buffer too, which its device's release
     had to leave. *)
  let rec give_back b =
    let dev = b.dev in
    let call () = D.free dev.d b.b in
    let outcome =
      if dev.stopped then (match dropping_faults call with Some () -> Ok () | None -> Error None)
      else
        match counted dev "free" call with
        | () -> Ok ()
        | exception Device_lost _ -> Error None
        | exception e -> Error (Some e)
    in
    let freed_over =
      with_rig (fun () ->
          b.freed <- true;
          dev.buffers <- List.filter (( != ) b) dev.buffers;
          if M.is "double-free" then dev.given_back <- b :: dev.given_back;
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

  (* ---- waiting on the word ---- *)

  let wait_word dev v =
    let rec loop () =
      (* A device lost meanwhile (a close on another thread) is not read again. *)
      (match dev.lost with Some why -> raise (Device_lost why) | None -> ());
      let w = signaled dev in
      if w < v then begin
        let stalled = now_ms () -. dev.last_move in
        let bounded = not (M.is "no-hang-bound") in
        if bounded && stalled >= float !hang_ms then begin
          let why = Printf.sprintf "hang: the word stood at %d for %d ms" w !hang_ms in
          lose dev ~fault:why why;
          raise (Device_lost why)
        end;
        let still_ms = if bounded then max 1 (!hang_ms - int_of_float stalled) else 100 in
        let sleep () = D.sleep dev.d ~seen:w ~still_ms in
        if M.is "uncounted-sleep" then P.masked sleep else counted dev "sleep" sleep;
        loop ()
      end
    in
    loop ()

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

  let new_device d name facts =
    { d; name; facts; in_flight = 0; lost = None; fault = None; stopped = false; released = false; word_freed = false; drained = false;
      next_value = 1; last_submitted = 0; observed = 0; last_move = now_ms (); buffers = [];
      images = []; kept = []; given_back = [] }

  (* Stop once no counted call is in flight (CNT-1, STOP-1), then give back
     everything once the word reads the last value (STOP-7). *)
  let stop_and_release dev ~reason =
    with_rig (fun () ->
        if dev.lost = None then dev.lost <- Some reason;
        while dev.in_flight > 0 do P.Lock.await rig_lock changed done);
    if (not dev.stopped) || M.is "stop-twice" then begin
      dev.stopped <- true;
      let fault = if M.is "stop-no-fault" then None else dev.fault in
      (try P.masked (fun () -> D.stop dev.d ~fault) with _ -> ())
    end;
    if not dev.released then begin
      dev.released <- true;
      (* rig lets go of what the device's submissions keep (CNT-5). *)
      if not (M.is "keep-after-stop") then with_rig (fun () -> dev.kept <- []);
      let word_reached () =
        if M.is "call-after-stop" then
          (try P.masked (fun () -> D.sleep dev.d ~seen:dev.observed ~still_ms:10) with _ -> ());
        signaled dev >= dev.last_submitted
      in
      let deadline = now_ms () +. float !hang_ms in
      let rec await pause =
        if word_reached () then true
        else if now_ms () > deadline then false
        else (Thread.delay pause; await (Float.min 0.05 (pause *. 2.)))
      in
      let reached = M.is "free-before-word" || await 0.0005 in
      (* A word that never reads the last value keeps everything: freeing
         memory that work may still write is worse than leaking it. *)
      if reached then begin
        dev.drained <- true;
        let everything = if M.is "double-free" then dev.buffers @ dev.given_back else dev.buffers in
        let mappings, others = List.partition (fun b -> match b.kind with Peer_of _ -> true | _ -> false) everything in
        let again = M.is "double-free" in
        List.iter (fun b -> if again || not b.freed then give_back b) mappings;
        (* A buffer another device still maps stays until that mapping goes. *)
        let mapped b = b.maps > 0 && not (M.is "free-before-mapping") in
        List.iter (fun b -> if (again || not b.freed) && not (mapped b) then give_back b) others;
        List.iter
          (fun im ->
            if (not im.unloaded) || M.is "unload-twice" then begin
              im.unloaded <- true;
              ignore (dropping_faults (fun () -> D.unload im.i))
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

  let alloc dev m n =
    start "alloc";
    if n <= 0 then invalid_arg "Rig.alloc: size must be positive";
    let n' = if M.is "unrounded-alloc" then n else (n + Rig_edge.word - 1) / Rig_edge.word * Rig_edge.word in
    let one m =
      let call () = D.alloc dev.d m n' in
      if M.is "call-in-lock" then
        counted dev "alloc" (fun () -> P.Lock.protect (P.Lock.create "rig.alloc") call)
      else counted ~mask:(not (M.is "unmasked-call")) dev "alloc" call
    in
    let attempt () =
      match one m with
      | Some r -> Some (r, m)
      | None when m = Rig_edge.Mapped ->
          let fallback =
            if dev.facts.host_addresses || M.is "no-pinned-fallback" then Rig_edge.Device else Pinned
          in
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

  let peers a b =
    if M.is "peer-self" then ignore (D.peer a.d a.d);
    D.peer a.d b.d

  let map_peer dev b =
    start "map_peer";
    if b.dev == dev then invalid_arg "Rig.map_peer: the buffer is already the device's";
    if not (peers dev b.dev) then invalid_arg "Rig.map_peer: the devices are not peers";
    let r = counted dev "map_peer" (fun () -> D.map_peer dev.d b.dev.d b.b) in
    with_rig (fun () -> b.maps <- b.maps + 1);
    make_buffer dev r b.bsize (Peer_of b)

  let map_host dev p n =
    start "map_host";
    if (not dev.facts.maps_host) && not (M.is "map-host-anyway") then
      invalid_arg "Rig.map_host: the device does not map host memory";
    if n <= 0 || Nativeint.rem p 4096n <> 0n then invalid_arg "Rig.map_host: p must start a page, n be positive";
    let r = counted dev "map_host" (fun () -> D.map_host dev.d p n) in
    make_buffer dev r n Host

  let dma b ~fn =
    start "dma";
    if b.kind <> Allocated && not (M.is "dma-any-region") then
      invalid_arg "Rig.dma: only for memory alloc made";
    counted b.dev "dma" (fun () -> D.dma b.dev.d b.b ~fn)

  let place b = D.locate b.dev.d b.b

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
    let asks_total = if M.is "three-asks" then asks - 1 else asks in
    with_rounds dev ~asks_total attempt (fun () -> raise (Out_of_memory !last))

  let prepare im f =
    start "prepare";
    (* prepare reports nothing: its exceptions other than Fault lose nothing
       and are not the program's business (EXC-3, CODE-6). *)
    try counted im.idev "prepare" (fun () -> D.prepare im.i f) with
    | Device_lost _ as e -> raise e
    | _ -> ()

  (* ---- work ---- *)

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
    let max_grows = if M.is "five-asks" then asks + 1 else asks in
    if M.is "grow-unasked" then ignore (counted dev "grow" (fun () -> D.grow dev.d));
    (* [short]: the n of the last Short, for the Out_of_memory of a
       submission whose fourth grow answered Grown and whose room still
       answers RIG_GROW. *)
    let rec ask grows short =
      match c_call dev "room" (fun () -> q.room s) with
      | Rig_edge.Room -> ()
      | Grow when grows >= max_grows && not (M.is "grown-unbounded") -> raise (Out_of_memory short)
      | Grow -> (
          match counted dev "grow" (fun () -> D.grow dev.d) with
          | Grown -> ask (grows + 1) short
          | Short n ->
              let grows = grows + 1 in
              if grows >= max_grows then raise (Out_of_memory n);
              let grows =
                if M.is "grow-again" && grows = 1 then (ignore (counted dev "grow" (fun () -> D.grow dev.d)); grows + 1)
                else grows
              in
              reclaim dev (min grows 3);
              ask grows n)
    in
    ask 0 0;
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
      lose dev "failed submit";
      raise (Device_lost "failed submit")
    end;
    if not (c_call dev "commit" (fun () -> q.commit ())) then begin
      lose dev "failed commit";
      raise (Device_lost "failed commit")
    end;
    value

  let wait dev v =
    start "wait";
    wait_word dev v
end
