(* Asynchronous exceptions and callbacks at every allocation point inside a
   driver's calls; see async_inject.mli.

   The Memprof callback may run at any allocation of any thread, also inside
   the driver's locks: it takes no lock.  Each tracker belongs to one thread
   and only that thread's callbacks touch its mutable fields; the set of
   trackers is an atomic list. *)

module P = Rig_edge_primitives

exception Async_interrupt of string

type point = Allocation | Wait
type target = { fn : string; nth : int; at : int; on : point }

let target_to_string t =
  Printf.sprintf "%s:%d:%s@%d" t.fn t.nth (match t.on with Allocation -> "async" | Wait -> "wait") t.at
let target : target option ref = ref None

type tracker = {
  tid : int;
  fn : string;
  nth : int;
  fire_at : int;  (* 0: never *)
  probe : (unit -> unit) option;
  holds_at_start : int;
  mutable allocs : int;
  mutable live : bool;
  mutable in_probe : bool;
  mutable again_while : int;  (* > 0: a second exception pending, see on_alloc *)
}

let enabled = Atomic.make false
let armed : target option Atomic.t = Atomic.make None
let probes_on = Atomic.make false
let trackers : tracker list Atomic.t = Atomic.make []
let fired_at : string option Atomic.t = Atomic.make None
let current_probe : string option Atomic.t = Atomic.make None
let every_allocation () = true
let counts_now = Atomic.make every_allocation

(* Bookkeeping outside any tracked region: a plain mutex, never taken by the
   callback. *)
let book = Mutex.create ()
let numbers : (string, int) Hashtbl.t = Hashtbl.create 16
let census_rev : (string * int * int * int) list ref = ref []
let findings_rev : (string * string) list ref = ref []

let rec update a f =
  let old = Atomic.get a in
  if not (Atomic.compare_and_set a old (f old)) then update a f

let self () = Thread.id (Thread.self ())

let on_alloc () =
  match Atomic.get trackers with
  | [] -> ()
  | l -> (
      let tid = self () in
      match List.find_opt (fun t -> t.tid = tid && t.live && not t.in_probe) l with
      | Some t when t.again_while > 0 ->
          (* After the exception came with a lock of the driver's held: a
             second at the call's next allocation while that lock is still
             held.  The handler that gives a lock back must give it first
             (ASYNC-2): one that allocates before leaves it taken now.  Once
             the lock is given back, none. *)
          t.allocs <- t.allocs + 1;
          let held = P.holds () >= t.again_while in
          t.again_while <- 0;
          t.live <- false;
          if held then begin
            let where =
              Printf.sprintf "%s, and a second at allocation %d, with the lock still held"
                (Option.value (Atomic.get fired_at) ~default:"?") t.allocs
            in
            Atomic.set fired_at (Some where);
            raise (Async_interrupt where)
          end
      | Some t when (Atomic.get counts_now) () ->
          t.allocs <- t.allocs + 1;
          if t.allocs = t.fire_at then begin
            let holds = P.holds () in
            if holds > t.holds_at_start then t.again_while <- holds else t.live <- false;
            let where = Printf.sprintf "allocation %d of %s call %d" t.allocs t.fn t.nth in
            Atomic.set fired_at (Some where);
            raise (Async_interrupt where)
          end;
          (match t.probe with
          | Some p ->
              t.in_probe <- true;
              (match p () with () -> t.in_probe <- false | exception e -> t.in_probe <- false; raise e)
          | None -> ())
      | _ -> ())

(* The handler of the SIGUSR2 a wait point sends: it runs as the wait ends,
   on the waiting thread (the only one of the harness's with SIGUSR2
   unblocked then), and raises there. *)
let signal_point : string option Atomic.t = Atomic.make None

let on_signal _ =
  match Atomic.exchange signal_point None with
  | Some where ->
      Atomic.set fired_at (Some where);
      raise (Async_interrupt where)
  | None -> ()

