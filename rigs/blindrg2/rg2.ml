(* rg2: a small rig, written from spec/rig_edge_driver.txt alone (its base
   copied from rigs/blindrg/rg.ml).  Each rig of Rg2_rigs runs it with at most one deviation switched on ([bug]), the way a
   real implementation would get one rule wrong. *)

module V = Validate.Make (Hostmem.D)
module P = Rig_edge_primitives

exception Device_lost of string
exception Out_of_memory of int

(* The one deviation of the rig being run ("" for none). *)
let bug = ref ""
let is b = String.equal !bug b

(* The hang bound (hang_ms). *)
let hang_ms = ref 400

type buf = {
  owner : dev;
  r : V.region;
  kind : [ `Alloc | `Peer of buf | `Host | `Word ];
  mutable freed : bool;
}

and dev = {
  name : string;
  d : V.t;
  facts : V.region Rig_edge.facts;
  lock : P.Lock.t;          (* rig's: the count and the flags *)
  cond : Condition.t;
  mutable inflight : int;
  mutable lost : bool;
  mutable fault : string option;  (* stop's argument *)
  mutable closing : bool;
  mutable stopped : bool;
  mutable cleaned : bool;
  mutable last_value : int;       (* last value given to submit *)
  mutable bufs : buf list;        (* live regions of this device *)
  mutable pool : buf list;        (* idle buffers rig caches; reclamation frees them *)
  mutable images : (V.image * string list) list;
}

(* rig's locks are counted locks.  Only the rigs [lock-as-check] and
   [signaled-locked] mark them as rig's (~rig:true); the others count them as
   plain locks, so that a forgotten check of rig_holds is not caught by the
   edge's refusal of a rig lock inside another lock (LOCK-7). *)
let rig_marked () = is "lock-as-check" || is "signaled-locked"
let table_lock = P.Lock.create "rg2.table"
let table_lock_rig = P.Lock.create ~rig:true "rg2.table.rig"
let devices : (string, dev) Hashtbl.t = Hashtbl.create 4
let mappings : buf list ref = ref []   (* live map_peer regions *)

(* rig's own count of its locks per thread (read only by [own-locks-only]). *)
let own_m = Mutex.create ()
let own : (int, int) Hashtbl.t = Hashtbl.create 8
let own_add k =
  let id = Thread.id (Thread.self ()) in
  Mutex.protect own_m (fun () ->
      Hashtbl.replace own id (k + Option.value ~default:0 (Hashtbl.find_opt own id)))
let own_held () =
  let id = Thread.id (Thread.self ()) in
  Mutex.protect own_m (fun () -> Option.value ~default:0 (Hashtbl.find_opt own id))

let protect l f =
  P.Lock.protect l (fun () -> own_add 1; Fun.protect ~finally:(fun () -> own_add (-1)) f)

(* The check every request of rig's starts with (LOCK-2). *)
let check name =
  if is "wrapper" then ()  (* the shared entry point [api] checks *)
  else if is "lock-as-check" then
    (* the first thing of every request: a look at the device table under
       rig's own lock, which the edge refuses inside any lock *)
    P.Lock.protect table_lock_rig (fun () -> ())
  else if is "wrong-exn" then begin
    if P.holds () <> 0 then failwith (name ^ ": called inside a lock")
  end
  else if is "own-locks-only" then begin
    if own_held () <> 0 then invalid_arg (name ^ ": called inside a lock of rig's")
  end
  else P.check_unheld name

(* The shared entry point of the [wrapper] rig: one check for all requests. *)
let api name f =
  if is "wrapper" then P.check_unheld ("rg2." ^ name);
  f ()

(* ------------------------------------------------------------ counting *)

let enter dv fn =
  protect dv.lock (fun () ->
      if dv.lost || dv.closing then raise (Device_lost (dv.name ^ ": " ^ fn));
      dv.inflight <- dv.inflight + 1)

let leave dv =
  protect dv.lock (fun () ->
      dv.inflight <- dv.inflight - 1;
      if dv.inflight = 0 then Condition.broadcast dv.cond)

let lose dv fault =
  protect dv.lock (fun () ->
      if not dv.lost then begin
        dv.lost <- true;
        dv.fault <- fault
      end)

(* How an exception of a call is read (Drivers): [Losing] for alloc, free,
   map_peer, map_host, dma, image, the place function, grow, unload;
   [Entry] for entry (Invalid_argument loses nothing); [Keeps] for prepare,
   sleep, signaled (only Fault loses). *)
type kind = Losing | Entry | Keeps

let is_fault = function Hostmem.D.Fault _ | V.Fault _ -> true | _ -> false
let fault_text = function Hostmem.D.Fault w | V.Fault w -> w | e -> Printexc.to_string e

let counted ?(mask = true) dv fn kind f =
  enter dv fn;
  let m = if mask then Some (P.mask ()) else None in
  let r = match f () with v -> Ok v | exception e -> Error e in
  (match r with
   | Error e when is_fault e ->
     if is "fault-ignored" && fn = "sleep" then
       protect dv.lock (fun () -> dv.fault <- Some (fault_text e))
     else lose dv (Some (fault_text e))
   | Error (Invalid_argument _) when kind = Entry -> ()
   | Error (Invalid_argument _) when is "reach-invalid-kept" && fn = "reach" -> ()
   | Error _ when kind = Losing || kind = Entry -> lose dv None
   | _ -> ());
  leave dv;
  Option.iter P.restore m;
  match r with Ok v -> v | Error e -> raise e

let masked f = P.masked f

(* ---------------------------------------------------------------- words *)

let signaled dv =
  if is "signaled-locked" then
    (* the word is read under the device's lock of rig's, with the count
       taken by hand: "rig calls signaled while it holds a lock of its own" *)
    protect dv.lock (fun () ->
        if dv.lost || dv.closing then raise (Device_lost (dv.name ^ ": signaled"));
        dv.inflight <- dv.inflight + 1;
        let r = match V.signaled dv.d with v -> Ok v | exception e -> Error e in
        dv.inflight <- dv.inflight - 1;
        if dv.inflight = 0 then Condition.broadcast dv.cond;
        (match r with
         | Error e when is_fault e -> if not dv.lost then (dv.lost <- true; dv.fault <- Some (fault_text e))
         | _ -> ());
        match r with Ok v -> v | Error e -> raise e)
  else counted ~mask:false dv "signaled" Keeps (fun () -> V.signaled dv.d)

let now_ms () = int_of_float (Unix.gettimeofday () *. 1000.)

(* Wait until the word shows [v], bounded by the hang bound. *)
let wait ?(still = 1000) dv v =
  let start = ref (now_ms ()) in
  let rec loop () =
    let s = signaled dv in
    if s >= v then ()
    else begin
      let waited = now_ms () - !start in
      if waited >= !hang_ms then begin
        lose dv (Some (Printf.sprintf "hang bound: %d ms" !hang_ms));
        raise (Device_lost (dv.name ^ ": hang bound"))
      end;
      let still_ms = max 1 (min still (!hang_ms - waited)) in
      (if is "sleep-uncounted" then masked (fun () -> V.sleep dv.d ~seen:s ~still_ms)
       else counted dv "sleep" Keeps (fun () -> V.sleep dv.d ~seen:s ~still_ms));
      if is "hang-reset" then start := now_ms ();
      loop ()
    end
  in
  try loop () with
  | e when is_fault e && not (is "fault-ignored") -> raise (Device_lost (fault_text e))

(* -------------------------------------------------------------- memory *)

let free_now dv b =
  if not b.freed then begin
    if not (is "double-free") then b.freed <- true;
    protect dv.lock (fun () ->
        if not (is "double-free") then dv.bufs <- List.filter (fun x -> x != b) dv.bufs;
        dv.pool <- List.filter (fun x -> x != b) dv.pool);
    (match b.kind with
     | `Peer _ -> mappings := List.filter (fun x -> x != b) !mappings
     | _ -> ());
    counted dv "free" Losing (fun () -> V.free dv.d b.r)
  end

(* A round of reclamation: the idle buffers rig caches go back. *)
let reclaim dv =
  let idle = protect dv.lock (fun () -> let p = dv.pool in dv.pool <- []; p) in
  List.iter (fun b -> free_now dv b) idle

let round4 n = (n + 3) land lnot 3

let add dv b = protect dv.lock (fun () -> dv.bufs <- b :: dv.bufs)

let alloc_once dv (m : Rig_edge.memory) n =
  if is "alloc-under-lock" then begin
    (* the region table's lock around the driver's alloc, so that the new
       region is registered atomically *)
    enter dv "alloc";
    let mk = P.mask () in
    let reg = P.Lock.create ~rig:true "rg.regions" in
    let r =
      Fun.protect ~finally:(fun () -> leave dv; P.restore mk) (fun () ->
          protect reg (fun () -> V.alloc dv.d m n))
    in
    r
  end
  else counted dv "alloc" Losing (fun () -> V.alloc dv.d m n)

let alloc dv (m : Rig_edge.memory) n =
  check "rg.alloc";
  let n = if is "zero-alloc" then round4 n else (if n <= 0 then invalid_arg "rg.alloc: size"; round4 n) in
  let try_ () =
    match m with
    | Mapped ->
      if is "pinned-first" then
        (match alloc_once dv Pinned n with Some r -> Some r | None -> alloc_once dv Mapped n)
      else (
        match alloc_once dv Mapped n with
        | Some r -> Some r
        | None ->
          match alloc_once dv Pinned n with
          | Some r -> Some r
          | None -> if dv.facts.host_addresses then alloc_once dv Device n else None)
    | m -> alloc_once dv m n
  in
  let rec go tries =
    match try_ () with
    | Some r -> let b = { owner = dv; r; kind = `Alloc; freed = false } in add dv b; b
    | None -> if tries >= 4 then raise (Out_of_memory n) else (reclaim dv; go (tries + 1))
  in
  go 1

(* Give a buffer back to rig's cache: it stays allocated, idle. *)
let release b = check "rg.release"; protect b.owner.lock (fun () -> b.owner.pool <- b :: b.owner.pool)

(* Frees asked inside a lock ([deferred-free]), done at the close. *)
let deferred : buf list ref = ref []

let free b =
  if is "deferred-free" && P.holds () <> 0 then
    (* "a free from a callback cannot wait for the work": it is put off,
       quietly, and done at the close (the buffer stays in dv.bufs) *)
    deferred := b :: !deferred
  else begin
  check "rg.free";
  let dv = b.owner in
  if b.freed && not (is "double-free") then invalid_arg "rg.free: freed";
  (* no work of d that uses it may run: wait for everything submitted *)
  if not (is "free-busy") then wait dv dv.last_value;
  if (not (is "free-under-mapping"))
  && List.exists (fun m -> match m.kind with `Peer o -> o == b | _ -> false) !mappings
  then invalid_arg "rg.free: still mapped by another device"
  else free_now dv b
  end

(* [trim dv]: give back rig's idle buffers (a round of reclamation asked by
   the program).  Does nothing when none is cached. *)
let trim dv =
  if is "fastpath-return" && protect dv.lock (fun () -> dv.pool = []) then ()
  else begin
    check "rg.trim";
    reclaim dv
  end

(* [sync dv]: wait for everything submitted to dv (nothing to do when
   nothing was submitted). *)
let sync dv =
  check "rg.sync";
  if dv.last_value > 0 then wait dv dv.last_value

let write b off s =
  check "rg.write";
  let dv = b.owner in
  let p = V.locate dv.d b.r in
  match p.reach with
  | None -> invalid_arg "rg.write: not reachable"
  | Some f -> counted dv "reach" Losing (fun () -> f (Write { off; from = s }))

let read b off n =
  if not (is "check-after-locate") then check "rg.read";
  let dv = b.owner in
  let p = V.locate dv.d b.r in
  (* check-after-locate: locate "may be called at any time", so its author
     asked it first and checked after *)
  if is "check-after-locate" then check "rg.read";
  match p.reach with
  | None -> invalid_arg "rg.read: not reachable"
  | Some f ->
    let into = Bytes.create n in
    counted dv "reach" Losing (fun () -> f (Read { off; into }));
    Bytes.to_string into

(* [share into b]: b's memory for the device [into]. *)
let share into b =
  check "rg.share";
  if into == b.owner && not (is "self-map") then b
  else if not (V.peer into.d b.owner.d) then invalid_arg "rg.share: no peer access"
  else begin
    let r = counted into "map_peer" Losing (fun () -> V.map_peer into.d b.owner.d b.r) in
    let m = { owner = into; r; kind = `Peer b; freed = false } in
    add into m;
    mappings := m :: !mappings;
    m
  end

let dma b fn =
  check "rg.dma";
  (match b.kind with `Alloc -> () | _ -> if not (is "dma-on-mapping") then invalid_arg "rg.dma: not an allocation");
  counted b.owner "dma" Losing (fun () -> V.dma b.owner.d b.r ~fn)

let page = 4096

let map_host dv (p : nativeint) n =
  check "rg.map_host";
  if not dv.facts.maps_host then invalid_arg "rg.map_host: unsupported";
  if n <= 0 then invalid_arg "rg.map_host: size";
  let base, len =
    if is "map-host-unaligned" then (p, n)
    else
      let off = Nativeint.to_int (Nativeint.rem p (Nativeint.of_int page)) in
      (Nativeint.sub p (Nativeint.of_int off), n + off)
  in
  let r = counted dv "map_host" Losing (fun () -> V.map_host dv.d base len) in
  let b = { owner = dv; r; kind = `Host; freed = false } in
  add dv b;
  b

(* ---------------------------------------------------------------- code *)

let load dv binary =
  check "rg.load";
  match counted dv "image" Losing (fun () -> V.image dv.d binary) with
  | Ok i ->
    let fns =
      String.split_on_char '\n' binary
      |> List.filter_map (fun l -> match String.split_on_char ' ' l with
          | [ f; _; _ ] -> Some f | _ -> None)
    in
    protect dv.lock (fun () -> dv.images <- (i, fns) :: dv.images);
    i
  | Error why -> failwith ("rg.load: " ^ why)

let entry dv i f =
  check "rg.entry";
  let last = if is "entry-retry-5" then 5 else 4 in
  let rec go asks =
    match counted dv "entry" Entry (fun () -> V.entry i f) with
    | Rig_edge.Entry e -> e
    | Absent -> raise Not_found
    | No_memory n -> if asks >= last then raise (Out_of_memory n) else (reclaim dv; go (asks + 1))
  in
  go 1

let prepare dv i f = check "rg.prepare"; counted dv "prepare" Keeps (fun () -> V.prepare i f)

(* Start making the entries of every function of every loaded image. *)
let warm dv =
  if not (is "forgot-warm") then check "rg.warm";
  let imgs = protect dv.lock (fun () -> dv.images) in
  List.iter (fun (i, fns) -> List.iter (fun f -> counted dv "prepare" Keeps (fun () -> V.prepare i f)) fns) imgs

let unload dv i =
  check "rg.unload";
  if not (is "prepare-after-unload") then
    protect dv.lock (fun () -> dv.images <- List.filter (fun (j, _) -> j != i) dv.images);
  counted dv "unload" Losing (fun () -> V.unload i)

(* -------------------------------------------------------------- queues *)

let c_call dv fn f = if dv.facts.may_block then counted dv fn Keeps f else masked f

let submit dv parts =
  check "rg.submit";
  let s = Rig_edge.encode parts in
  let q = dv.facts.queue in
  (* grow-5: "four retries", counted after the first ask *)
  let last_ask = if is "grow-5" then 5 else 4 in
  let rec ask asks =
    match c_call dv "room" (fun () -> q.room s) with
    | Rig_edge.Room -> ()
    | Grow ->
      if is "room-retry" && asks = 0 then begin
        (* another thread's commit may have made room meanwhile *)
        match c_call dv "room" (fun () -> q.room s) with
        | Room -> ()
        | Grow -> grow asks
      end
      else grow asks
  and grow asks =
    let g () = counted dv "grow" Losing (fun () -> V.grow dv.d) in
    let answer =
      if is "grow-helper-thread" then begin
        (* growth allocates: done on a helper thread with a fresh stack *)
        let res = ref None in
        Thread.join (Thread.create (fun () -> res := Some (try Ok (g ()) with e -> Error e)) ());
        match !res with Some (Ok a) -> a | Some (Error e) -> raise e | None -> assert false
      end
      else g ()
    in
    match answer with
    | Grown -> ask (asks + 1)
    | Short n ->
      if is "short-gives-up" then raise (Out_of_memory n)  (* a Short read as final *)
      else if asks + 1 >= last_ask then raise (Out_of_memory n)
      else if is "short-regrow" then (reclaim dv; grow (asks + 1))  (* grow again, room not asked *)
      else if is "short-no-reclaim" then ask (asks + 1)  (* room again, nothing given back *)
      else (reclaim dv; ask (asks + 1))
  in
  ask 0;
  let v = protect dv.lock (fun () -> dv.last_value <- dv.last_value + 1; dv.last_value) in
  if not (c_call dv "submit" (fun () -> q.submit s ~value:v)) then begin
    lose dv None; raise (Device_lost (dv.name ^ ": submit failed"))
  end;
  if not (c_call dv "commit" (fun () -> q.commit ())) then begin
    lose dv None; raise (Device_lost (dv.name ^ ": commit failed"))
  end;
  v

let handle b = (V.locate b.owner.d b.r).handle

(* [submit_all dv subs]: submits each, in order; a submission that finds no
   memory for the queues is refused (Error n), the others go on. *)
let submit_all dv subs =
  check "rg.submit_all";
  List.map (fun parts -> match submit dv parts with v -> Ok v | exception Out_of_memory n -> Error n) subs

(* --------------------------------------------------------- open, close *)

let quiet f = try f () with _ -> ()

let after_stop (_ : dev) f = if is "free-unmasked" then quiet f else quiet (fun () -> masked f)

(* Everything rig made on a stopped device goes back, once the word shows
   the last value given to submit; the word last. *)
let clean dv =
  if not dv.cleaned then begin
    dv.cleaned <- true;
    let last = dv.last_value in
    let deadline = now_ms () + 5000 in
    let rec poll () =
      let s = try V.signaled dv.d with _ -> -1 in
      if s >= last then true
      else if now_ms () > deadline then false
      else (Thread.delay 0.001; poll ())
    in
    if is "free-before-word" || poll () then begin
      let word = dv.facts.own_word in
      let bufs = protect dv.lock (fun () -> let b = dv.bufs in dv.bufs <- []; dv.pool <- []; b) in
      List.iter
        (fun b ->
           let under = List.exists (fun m -> match m.kind with `Peer o -> o == b | _ -> false) !mappings in
           if (not b.freed) && not under then begin
             if is "locate-after-stop" then ignore (V.locate dv.d b.r).size;
             if not (is "double-free") then b.freed <- true;
             (match b.kind with `Peer _ -> mappings := List.filter (fun x -> x != b) !mappings | _ -> ());
             after_stop dv (fun () -> V.free dv.d b.r)
           end)
        bufs;
      List.iter (fun (i, _) -> after_stop dv (fun () -> V.unload i)) dv.images;
      dv.images <- [];
      Option.iter (fun w -> after_stop dv (fun () -> V.free dv.d w)) word;
      if is "signaled-after-word-free" then ignore (try V.signaled dv.d with _ -> -1)
    end
  end

let stop_dev dv =
  protect dv.lock (fun () ->
      dv.closing <- true;
      while dv.inflight > 0 do P.Lock.await dv.lock dv.cond done);
  let fault =
    if is "hang-fault-none" then
      match dv.fault with Some w when String.length w > 4 && String.sub w 0 4 = "hang" -> None | f -> f
    else dv.fault
  in
  masked (fun () -> quiet (fun () -> V.stop dv.d ~fault));
  if not (is "stop-twice") then dv.stopped <- true;
  clean dv

let find name =
  match protect table_lock (fun () -> Hashtbl.find_opt devices name) with
  | Some dv when not dv.closing -> dv
  | _ -> invalid_arg ("rg: no open device " ^ name)

let open_ name =
  check "rg.open";
  let old = protect table_lock (fun () -> Hashtbl.find_opt devices name) in
  Option.iter (fun dv -> if not dv.stopped then stop_dev dv) old;
  let o =
    match List.find_opt (fun (o : Hostmem.D.t Rig_edge.opener) -> o.name = name) (Hostmem.openers ()) with
    | Some o -> V.opener o
    | None -> invalid_arg ("rg.open: no device " ^ name)
  in
  let d = masked o.make in
  let facts = masked (fun () -> V.facts d) in
  let dv = {
    name; d; facts; lock = P.Lock.create ~rig:(rig_marked ()) ("rg2." ^ name); cond = Condition.create ();
    inflight = 0; lost = false; fault = None; closing = false; stopped = false; cleaned = false;
    last_value = 0; bufs = []; pool = []; images = [];
  } in
  protect table_lock (fun () -> Hashtbl.replace devices name dv);
  dv

let close name =
  check "rg.close";
  let dv = find name in
  stop_dev dv;
  if not (is "stop-twice") then protect table_lock (fun () -> Hashtbl.remove devices name)

(* ------------------------------------------------------------- helpers *)

let kit = Hostmem.kit
let fn_of = function Some f -> f | None -> failwith "kit item missing"
let spin_f = fn_of kit.spin
let fault_f = fn_of kit.fault
let hang_f = fn_of kit.hang

let launch e args = Rig_edge.Launch { entry = e; args = List.map Int64.of_int args }

(* Whether two devices may share memory (a question, no work). *)
let can_share a b =
  if not (is "no-holds-check") then check "rg.can_share";
  a != b && V.peer a.d b.d
