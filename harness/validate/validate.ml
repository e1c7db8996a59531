(* The validation layer; see validate.mli.  One bookkeeping mutex, held only
   around the wrapper's own records and never across a driver call. *)

type phase = Start | Return of string | Raise of string

type event = {
  seq : int;
  thread : int;
  device : string;
  fn : string;
  counted : bool;
  phase : phase;
}

type violation = { clause : string; detail : string; events : event list }

exception Abandoned of string

type user_act = Open of string | Close of string | Request of string

(* The document's lists the checks read (Validate_rules). *)
open Validate_rules

module Make (D : Rig_edge.Driver) = struct
  type dev = {
    id : string;
    name : string;
    d : D.t;
    facts : D.region Rig_edge.facts;
    mutable stops : int;
    mutable stopped : bool;
    mutable loss : (string * string * event) option;  (* clause, why, the event *)
    mutable faulted : event option;                   (* a Fault from a counted call *)
    mutable faulted_at_close : bool;  (* a Fault that came during a close or open of its name *)
    mutable lost_for_hang : bool;     (* the program saw a wait on hung work end in Device_lost *)
    mutable in_flight : (int * string * event) list;  (* thread, fn, start event *)
    mutable last_submitted : int option;
    mutable observed : int;                           (* the highest word signaled answered *)
    mutable pending : (int * int list) list;          (* value, region ids its work uses *)
    mutable word : region option;
    mutable word_freed : bool;
    mutable stall : (int * float) option;             (* seen, since *)
    mutable stalled_ms : float;                       (* longest stall on pending work *)
  }

  and kind = Alloc of Rig_edge.memory | Peer of region | Host | Word

  and region = {
    rid : int;
    r : D.region;
    owner : dev;
    kind : kind;
    mutable freed : bool;
    mutable free_raised : bool;
    mutable mappings : int;
  }

  type t = dev
  type image = { iid : int; i : D.image; idev : dev; mutable unloaded : bool }

  exception Fault = D.Fault

  let key = D.key
  let lock = Mutex.create ()
  let changed = Condition.create ()
  let locked f = Mutex.protect lock f

  (* Threads in await_in_flight: a call wakes them only when there are some
     (a broadcast at each call was a cost of every wrapped call). *)
  let awaiting = ref 0
  let wake () = if !awaiting > 0 then Condition.broadcast changed
  let seq = ref 0
  let trace = ref []
  let violations = ref []
  let hang_ms = ref max_int
  let acts : (int * user_act) list ref = ref []

  (* Whether the program is opening or closing a device of dev's name. *)
  let opening_or_closing dev =
    List.exists (fun (_, a) -> match a with Open n | Close n -> n = dev.name | Request _ -> false) !acts
  let next_id = ref 0
  let opens = Hashtbl.create 8
  (* Tables keyed without the polymorphic hash, which a wrapped call paid for. *)
  module By_handle = Hashtbl.Make (struct
    type t = int64
    let equal = Int64.equal
    (* handles are often addresses: their low bits alone would collide *)
    let hash h = let x = Int64.to_int h in (x lxor (x lsr 12) lxor (x lsr 24)) land max_int
  end)

  module By_thread = Hashtbl.Make (struct
    type t = int
    let equal = Int.equal
    let hash x = x land max_int
  end)

  (* The regions rig located, by handle, while they live. *)
  let by_handle : region By_handle.t = By_handle.create 64
  let devices : dev list ref = ref []

  let fresh () = incr next_id; !next_id
  let self () = Thread.id (Thread.self ())
  let now_ms () = Unix.gettimeofday () *. 1000.

  let record dev fn counted phase =
    incr seq;
    let e = { seq = !seq; thread = self (); device = dev; fn; counted; phase } in
    trace := e :: !trace;
    e

  let violate clause events fmt =
    Printf.ksprintf (fun detail -> violations := { clause; detail; events } :: !violations) fmt

  (* ---- per-thread protocol state: fallbacks, entry streaks, queues ---- *)

  (* Per submission (physical identity): grows asked, last answer, whether
     room came after it. *)
  type sub_state = { sub : Rig_edge.submission; sdev : dev; mutable grows : int;
                     mutable last_short : int option; first : event }

  type thread_state = {
    mutable expect_fallback : (dev * int * event) option;    (* GUAR-6 *)
    mutable entry_streak : (dev * int * string * int * event) option;  (* device, image, f, asks, first *)
    mutable last_room : (dev * Rig_edge.room) option;
    mutable grew : (dev * Rig_edge.grow_answer) option;      (* grow since the last room *)
    mutable room_sub : sub_state option;   (* the submission of the last room *)
    mutable refused_at : int;  (* > 0: inside a request asked holding that many counted locks (LOCK-2) *)
  }

  let threads : thread_state By_thread.t = By_thread.create 8

  let tstate () =
    let t = self () in
    match By_thread.find_opt threads t with
    | Some s -> s
    | None ->
        let s = { expect_fallback = None; entry_streak = None; last_room = None; grew = None; room_sub = None; refused_at = 0 } in
        By_thread.replace threads t s;
        s

  let subs : sub_state list ref = ref []

  let sub_state dev s first =
    match List.find_opt (fun x -> x.sub == s) !subs with
    | Some x -> x
    | None ->
        let x = { sub = s; sdev = dev; grows = 0; last_short = None; first } in
        subs := x :: !subs;
        x

  let close_entry_streak ts =
    (match ts.entry_streak with
    | Some (dev, _, f, asks, first) when asks < 4 && dev.loss = None && not dev.stopped ->
        violate "CODE-4" [ first ]
          "entry %S answered No_memory %d time(s) and rig gave up without asking after each of the rounds (4 asks)"
          f asks
    | _ -> ());
    ts.entry_streak <- None

  (* Rounds a thread was running on [dev] that never reached their end
     (an entry's No_memory asks, a submission's Short growths) are judged
     once nothing more can come: at the device's stop, or the run's end. *)
  let settle dev =
    By_thread.iter
      (fun _ ts -> match ts.entry_streak with Some (d, _, _, _, _) when d == dev -> close_entry_streak ts | _ -> ())
      threads;
    List.iter
      (fun st ->
        match st.last_short with
        | Some n when st.sdev == dev && st.grows < 4 && dev.loss = None && not dev.stopped ->
            (* Fewer than four asks: a Short after which rig did not
               ask room again, which QUEUE-4 asks for (QUEUE-6 bounds the
               asks from above). *)
            violate "QUEUE-4" [ st.first ] "a submission gave up after %d grow(s), the last answering Short %d, without asking room again (4 asks)"
              st.grows n;
            st.last_short <- None
        | _ -> ())
      !subs

  (* ---- the checks every call starts with ---- *)

  (* Monomorphic: List.mem's polymorphic compare was a tenth of a wrapped
     call's time. *)
  let named fn fns = List.exists (String.equal fn) fns

  (* How many of the signals the thread does not block (-1: the mask could
     not be read), without building the list of those it does. *)
  external unblocked : int array -> int = "rig_validate_unblocked" [@@noalloc]

  let must_be_blocked_array = Array.of_list must_be_blocked

  let check_entry dev fn counted e =
    if not (named fn unmasked_fns) then begin
      let holds = Rig_edge_primitives.holds () in
      (* Inside a request asked in the program's lock, with no lock of
         rig's added, the call is LOCK-2's: rig should have refused. *)
      if holds <> 0 && holds <> (tstate ()).refused_at then
        violate "LOCK-1" [ e ] "%s called on a thread that holds %d counted lock(s)" fn holds;
      let open_ = unblocked must_be_blocked_array in
      if open_ > 0 then
        violate "SIG-1" [ e ] "%s called with signals unblocked (%d of the sampled signals)" fn open_
    end;
    if dev.stopped && fn <> "stop" && not (named fn allowed_after_stop) then
      violate "CNT-4" [ e ] "%s called on %s after its stop" fn dev.id
    else
      (match dev.loss with
      | Some (clause, why, cause) when (not dev.stopped) && not (named fn allowed_after_loss) ->
          violate clause [ e; cause ] "%s called on %s after it was lost (%s)" fn dev.id why
      | _ -> ());
    let ts = tstate () in
    (match ts.expect_fallback with
    | Some (d', _, first) when d' == dev && fn <> "alloc" ->
        violate "GUAR-6" [ first; e ] "alloc of Mapped answered None and rig called %s instead of falling back" fn;
        ts.expect_fallback <- None
    | _ -> ());
    if counted then dev.in_flight <- (e.thread, fn, e) :: dev.in_flight;
    wake ()

  let lose dev clause why e =
    if dev.loss = None && not dev.stopped then dev.loss <- Some (clause, why, e)

  let finish_call dev fn counted e outcome =
    if counted then
      dev.in_flight <- List.filter (fun (_, _, s) -> s != e) dev.in_flight;
    let phase, exn =
      match outcome with
      | Ok s -> (Return s, None)
      | Error ex -> (Raise (short_exn ex), Some ex)
    in
    let fin = record dev.id fn counted phase in
    (* A call that raised ends what the thread was retrying: the rounds of
       an entry or a submission are over, whatever they had come to. *)
    if exn <> None then begin
      let ts = tstate () in
      ts.entry_streak <- None;
      Option.iter (fun st -> st.last_short <- None) ts.room_sub
    end;
    (match exn with
    | Some (D.Fault why) when counted && not dev.stopped ->
        (* A Fault that comes while the program closes or reopens the device
           may come after rig lost it for that: then either fault is right. *)
        if opening_or_closing dev then dev.faulted_at_close <- true
        else if dev.faulted = None then dev.faulted <- Some fin;
        lose dev "CNT-6" ("Fault " ^ why ^ " from " ^ fn) fin
    | Some (Invalid_argument _) when fn = "entry" -> ()
    | Some ex when named fn losing_fns && not dev.stopped ->
        lose dev "EXC-1" (short_exn ex ^ " from " ^ fn) fin
    | _ -> ());
    wake ();
    fin

  (* Wraps one driver call: checks at its start, records its outcome. *)
  let raise_hook = ref (fun (_ : string) (_ : exn) -> ())
  let on_raise f = raise_hook := f

  let call dev fn ~counted ?(pre = fun _ -> ()) ?(show = fun _ -> "") f =
    let e =
      locked (fun () ->
          let e = record dev.id fn counted Start in
          check_entry dev fn counted e;
          (try pre e
           with ex ->
             dev.in_flight <- List.filter (fun (_, _, s) -> s != e) dev.in_flight;
             raise ex);
          e)
    in
    match f () with
    | v ->
        ignore (locked (fun () -> finish_call dev fn counted e (Ok (show v))));
        v
    | exception ex ->
        ignore (locked (fun () -> finish_call dev fn counted e (Error ex)));
        !raise_hook fn ex;
        raise ex

  (* ---- devices ---- *)

  let opener (o : D.t Rig_edge.opener) =
    let make () =
      (* A make that raises opened nothing: its event, with no device, says
         the driver's failure (a device busy, a thread refused) ended what
         the program was doing. *)
      let d =
        try o.make ()
        with ex ->
          locked (fun () -> ignore (record (o.name ^ "#-") "make" false (Raise (short_exn ex))));
          raise ex
      in
      let facts = D.facts d in
      locked (fun () ->
          let n = 1 + Option.value ~default:0 (Hashtbl.find_opt opens o.name) in
          Hashtbl.replace opens o.name n;
          let dev =
            { id = Printf.sprintf "%s#%d" o.name n; name = o.name; d; facts; stops = 0;
              stopped = false; loss = None; faulted = None; faulted_at_close = false; lost_for_hang = false; in_flight = []; last_submitted = None;
              observed = 0; pending = []; word = None; word_freed = false; stall = None;
              stalled_ms = 0. }
          in
          dev.word <-
            Option.map
              (fun r -> { rid = fresh (); r; owner = dev; kind = Word; freed = false;
                          free_raised = false; mappings = 0 })
              facts.own_word;
          ignore (record dev.id "make" false (Return ""));
          devices := dev :: !devices;
          dev)
    in
    { Rig_edge.name = o.name; make }

  let act_name = function Open n -> "open of " ^ n | Close n -> "close of " ^ n | Request what -> what

  (* LOCK-2: asked on a thread that holds a counted lock, a call of rig's
     raises Invalid_argument as it starts, so with no driver call before. *)
  let refused_in_lock act ~held ~from f =
    let ts = locked tstate in
    let outer = ts.refused_at in
    ts.refused_at <- held;
    let outcome = match Fun.protect ~finally:(fun () -> ts.refused_at <- outer) f with v -> Ok v | exception x -> Error x in
    locked (fun () ->
        let calls = List.rev (List.filter (fun e -> e.seq > from && e.thread = self () && e.phase = Start) !trace) in
        let broke =
          match outcome with
          | Ok _ -> Some "returned instead of raising Invalid_argument"
          | Error (Invalid_argument _) when calls <> [] ->
              Some (Printf.sprintf "raised Invalid_argument only after %d driver call(s)" (List.length calls))
          | Error (Invalid_argument _ | Abandoned _) -> None
          | Error x -> Some (Printf.sprintf "raised %s, not Invalid_argument" (Printexc.to_string x))
        in
        Option.iter
          (violate "LOCK-2" calls "rig's %s, asked on a thread holding %d counted lock(s), %s" (act_name act) held)
          broke);
    match outcome with Ok v -> v | Error x -> raise x

  let user act f =
    let me = (self (), act) in
    let held = Rig_edge_primitives.holds () in
    let from =
      locked (fun () ->
          (* The asks of an earlier request on this thread have ended. *)
          (match act with Request _ -> close_entry_streak (tstate ()) | Open _ | Close _ -> ());
          acts := me :: !acts;
          !seq)
    in
    let f = if held = 0 then f else fun () -> refused_in_lock act ~held ~from f in
    Fun.protect ~finally:(fun () -> locked (fun () -> acts := List.filter (( != ) me) !acts)) f

  let set_hang_ms ms = locked (fun () -> hang_ms := ms)

  (* The stall is brought up to now: rig measured it after the last
     signaled this layer saw, and a thread starved between the two (a
     driver whose sleeps return at once spends its time there) made rig's
     figure the longer by as much (STOP-1's "hung"). *)
  let lost_for_hang name =
    locked (fun () ->
        List.iter
          (fun dev ->
            if dev.name = name && not dev.stopped then begin
              dev.lost_for_hang <- true;
              match dev.stall with
              | Some (_, since) -> dev.stalled_ms <- Float.max dev.stalled_ms (now_ms () -. since)
              | None -> ()
            end)
          !devices)

  let await_in_flight ?(unless = fun () -> false) fn =
    locked (fun () ->
        let inside () = List.exists (fun dev -> List.exists (fun (_, f, _) -> f = fn) dev.in_flight) !devices in
        incr awaiting;
        Fun.protect ~finally:(fun () -> decr awaiting) (fun () ->
            while not (inside () || unless ()) do Condition.wait changed lock done))

  let poke () = locked (fun () -> Condition.broadcast changed)

  let calls () =
    locked (fun () ->
        let tally = Hashtbl.create 16 in
        List.iter
          (fun e ->
            if e.phase = Start then
              Hashtbl.replace tally e.fn (1 + Option.value ~default:0 (Hashtbl.find_opt tally e.fn)))
          !trace;
        Hashtbl.fold (fun fn n acc -> (fn, n) :: acc) tally [] |> List.sort compare)

  let make_region owner kind r =
    { rid = fresh (); r; owner; kind; freed = false; free_raised = false; mappings = 0 }

  (* ---- the Driver ---- *)

  let wrap_queue dev (q : Rig_edge.queue) =
    let cb = dev.facts.may_block in
    let room s =
      let pre e =
        let st = sub_state dev s e in
        if st.grows >= 4 && st.last_short <> None then
          violate "QUEUE-6" [ st.first; e ] "room asked again after the fourth Short of a submission"
      in
      let answer = call dev "room" ~counted:cb ~pre ~show:(function Rig_edge.Room -> "RIG_ROOM" | Grow -> "RIG_GROW") (fun () -> q.room s) in
      locked (fun () ->
          let ts = tstate () in
          ts.last_room <- Some (dev, answer);
          ts.grew <- None;
          let st = sub_state dev s (List.hd !trace) in
          ts.room_sub <- Some st;
          st.last_short <- None);
      answer
    in
    let submit s ~value =
      let pre e =
        let ts = tstate () in
        (match ts.grew with
        | Some (d', Rig_edge.Short _) when d' == dev ->
            violate "QUEUE-4" [ e ] "submit after a Short without asking room again"
        | _ -> ());
        (* Work given to a device with none pending starts the wait for the
           word now, as rig's own clock does (GUAR-7, STOP-1): a first
           signaled long after this submit must not shorten the stall. *)
        (match dev.last_submitted with
        | Some l when l > dev.observed -> ()
        | _ -> dev.stall <- Some (dev.observed, now_ms ()));
        dev.last_submitted <- Some value;
        let uses =
          List.concat_map
            (function
              | Rig_edge.Fill { dst; _ } -> [ dst ]
              | Copy { src; dst; _ } -> [ src; dst ]
              | Launch { args; _ } -> args)
            (Rig_edge.parts s)
          |> List.filter_map (fun h -> By_handle.find_opt by_handle h)
          |> List.map (fun r -> r.rid)
        in
        dev.pending <- (value, uses) :: dev.pending;
        subs := List.filter (fun x -> x.sub != s) !subs
      in
      let ok = call dev "submit" ~counted:cb ~pre ~show:string_of_bool (fun () -> q.submit s ~value) in
      if not ok then locked (fun () -> lose dev "CNT-6" "failed submit" (List.hd !trace));
      ok
    in
    let commit () =
      let ok = call dev "commit" ~counted:cb ~show:string_of_bool (fun () -> q.commit ()) in
      if not ok then locked (fun () -> lose dev "CNT-6" "failed commit" (List.hd !trace));
      ok
    in
    { Rig_edge.room; submit; commit }

  let facts dev =
    call dev "facts" ~counted:false (fun () ->
        let f = D.facts dev.d in
        { Rig_edge.may_block = f.may_block; host_addresses = f.host_addresses;
          maps_host = f.maps_host; own_word = dev.word; queue = wrap_queue dev f.queue })

  let locate dev r =
    call dev "locate" ~counted:false (fun () ->
        let p = D.locate dev.d r.r in
        locked (fun () -> By_handle.replace by_handle p.handle r);
        let reach =
          Option.map (fun f access -> call dev "reach" ~counted:true (fun () -> f access)) p.reach
        in
        { p with reach })

  let peer a b =
    call a "peer" ~counted:false
      ~pre:(fun e -> if a == b then violate "GUAR-3" [ e ] "peer asked of %s with itself" a.id)
      (fun () -> D.peer a.d b.d)

  let alloc dev m n =
    let pre e =
      if n <= 0 || n mod Rig_edge.word <> 0 then
        violate "MEM-1" [ e ] "alloc of %d bytes: not a positive multiple of Rig.word" n;
      let ts = tstate () in
      match ts.expect_fallback with
      | Some (d', n', first) when d' == dev ->
          ts.expect_fallback <- None;
          let ok = (m = Rig_edge.Pinned || (m = Device && dev.facts.host_addresses)) && n = n' in
          if not ok then
            violate "GUAR-6" [ first; e ]
              "after alloc of Mapped answered None rig asked %s (host_addresses=%b) instead of Pinned"
              (match m with Device -> "Device" | Mapped -> "Mapped" | Pinned -> "Pinned")
              dev.facts.host_addresses
      | _ -> ()
    in
    let r = call dev "alloc" ~counted:true ~pre ~show:(function None -> "None" | Some _ -> "Some") (fun () -> D.alloc dev.d m n) in
    locked (fun () ->
        match r with
        | None ->
            if m = Rig_edge.Mapped then (tstate ()).expect_fallback <- Some (dev, n, List.hd !trace);
            None
        | Some r -> Some (make_region dev (Alloc m) r))

  let check_free_timing dev region e what =
    match dev.last_submitted with
    | Some last when dev.stopped && dev.observed < last ->
        violate "STOP-7" [ e ] "%s after stop while the word was last seen at %d, not the last value %d"
          what dev.observed last
    | _ when not dev.stopped -> (
        match region with
        | Some r ->
            List.iter
              (fun (v, uses) ->
                if v > dev.observed && List.exists (Int.equal r.rid) uses then
                  violate "MEM-3" [ e ] "free of a region that work of value %d (word seen at %d) uses" v
                    dev.observed)
              dev.pending
        | None -> ())
    | _ -> ()

  let free dev r =
    let pre e =
      if r.freed || r.free_raised then violate "GUAR-1" [ e ] "region %d freed again" r.rid
      else if r.owner != dev then violate "GUAR-1" [ e ] "region %d of %s freed on %s" r.rid r.owner.id dev.id
      else if r.mappings > 0 then
        violate "GUAR-2" [ e ] "region %d freed while %d map_peer region(s) over it live" r.rid r.mappings;
      if r.kind = Word then dev.word_freed <- true;
      check_free_timing dev (Some r) e "free"
    in
    let counted = not dev.stopped in
    match call dev "free" ~counted ~pre (fun () -> D.free dev.d r.r) with
    | () ->
        locked (fun () ->
            r.freed <- true;
            (* A handle of a freed region names nothing rig may use: the
               table keeps the live ones (the driver may reuse a handle). *)
            By_handle.filter_map_inplace (fun _ x -> if x == r then None else Some x) by_handle;
            match r.kind with Peer over -> over.mappings <- over.mappings - 1 | _ -> ())
    | exception ex ->
        locked (fun () -> r.free_raised <- true);
        raise ex

  let map_peer a b r =
    let pre e =
      if a == b then violate "GUAR-3" [ e ] "map_peer asked of %s with itself" a.id
    in
    let m = call a "map_peer" ~counted:true ~pre (fun () -> D.map_peer a.d b.d r.r) in
    locked (fun () ->
        r.mappings <- r.mappings + 1;
        make_region a (Peer r) m)

  let map_host dev p n =
    let pre e =
      if not dev.facts.maps_host then violate "MEM-6" [ e ] "map_host on %s, which does not declare maps_host" dev.id
      else if n <= 0 || Nativeint.rem p 4096n <> 0n then
        violate "MEM-6" [ e ] "map_host of %d bytes at %nx: not a page start or not positive" n p
    in
    let m = call dev "map_host" ~counted:true ~pre (fun () -> D.map_host dev.d p n) in
    locked (fun () -> make_region dev Host m)

  let dma dev r ~fn =
    let pre e =
      match r.kind with
      | Alloc _ when r.owner == dev && not r.freed -> ()
      | _ -> violate "GUAR-4" [ e ] "dma with region %d, which alloc of %s did not make (or freed)" r.rid dev.id
    in
    call dev "dma" ~counted:true ~pre (fun () -> D.dma dev.d r.r ~fn)

  let image dev b =
    match call dev "image" ~counted:true ~show:(function Ok _ -> "Ok" | Error w -> "Error " ^ w) (fun () -> D.image dev.d b) with
    | Ok i -> Ok (locked (fun () -> { iid = fresh (); i; idev = dev; unloaded = false }))
    | Error w -> Error w

  let loaded_check what im e =
    if im.unloaded then violate "GUAR-5" [ e ] "%s on image %d after its unload" what im.iid

  let entry im f =
    let pre e =
      loaded_check "entry" im e;
      let ts = tstate () in
      match ts.entry_streak with
      | Some (_, iid, f', _, _) when iid = im.iid && f' = f -> ()
      | Some _ -> close_entry_streak ts
      | None -> ()
    in
    let show = function
      | Rig_edge.Entry _ -> "Entry" | Absent -> "Absent" | No_memory n -> Printf.sprintf "No_memory %d" n
    in
    let a = call im.idev "entry" ~counted:true ~pre ~show (fun () -> D.entry im.i f) in
    locked (fun () ->
        let ts = tstate () in
        match a with
        | Rig_edge.No_memory _ ->
            let asks, first =
              match ts.entry_streak with
              | Some (_, iid, f', k, first) when iid = im.iid && f' = f -> (k + 1, first)
              | _ -> (1, List.hd !trace)
            in
            if asks > 4 then
              violate "CODE-4" [ first; List.hd !trace ] "entry %S asked %d times after No_memory (at most 4)" f asks;
            ts.entry_streak <- Some (im.idev, im.iid, f, asks, first)
        | _ -> ts.entry_streak <- None);
    a

  let prepare im f =
    call im.idev "prepare" ~counted:true ~pre:(loaded_check "prepare" im) (fun () -> D.prepare im.i f)

  let grow dev =
    let pre e =
      let ts = tstate () in
      match (ts.grew, ts.last_room) with
      | Some (d', Rig_edge.Short _), _ when d' == dev ->
          violate "QUEUE-4" [ e ] "grow asked again after a Short without asking room again"
      | Some (d', Rig_edge.Grown), _ when d' == dev ->
          violate "QUEUE-5" [ e ] "grow asked after a Grown without room answering RIG_GROW again"
      | _, Some (d', Rig_edge.Grow) when d' == dev -> ()
      | _ -> violate "QUEUE-5" [ e ] "grow asked on a thread whose last room of %s did not answer RIG_GROW" dev.id
    in
    let a =
      call dev "grow" ~counted:true ~pre
        ~show:(function Rig_edge.Grown -> "Grown" | Short n -> Printf.sprintf "Short %d" n)
        (fun () -> D.grow dev.d)
    in
    locked (fun () ->
        let ts = tstate () in
        ts.grew <- Some (dev, a);
        (* The submission whose room last answered RIG_GROW on this thread. *)
        match ts.room_sub with
        | Some st when st.sdev == dev ->
            st.grows <- st.grows + 1;
            if st.grows > 4 then
              violate "QUEUE-6" [ st.first; List.hd !trace ] "a submission asked grow %d times (at most 4)" st.grows;
            st.last_short <- (match a with Short n -> Some n | Grown -> None)
        | _ -> ());
    a

  let signaled dev =
    let pre e =
      if dev.word = None then violate "TIME-2" [ e ] "signaled on %s, whose word is not the driver's own" dev.id
      else if dev.word_freed then violate "TIME-2" [ e ] "signaled on %s after its word was freed" dev.id
    in
    let v = call dev "signaled" ~counted:(not dev.stopped) ~pre ~show:string_of_int (fun () -> D.signaled dev.d) in
    locked (fun () ->
        if v > dev.observed then dev.observed <- v;
        dev.pending <- List.filter (fun (x, _) -> x > dev.observed) dev.pending;
        (* How long the word has stood still under pending work (GUAR-7, STOP-1). *)
        let waiting_on_work = match dev.last_submitted with Some l -> l > v | None -> false in
        match dev.stall with
        | Some (seen, since) when seen = v && waiting_on_work ->
            dev.stalled_ms <- Float.max dev.stalled_ms (now_ms () -. since)
        | _ -> dev.stall <- (if waiting_on_work then Some (v, now_ms ()) else None));
    v

  let sleep dev ~seen ~still_ms =
    let pre e =
      match dev.stall with
      | Some (s, since) when s = seen ->
          let ms = now_ms () -. since in
          dev.stalled_ms <- Float.max dev.stalled_ms ms;
          if !hang_ms < max_int && ms > float (!hang_ms + hang_grace_ms !hang_ms) then begin
            violate "GUAR-7" [ e ] "rig still sleeps on %s after the word stood at %d for %.0f ms (hang_ms %d)"
              dev.id seen ms !hang_ms;
            raise (Abandoned "GUAR-7")
          end
      | _ -> ()
    in
    call dev "sleep" ~counted:true ~pre (fun () -> D.sleep dev.d ~seen ~still_ms)

  let stop dev ~fault =
    let pre e =
      settle dev;
      if dev.stops > 0 then violate "CNT-1" [ e ] "stop called again on %s" dev.id;
      let in_flight_fns = List.sort_uniq compare (List.map (fun (_, fn, _) -> fn) dev.in_flight) in
      (match dev.in_flight with
      | [] -> ()
      (* Calls of two functions in flight: rig waited for neither.  A rig
         that leaves one function uncounted waits for the others' calls
         first and stops with that one's alone in flight (CNT-2 or CNT-3
         below); one that counts neither is read as this. *)
      | _ when List.length in_flight_fns >= 2 ->
          violate "CNT-1" (List.map (fun (_, _, s) -> s) dev.in_flight @ [ e ])
            "stop of %s while counted calls of %s were in flight: rig waited for none of them" dev.id
            (String.concat " and " in_flight_fns)
      | (_, (("room" | "submit" | "commit") as fn), s) :: _ ->
          violate "CNT-3" [ s; e ] "stop of %s while its %s, a C call of a device that declares may_block, is in flight: rig did not count it" dev.id fn
      | (_, fn, s) :: _ ->
          violate "CNT-2" [ s; e ] "stop of %s while a counted call of %s is in flight" dev.id fn);
      let inside = opening_or_closing dev in
      if not inside then violate "STOP-1" [ e ] "stop of %s outside a close or an open of its name" dev.id;
      (match (dev.faulted, fault) with
      | Some f, None -> violate "STOP-1" [ f; e ] "stop of %s with fault None after a Fault of a counted call" dev.id
      | None, None when dev.lost_for_hang ->
          violate "STOP-1" [ e ] "stop of %s with fault None, after rig lost it for its hang bound (a wait on hung work raised Device_lost)" dev.id
      | None, Some why when dev.stalled_ms < float !hang_ms /. 2. && not dev.faulted_at_close ->
          violate "STOP-1" [ e ] "stop of %s with fault Some %S, but it neither faulted nor hung" dev.id why
      | _ -> ());
      dev.stops <- dev.stops + 1;
      dev.stopped <- true
    in
    call dev "stop" ~counted:false ~pre (fun () -> D.stop dev.d ~fault)

  let unload im =
    let pre e =
      if im.unloaded then violate "GUAR-5" [ e ] "image %d unloaded again" im.iid;
      im.unloaded <- true;
      check_free_timing im.idev None e "unload"
    in
    call im.idev "unload" ~counted:(not im.idev.stopped) ~pre (fun () -> D.unload im.i)

  let finish () =
    locked (fun () ->
        List.iter settle !devices;
        By_thread.iter
          (fun _ ts ->
            match ts.expect_fallback with
            | Some (_, _, first) -> violate "GUAR-6" [ first ] "alloc of Mapped answered None and rig never fell back"
            | None -> ())
          threads;
        List.rev !violations)

  let events () = locked (fun () -> List.rev !trace)
end