let reset ?inject ?(probe = false) ?(counts = every_allocation) () =
  Alloc_points.use on_alloc;
  Atomic.set counts_now counts;
  (match inject with
  | Some { on = Wait; _ } -> Sys.set_signal Sys.sigusr2 (Sys.Signal_handle on_signal)
  | _ -> ());
  Atomic.set signal_point None;
  Mutex.protect book (fun () ->
      Hashtbl.reset numbers;
      census_rev := [];
      findings_rev := []);
  Atomic.set trackers [];
  Atomic.set fired_at None;
  Atomic.set armed inject;
  Atomic.set probes_on probe;
  Atomic.set enabled true

let off () =
  Atomic.set enabled false;
  Atomic.set counts_now every_allocation;
  Atomic.set armed None;
  Atomic.set probes_on false;
  Atomic.set trackers []

let fired () = Atomic.get fired_at
let census () = Mutex.protect book (fun () -> List.rev !census_rev)
let probe_findings () = Mutex.protect book (fun () -> List.rev !findings_rev)
let probing () = Atomic.get current_probe

let next_number fn =
  Mutex.protect book (fun () ->
      let n = 1 + Option.value ~default:0 (Hashtbl.find_opt numbers fn) in
      Hashtbl.replace numbers fn n;
      n)

(* Runs [f ()] as the driver call [fn]: counts the calling thread's
   allocations inside it, raises the armed exception at its point, runs the
   probe at each allocation.  A call inside a tracked call of the same thread
   (none in practice) is not tracked apart. *)
let around fn ?probe f =
  if (not (Atomic.get enabled)) || fn = "facts" then f ()
  else
    let tid = self () in
    if List.exists (fun t -> t.tid = tid && t.live) (Atomic.get trackers) then f ()
    else begin
      let nth = next_number fn in
      let fire_at =
        match Atomic.get armed with Some tg when tg.fn = fn && tg.nth = nth && tg.on = Allocation -> tg.at | _ -> 0
      in
      (* A wait point: SIGUSR2 at the at-th wait of this call (on_signal). *)
      let signal_at =
        match Atomic.get armed with Some tg when tg.fn = fn && tg.nth = nth && tg.on = Wait -> tg.at | _ -> 0
      in
      let waits = P.waits () in
      let probe = if Atomic.get probes_on then probe else None in
      let t =
        { tid; fn; nth; fire_at; probe; holds_at_start = P.holds (); allocs = 0; live = true; in_probe = false; again_while = 0 }
      in
      let finish () =
        P.signal_at_wait 0;
        update trackers (List.filter (fun x -> x != t));
        let waits = P.waits () - waits in
        if t.allocs > 0 || waits > 0 then
          Mutex.protect book (fun () -> census_rev := (fn, nth, t.allocs, waits) :: !census_rev)
      in
      if signal_at > 0 then begin
        Atomic.set signal_point (Some (Printf.sprintf "wait %d of %s call %d" signal_at fn nth));
        P.signal_at_wait signal_at
      end;
      update trackers (fun l -> t :: l);
      match f () with
      | v ->
          t.live <- false;
          finish ();
          v
      | exception e ->
          t.live <- false;
          finish ();
          raise e
    end

(* A probe's finding, once per clause and probed function. *)
let note clause detail =
  Mutex.protect book (fun () ->
      let key = String.sub detail 0 (min 24 (String.length detail)) in
      if not (List.exists (fun (c, d) -> c = clause && String.starts_with ~prefix:key d) !findings_rev) then
        findings_rev := (clause, detail) :: !findings_rev)

(* Calls [g] from the callback at an allocation inside [inside]: a function
   that takes no lock may be called there (LOCK-9); locate, peer and signaled
   take none (LOCK-5).  A take of a lock the thread holds raises
   Invalid_argument (LOCK-7) or, for a plain mutex, Sys_error; a lock left
   counted changes rig_holds; a counted lock taken and given back shows in
   the thread's activity less its waits. *)
let probe_call ~inside what g =
  let before = P.holds () and takes () = P.activity () - P.waits () in
  let takes_before = takes () in
  Atomic.set current_probe (Some (Printf.sprintf "%s from a callback inside %s" what inside));
  let outcome = match g () with () -> None | exception e -> Some e in
  Atomic.set current_probe None;
  let after = P.holds () and took = takes () - takes_before in
  if after <> before then
    note "LOCK-5"
      (Printf.sprintf "%s called from a callback inside %s left rig_holds at %d, not %d" what inside after before)
  else if took > 0 then
    note "LOCK-5" (Printf.sprintf "%s called from a callback inside %s took a counted lock (%d take(s) while it ran)" what inside took);
  match outcome with
  | None -> ()
  | Some (Invalid_argument s) ->
      note "LOCK-5"
        (Printf.sprintf "%s called from a callback inside %s raised Invalid_argument %S: it takes a lock" what
           inside s)
  | Some (Sys_error s) ->
      note "LOCK-5"
        (Printf.sprintf "%s called from a callback inside %s raised Sys_error %S: it takes a lock" what inside s)
  | Some e ->
      note "LOCK-9"
        (Printf.sprintf "%s called from a callback inside %s raised %s" what inside (Printexc.to_string e))

module Make (D : Rig_edge.Driver) = struct
  type t = D.t
  type region = D.region
  type image = D.image

  exception Fault = D.Fault

  let key = D.key

  (* The ledger of what rig made through this wrapper (ASYNC-1), and the
     devices in play for the probes. *)
  type dev = {
    d : D.t;
    word : D.region option;
    word_place : (int64 * int) option;  (** locate's answer for the word, outside any callback *)
    mutable stopped : bool;
    mutable regions : D.region list;
    mutable last_value : int;
  }

  let ledger = Mutex.create ()
  let devs : dev list ref = ref []

  (* map_peer mappings, with the region each maps; a mapping whose free
     raised may still map it, and rig then keeps that region, and its
     device's word, for good (GUAR-2, spec/decisions.md). *)
  let mappings : (D.region * D.region) list ref = ref []
  let kept : D.region list ref = ref []
  let images : (D.image * dev) list ref = ref []
  let with_ledger f = Mutex.protect ledger f
  let dev_of d = List.find_opt (fun x -> x.d == d) !devs

  (* locate's answer for a region, asked outside any callback (no call of
     the wrapper's is tracked here): what a callback's locate must answer. *)
  let place_of d r = match D.locate d r with p -> Some (p.Rig_edge.handle, p.size) | exception _ -> None
  let places : (D.region * (int64 * int)) list ref = ref []

  let add_region d r =
    let p = place_of d r in
    with_ledger (fun () ->
        Option.iter (fun x -> x.regions <- r :: x.regions) (dev_of d);
        Option.iter (fun p -> places := (r, p) :: !places) p)

  (* LOCK-9: locate of the word from a callback answers as it does outside
     (a region's place may move for other reasons, which other clauses
     judge: MEM-9's dma, say). *)
  let locate_as_outside ~inside what d r expected =
    let p = D.locate d r in
    match expected with
    | Some (h, n) when (p.handle, p.size) <> (h, n) ->
        note "LOCK-9"
          (Printf.sprintf "%s called from a callback inside %s answered handle %Ld of %d bytes, not handle %Ld of %d bytes as outside callbacks" what
             inside p.handle p.size h n)
    | _ -> ()

  (* The probes of a call on [d]: signaled and locate of the word while [d]
     is not stopped (rig reads the word until it frees it, after stop), peer
     with every other device, locate of the call's region. *)
  let probe_of ~inside ?region d =
    let others, mine =
      with_ledger (fun () -> (List.filter (fun x -> x.d != d) !devs, dev_of d))
    in
    Some
      (fun () ->
        (match mine with
        | Some x when not x.stopped ->
            probe_call ~inside "signaled" (fun () ->
                match D.signaled d with _ -> () | exception D.Fault _ -> ());
            Option.iter
              (fun w ->
                probe_call ~inside "locate of the word" (fun () ->
                    match locate_as_outside ~inside "locate of the word" d w x.word_place with
                    | () -> ()
                    | exception D.Fault _ -> ()))
              x.word
        | _ -> ());
        (* A Fault of locate or peer is theirs wherever they are called
           (LOCK-6: probe.locate-peer-quiet), not a callback's. *)
        List.iter (fun o -> probe_call ~inside "peer" (fun () -> match D.peer d o.d with _ -> () | exception D.Fault _ -> ())) others;
        Option.iter
          (fun (on, r) -> probe_call ~inside "locate" (fun () -> match D.locate on r with _ -> () | exception D.Fault _ -> ()))
          region)

  (* A locate from a callback must leave nothing behind that changes a later
     answer: after a call whose allocations ran the probes, the word's
     place, asked outside, is the same.  Only a torn answer is LOCK-9's: the
     place of another region (one the wrapper knows, or the one the call
     just made), as a one-entry cache leaves it when a callback's locate
     runs between the write of its key and of its value.  A word that moved
     otherwise is other clauses' to judge. *)
  let word_still_placed ~after ~made d =
    match with_ledger (fun () -> dev_of d) with
    | Some { word = Some w; word_place = Some (h, n); stopped = false; _ } when Atomic.get probes_on -> (
        match D.locate d w with
        | p when (p.handle, p.size) <> (h, n) ->
            let others = with_ledger (fun () -> List.filter_map (fun (r, pl) -> if r == w then None else Some pl) !places) in
            let others = match Option.bind made (place_of d) with Some pl -> pl :: others | None -> others in
            if List.mem (p.handle, p.size) others then
              note "LOCK-9"
                (Printf.sprintf "locate of the word, asked after %s, whose allocations called locate from callbacks, answered another region's place (handle %Ld of %d bytes), not the word's (handle %Ld of %d bytes)"
                   after p.handle p.size h n)
        | _ -> ()
        | exception _ -> ())
    | _ -> ()

  let call fn ?region ?(made = fun _ -> None) d f =
    match around fn ?probe:(probe_of ~inside:fn ?region d) f with
    | v -> word_still_placed ~after:fn ~made:(made v) d; v
    | exception e -> word_still_placed ~after:fn ~made:None d; raise e

  let wrap_queue d (q : Rig_edge.queue) =
    {
      Rig_edge.room = (fun s -> call "room" d (fun () -> q.room s));
      submit =
        (fun s ~value ->
          with_ledger (fun () -> Option.iter (fun x -> x.last_value <- max x.last_value value) (dev_of d));
          call "submit" d (fun () -> q.submit s ~value));
      commit = (fun () -> call "commit" d (fun () -> q.commit ()));
    }

  let facts d =
    let f = D.facts d in
    with_ledger (fun () ->
        if dev_of d = None then
          devs :=
            { d; word = f.own_word; word_place = Option.bind f.own_word (place_of d); stopped = false;
              regions = Option.to_list f.own_word; last_value = 0 }
            :: !devs);
    { f with queue = wrap_queue d f.queue }

  (* locate's own allocations call locate of the word from their callbacks
     too, and the word's place is asked after it: a one-entry cache torn
     by a nested locate (blind lk-locate-cache) then answers another
     region's place.  Where the word is r itself, nothing can tear. *)
  let locate d r =
    let is_word = match with_ledger (fun () -> dev_of d) with Some { word = Some w; _ } -> w == r | _ -> false in
    let p =
      if is_word then around "locate" (fun () -> D.locate d r)
      else begin
        let p = around "locate" ?probe:(probe_of ~inside:"locate" d) (fun () -> D.locate d r) in
        word_still_placed ~after:"locate" ~made:None d;
        p
      end
    in
    match p.reach with
    | None -> p
    | Some g -> { p with reach = Some (fun a -> call "reach" ~region:(d, r) d (fun () -> g a)) }

  let peer d d' = around "peer" (fun () -> D.peer d d')

  let alloc d m n =
    let r = call "alloc" ~made:Fun.id d (fun () -> D.alloc d m n) in
    Option.iter (add_region d) r;
    r

  let free d r =
    with_ledger (fun () ->
        Option.iter (fun x -> x.regions <- List.filter (( != ) r) x.regions) (dev_of d);
        places := List.filter (fun (r', _) -> r' != r) !places);
    match call "free" ~region:(d, r) d (fun () -> D.free d r) with
    | () -> ()
    | exception e ->
        with_ledger (fun () -> Option.iter (fun over -> kept := over :: !kept) (List.assq_opt r !mappings));
        raise e

  let map_peer d d' r =
    let m = call "map_peer" ~region:(d', r) ~made:Option.some d (fun () -> D.map_peer d d' r) in
    add_region d m;
    with_ledger (fun () -> mappings := (m, r) :: !mappings);
    m

  let map_host d p n =
    let m = call "map_host" ~made:Option.some d (fun () -> D.map_host d p n) in
    add_region d m;
    m

  let dma d r ~fn = call "dma" ~region:(d, r) d (fun () -> D.dma d r ~fn)

  let image d b =
    let i = call "image" d (fun () -> D.image d b) in
    (match i with
    | Ok im -> with_ledger (fun () -> Option.iter (fun x -> images := (im, x) :: !images) (dev_of d))
    | Error _ -> ());
    i

  let on_of i = with_ledger (fun () -> Option.map (fun x -> x.d) (List.assq_opt i !images))

  let image_call fn i f =
    match on_of i with Some d -> call fn d f | None -> around fn f

  let entry i f = image_call "entry" i (fun () -> D.entry i f)
  let prepare i f = image_call "prepare" i (fun () -> D.prepare i f)
  let grow d = call "grow" d (fun () -> D.grow d)
  (* After stop, rig polls the word with signaled until it reads the last
     value, as often as the timing makes it, and drops what it raises: those
     calls are neither numbered nor targets, so that the numbering of the
     others stays the same run after run. *)
  let signaled d =
    let stopped = with_ledger (fun () -> match dev_of d with Some x -> x.stopped | None -> false) in
    if stopped then D.signaled d else around "signaled" (fun () -> D.signaled d)
  let sleep d ~seen ~still_ms = call "sleep" d (fun () -> D.sleep d ~seen ~still_ms)

  let stop d ~fault =
    with_ledger (fun () -> Option.iter (fun x -> x.stopped <- true) (dev_of d));
    around "stop" (fun () -> D.stop d ~fault)

  let unload i =
    let on = on_of i in
    with_ledger (fun () -> images := List.filter (fun (i', _) -> i' != i) !images);
    match on with Some d -> call "unload" d (fun () -> D.unload i) | None -> around "unload" (fun () -> D.unload i)

  let leftovers () =
    let ds, ims, kept =
      with_ledger (fun () ->
          let r = (List.rev !devs, !images, !kept) in
          devs := [];
          places := [];
          images := [];
          mappings := [];
          kept := [];
          r)
    in
    List.concat_map
      (fun (k, x) ->
        let name = Printf.sprintf "device %d" (k + 1) in
        if not x.stopped then [ name ^ " was never stopped" ]
        else
          (* rig frees and unloads only once the word reads the last value;
             the word can be read while it is not freed. *)
          let word_freed = match x.word with Some w -> not (List.memq w x.regions) | None -> true in
          let reached =
            word_freed || match D.signaled x.d with w -> w >= x.last_value | exception _ -> false
          in
          if not reached then []
          else
            let keeps = List.exists (fun r -> List.memq r kept) x.regions in
            let left = List.filter (fun r -> not (List.memq r kept || (keeps && match x.word with Some w -> w == r | None -> false))) x.regions in
            let regions = List.length left and imgs = List.length (List.filter (fun (_, y) -> y == x) ims) in
            (if regions > 0 then [ Printf.sprintf "%s: %d region(s) never freed" name regions ] else [])
            @ if imgs > 0 then [ Printf.sprintf "%s: %d image(s) never unloaded" name imgs ] else [])
      (List.mapi (fun k x -> (k, x)) ds)
end
