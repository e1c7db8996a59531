(* fake.ml: the reference fake driver (Rig_edge.Package) over the C fake
   device of fake_core.c, with its configuration, its mutants (each breaks
   one clause of spec/clauses.tsv) and its fault injection. *)

module E = Rig_edge
module P = Rig_edge_primitives

(* ------------------------------------------------------------ C side *)

type cdev

external c_open : int array -> int -> int -> cdev = "fake_stub_open"
external c_dev_ptr : cdev -> nativeint = "fake_stub_dev_ptr"
external c_queue_fns : unit -> nativeint = "fake_stub_queue_fns"
external c_word : cdev -> int = "fake_stub_word" [@@noalloc]
external c_dead : cdev -> bool = "fake_stub_dead" [@@noalloc]
external c_last_value : cdev -> int = "fake_stub_last_value" [@@noalloc]
external c_set_commit_hold : cdev -> int -> unit = "fake_stub_set_commit_hold"
external c_used : cdev -> int -> int = "fake_stub_used"
external c_charge : cdev -> int -> int -> unit = "fake_stub_charge"
external c_word_region : cdev -> nativeint = "fake_stub_word_region"
external c_alloc : cdev -> int -> int -> nativeint = "fake_stub_alloc"
external c_map_peer : cdev -> nativeint -> nativeint = "fake_stub_map_peer"
external c_map_host : cdev -> nativeint -> int -> nativeint = "fake_stub_map_host"
external c_free : cdev -> nativeint -> unit = "fake_stub_free"
external c_region_handle : nativeint -> int64 = "fake_stub_region_handle"
external c_region_size : nativeint -> int = "fake_stub_region_size"
external c_read : nativeint -> int -> bytes -> bool = "fake_stub_read"
external c_revoked : nativeint -> bool = "fake_stub_region_revoked"
external c_write : nativeint -> int -> string -> bool = "fake_stub_write"
external c_image_load : cdev -> string array -> int array -> int array -> nativeint
  = "fake_stub_image_load"
external c_entry : nativeint -> int -> int = "fake_stub_entry"
external c_prepare : nativeint -> int -> unit = "fake_stub_prepare"
external c_evict_prepared : nativeint -> int -> bool -> bool -> unit = "fake_stub_evict_prepared"
external c_prepare_traced : nativeint -> int -> (int -> unit) -> unit = "fake_stub_prepare_traced"
external c_scratch : nativeint -> int -> int = "fake_stub_scratch"
external c_unload : nativeint -> unit = "fake_stub_unload"
external c_grow : cdev -> int = "fake_stub_grow"
external c_sleep : cdev -> int -> int -> bool = "fake_stub_sleep"
external c_sleep_holding : cdev -> int -> int -> bool = "fake_stub_sleep_holding"
external c_sleep_fault_unblocked : cdev -> int -> int -> bool = "fake_stub_sleep_fault_unblocked"
external c_fault_reason : cdev -> string = "fake_stub_fault_reason"
external c_stop : cdev -> unit = "fake_stub_stop"
external c_inject : int -> int -> int -> string -> unit = "fake_stub_inject"
external c_bus_dma : cdev -> nativeint -> string -> int64 = "fake_stub_bus_dma"
external c_bus_copy : string -> int64 -> bytes -> bool -> bool = "fake_stub_bus_copy"

(* enum fake_kind *)
let kind_code = function E.Device -> 0 | E.Mapped -> 1 | E.Pinned -> 2

(* enum fake_op *)
let ops = [ ("nop", 0); ("spin", 1); ("fault", 2); ("hang", 3); ("fill", 4); ("refuse", 5) ]

(* The configuration and the mutants (Fake_knobs), and the fault injection
   (Fake_injection), are modules of their own. *)
include Fake_knobs
include Fake_injection

(* ------------------------------------------------------------ devices *)

type kind = Memory of E.memory | Peer_mapping | Host_mapping | Word

(* Sleeps of a device in their wait, and sleeps begun. *)
type sleepers = {
  waiting : int Atomic.t;
  begun : int Atomic.t;
  feeding : int list Atomic.t;  (* while-fed's: threads whose room answered Room, before their commit *)
}

type t = {
  id : int;
  name : string;
  slot : int;  (** which opener made it *)
  dev : cdev;
  cfg : config;
  mut : int;
  stopped : bool Atomic.t;
  shadow : int Atomic.t;
      (** the word as the last sleep saw it (the signaled-shadow mutant reads
          it), or as signaled-cached's last refresh did *)
  signaled_calls : int Atomic.t;  (** signaled-cached's calls so far *)
  reads_after_stop : int Atomic.t;  (** the signaled-gone-after-stop mutant's count *)
  sleepers : sleepers;  (** the commit-fails-beside-sleep mutant's *)
  nth_open : int;  (** 1 for the first open of its name, 2 for the next...: the peer-two-opens mutant reads it *)
  opened_at : float;  (** Unix time of its make: the peer-waits-link mutant reads it *)
  facts : region E.facts;
}

and region = {
  ptr : nativeint;
  kind : kind;
  owner : cdev;  (** keeps the C device alive while the region is *)
  freed : bool Atomic.t;
  place : E.place;
}

type image = {
  on : t;
  iptr : nativeint;
  fns : (string * int) list;  (** name, index in the C image *)
  unloaded : bool Atomic.t;
  mutable started : string list;  (** the prepare-marks-then-logs mutant's record *)
  mutable making : string list;  (** the prepare-oom-stuck mutant's marks *)
}

let names = [| "fake0"; "fake1"; "fake2" |]
let opens_of_name = Array.map (fun _ -> Atomic.make 0) names
let next_id = Atomic.make 0

(* The newest device of each opener, held weakly so that it can still go:
   only the free-touches-new mutant reads it. *)
let newest : t Weak.t = Weak.create (Array.length names)

(* The start of each public function that may take a lock: the check of
   LOCK-4, then signals blocked for the whole run (SIG-6), through the
   primitives (SIG-9).  The mutants of the two go by the current mutant, as
   openers and make have no device. *)
let public fn f =
  P.check_unheld fn;
  let m = Atomic.get mutant in
  if m = m_public_unmasked then f ()
  else if m = m_masks_by_hand then begin
    let old = Thread.sigmask Unix.SIG_BLOCK (List.init 64 (fun i -> i + 1)) in
    Fun.protect ~finally:(fun () -> ignore (Thread.sigmask Unix.SIG_SETMASK old)) f
  end
  else P.masked f

(* The sleep-keeps-runtime-beside-* mutants' step: 1-ms slices of sleep,
   each one keeping the runtime while [while_ ()] holds, until still ms
   have passed or the word moved; true if the device faulted. *)
let held_slices ~while_ dev seen still =
  let until = Unix.gettimeofday () +. (float still /. 1000.) in
  let rec slices () =
    let left = int_of_float (Float.ceil ((until -. Unix.gettimeofday ()) *. 1000.)) in
    if left <= 0 || c_word dev <> seen then false
    else (if while_ () then c_sleep_holding dev seen 1 else c_sleep dev seen 1) || slices ()
  in
  slices ()

(* The thread and time of the last call of a kind, for the
   sleep-keeps-runtime-beside-* mutants: [stamp] notes one, [by_another]
   says whether the last was another thread's, less than 2 ms ago. *)
let stamp last = Atomic.set last (Thread.id (Thread.self ()), Unix.gettimeofday ())

let by_another last () =
  let id, at = Atomic.get last in
  id >= 0 && id <> Thread.id (Thread.self ()) && Unix.gettimeofday () -. at < 0.002

(* beside-alloc's: alloc or free of any device; beside-feed's: room,
   submit or commit of any device *)
let last_alloc = Atomic.make (-1, 0.)
let last_feed = Atomic.make (-1, 0.)

(* amid-alloc's: the alloc and free calls in flight, of any device *)
let allocs_in_flight = Atomic.make 0

let amid_alloc t f =
  if t.mut <> m_sleep_keeps_runtime_amid_alloc then f ()
  else begin
    Atomic.incr allocs_in_flight;
    Fun.protect ~finally:(fun () -> Atomic.decr allocs_in_flight) f
  end

(* The locate-waits-every-4th mutant's count of locates. *)
let locates = Atomic.make 0

(* A counted call: public, refused after stop, and injectable; [answer] is
   its failure answer, for the functions in [answerable].  Takes the
   device's stopped flag, as regions are made before their device. *)
let counted_on ?answer stopped fn f =
  public fn (fun () ->
      if Atomic.get stopped then invalid_arg ("fake: " ^ fn ^ " after stop");
      match (injected fn, answer) with
      | true, Some a -> a ()
      | _ -> f ())

let counted ?answer t fn f = counted_on ?answer t.stopped fn f

(* Holds dev, so that the C region outlives a holder of the place alone. *)
let reach dev stopped ptr freed access =
  counted_on stopped "reach" (fun () ->
      if Atomic.get freed then invalid_arg "fake: reach of a freed region";
      if c_revoked ptr then raise (Fault "fake: the mapping was revoked by the stop of the device whose memory it maps");
      let ok =
        match access with
        | E.Read { off; into } -> off >= 0 && c_read ptr off into
        | E.Write { off; from } -> off >= 0 && c_write ptr off from
      in
      ignore (Sys.opaque_identity dev);
      if not ok then invalid_arg "fake: reach out of the region's bounds")

let region_on dev stopped kind ptr =
  if ptr = 0n then raise Out_of_memory;
  let freed = Atomic.make false in
  let place =
    { E.handle = c_region_handle ptr; size = c_region_size ptr; reach = Some (reach dev stopped ptr freed) }
  in
  { ptr; kind; owner = dev; freed; place }

let region_of t kind ptr = region_on t.dev t.stopped kind ptr

(* The lock of alloc, in the mutants that have one (the conforming driver
   takes no lock of its own in OCaml).  Each mutant breaks one clause: *)
let alloc_mutex = Mutex.create ()
let alloc_lock = P.Lock.create "fake.alloc"

(* The peer-takes-lock mutant's lock. *)
let peer_table_lock = P.Lock.create "fake.peer-table"
let alloc_busy = Atomic.make 0

(* The wait-drops-lock mutant: the shape of a Condition.wait that an
   exception leaves without its mutex (OCaml issue 12675), by hand. *)
let sleep_mutex = Mutex.create ()

(* The prepare-fault-marks mutant's record of the functions being made, in
   the process: (name, scratch bytes). *)
let being_made : (string * int, unit) Hashtbl.t = Hashtbl.create 8

(* The prepare-oom-stuck mutant's wait for a making to end. *)
let making_mutex = Mutex.create ()
let making_done = Condition.create ()

(* The entry cache's mutex of the entry-lock-uncounted mutant. *)
let entry_mutex = Mutex.create ()

(* The free-lock-uncounted mutant's statistics and their mutex. *)
let free_mutex = Mutex.create ()
let last_freed = ref None

(* The prepare-c-lock-uncounted mutant's trace: the last prepare started. *)
let prepare_trace = ref ""

(* The table of the make-table-uncounted and grow-stats-uncounted mutants,
   shared by the functions of the driver as real tables are: make (or grow)
   holds its mutex uncounted while OCaml code runs, alloc takes it counted. *)
let table_mutex = Mutex.create ()
let table_log : string list ref = ref []

(* The signaled-consumes-fault mutant: the id of the last device whose
   fault a signaled read (no lock: an atomic, as signaled may). *)
let fault_read_by = Atomic.make (-1)

let wait_dropping_lock wait =
  P.hold ();
  Mutex.lock sleep_mutex;
  Fun.protect
    ~finally:(fun () -> Mutex.unlock sleep_mutex; P.give ())
    (fun () ->
      Mutex.unlock sleep_mutex;
      let v = wait () in
      Mutex.lock sleep_mutex;
      v)

(* The two locks of the lock-order-inversion mutant. *)
let memory_lock = P.Lock.create "fake.memory"
let queue_lock = P.Lock.create "fake.queue"

(* The threads inside alloc, by thread id (the alloc-not-reentrant mutant). *)
let alloc_inside = Bytes.make 4096 '\000'

(* The signaled-try-lock mutant's statistics, under a counted try-lock. *)
let stats_mutex = Mutex.create ()

(* The signaled-locks-inside-alloc mutant's lock. *)
let inside_alloc_lock = P.Lock.create "fake.inside-alloc"

(* Whether the calling thread is inside alloc (alloc-not-reentrant,
   signaled-locks-inside-alloc): a byte per thread, set and cleared
   without allocating, so that an asynchronous exception leaves no mark. *)
let inside_alloc_slot () = Thread.id (Thread.self ()) land (Bytes.length alloc_inside - 1)
let thread_inside_alloc () = Bytes.get alloc_inside (inside_alloc_slot ()) = '\001'

let marked_inside_alloc f =
  let k = inside_alloc_slot () in
  Bytes.set alloc_inside k '\001';
  match f () with
  | v -> Bytes.set alloc_inside k '\000'; v
  | exception e -> Bytes.set alloc_inside k '\000'; raise e
let signaled_reads = ref 0

let alloc_guard t f =
  if t.mut = m_unlock_by_hand then begin
    (* ASYNC-2: given back after the call, not in a handler. *)
    P.hold ();
    Mutex.lock alloc_mutex;
    let v = f () in
    Mutex.unlock alloc_mutex;
    P.give ();
    v
  end
  else if t.mut = m_alloc_in_protect_gap then begin
    (* ASYNC-2: an allocation between the take and the handler. *)
    P.hold ();
    Mutex.lock alloc_mutex;
    let pending = Sys.opaque_identity [ t.id; t.slot ] in
    match f () with
    | v -> Mutex.unlock alloc_mutex; P.give (); ignore (Sys.opaque_identity pending); v
    | exception e -> Mutex.unlock alloc_mutex; P.give (); raise e
  end
  else if t.mut = m_signaled_takes_lock || t.mut = m_signaled_busy then begin
    (* A correct lock (signaled-takes-lock), or a shared channel marked busy
       with no lock (signaled-busy). *)
    if t.mut = m_signaled_takes_lock then P.Lock.protect alloc_lock f
    else begin
      Atomic.incr alloc_busy;
      match f () with v -> Atomic.decr alloc_busy; v | exception e -> Atomic.decr alloc_busy; raise e
    end
  end
  else if t.mut = m_lock_order_inversion || t.mut = m_alloc_grow_order then
    (* LOCK-8: alloc takes the queue lock inside the memory lock, free (or
       grow) the other way round (free_guard, grow). *)
    P.Lock.protect memory_lock (fun () -> P.Lock.protect queue_lock f)
  else if t.mut = m_lock_uncounted then Mutex.protect alloc_mutex f
  else if t.mut = m_make_table_uncounted || t.mut = m_grow_stats_uncounted then begin
    P.hold ();
    match Mutex.protect table_mutex f with v -> P.give (); v | exception e -> P.give (); raise e
  end
  else if t.mut = m_signaled_locks_inside_alloc then marked_inside_alloc f
  else if t.mut = m_alloc_not_reentrant then begin
    (* LOCK-9: no lock, but a thread already inside alloc is refused *)
    if thread_inside_alloc () then failwith "fake: alloc entered again on a thread inside it";
    marked_inside_alloc f
  end
  else f ()

let free_guard t f =
  if t.mut = m_lock_order_inversion then P.Lock.protect queue_lock (fun () -> P.Lock.protect memory_lock f)
  else f ()

(* The locate-cache-torn mutant's caches, one per thread, found without a
   lock (locate takes none). *)
type place_cache = { mutable key : region option; mutable value : E.place }

module Thread_map = Map.Make (Int)

let place_caches : place_cache Thread_map.t Atomic.t = Atomic.make Thread_map.empty

let rec my_place_cache () =
  let id = Thread.id (Thread.self ()) in
  match Thread_map.find_opt id (Atomic.get place_caches) with
  | Some c -> c
  | None ->
      let m = Atomic.get place_caches in
      let c = { key = None; value = { E.handle = 0L; size = 0; reach = None } } in
      if Atomic.compare_and_set place_caches m (Thread_map.add id c m) then c else my_place_cache ()

(* The key first, then a copy of the place (an allocation), then the value. *)
let cache_place r =
  let c = my_place_cache () in
  c.key <- Some r;
  let p = { r.place with size = r.place.size } in
  c.value <- p;
  p

module D = struct
  type nonrec t = t
  type nonrec region = region
  type nonrec image = image

  exception Fault = Fault

  let key = "rig-fake"
  let facts t = t.facts
  let locate t r =
    ignore (injected "locate");
    if t.mut = m_locate_waits then P.wait Thread.yield;
    if t.mut = m_locate_checks_holds then P.check_unheld "locate";
    if t.mut = m_locate_mapping_checks_holds && (r.kind = Peer_mapping || r.kind = Host_mapping) then P.check_unheld "locate";
    if t.mut = m_locate_waits_every_4th && Atomic.fetch_and_add locates 1 mod 4 = 3 then P.wait Thread.yield;
    if t.mut = m_locate_logs then prerr_endline "fake: locate";
    if t.mut = m_locate_faults_when_lost && c_dead t.dev then raise (Fault "fake: locate of a region of a lost device");
    if t.mut = m_locate_cache_torn || t.mut = m_locate_cache_self then
      match (my_place_cache ()).key with Some r' when r' == r -> (my_place_cache ()).value | _ -> cache_place r
    else r.place

  (* From what the devices learned at open only (MEM-4). *)
  let peer d d' =
    if d.mut = m_peer_takes_lock then P.Lock.protect peer_table_lock ignore;
    (* the link between the two is known 250 ms after the later open *)
    if d.mut = m_peer_waits_link then begin
      let ready = Float.max d.opened_at d'.opened_at +. 0.25 in
      while Unix.gettimeofday () < ready do
        Thread.delay 0.01
      done
    end;
    (not (injected "peer"))
    && d.id <> d'.id
    && not (d.mut = m_peer_live && (c_dead d.dev || c_dead d'.dev))
    (* a peer table of two rows per name, filled at open *)
    && not (d.mut = m_peer_two_opens && (d.nth_open > 2 || d'.nth_open > 2))

  let alloc t m n =
    if t.mut = m_sleep_keeps_runtime_beside_alloc then stamp last_alloc;
    amid_alloc t @@ fun () ->
    counted t "alloc" ~answer:(fun () -> None) (fun () ->
        if n <= 0 || n mod E.word <> 0 then invalid_arg "fake: alloc of a size not a positive multiple of 4";
        alloc_guard t (fun () ->
            let p = c_alloc t.dev (kind_code m) n in
            if p = 0n then None
            else
              let r = region_of t (Memory m) p in
              if t.mut = m_locate_cache_torn then ignore (cache_place r);
              Some r))

  let free t r =
    if t.mut = m_sleep_keeps_runtime_beside_alloc then stamp last_alloc;
    amid_alloc t @@ fun () ->
    public "free" (fun () ->
        (if t.mut = m_free_lock_uncounted then Mutex.protect free_mutex else fun g -> g ()) @@ fun () ->
        if t.mut = m_free_lock_uncounted then last_freed := Some r.place.size;
        ignore (injected "free");
        if r.owner != t.dev then invalid_arg "fake: free of a region of another device";
        if Atomic.exchange r.freed true then invalid_arg "fake: region freed twice";
        if t.mut = m_stop_forgets_regions && Atomic.get t.stopped && (match r.kind with Memory _ -> true | _ -> false) then
          invalid_arg "fake: free of a region stop released";
        free_guard t (fun () -> c_free t.dev r.ptr);
        if t.mut = m_free_touches_new && Atomic.get t.stopped then
          match (r.kind, Weak.get newest t.slot) with
          | Memory m, Some n when n.id <> t.id -> c_charge n.dev (kind_code m) r.place.size
          | _ -> ())

  let map_peer t _t' r =
    counted t "map_peer" (fun () ->
        if Atomic.get r.freed then invalid_arg "fake: map_peer of a freed region";
        region_of t Peer_mapping (c_map_peer t.dev r.ptr))

  let map_host t p n =
    counted t "map_host" (fun () ->
        if not t.cfg.maps_host then invalid_arg "fake: map_host on a device that does not map host memory";
        if n <= 0 then invalid_arg "fake: map_host of a size not positive";
        let r = c_map_host t.dev p n in
        if r = 0n then invalid_arg "fake: map_host of an address that does not start a page";
        region_of t Host_mapping r)

  (* The PCI functions of the fake machine and their BAR sizes. *)
  let functions = [ ("0000:41:00.0", 1 lsl 20); ("0000:42:00.0", 4096) ]

  (* DDDD:BB:DD.F, hex digits. *)
  let is_bus_address fn =
    let hex = function '0' .. '9' | 'a' .. 'f' | 'A' .. 'F' -> true | _ -> false in
    let ok i c = match i with 4 | 7 -> c = ':' | 10 -> c = '.' | _ -> hex c in
    String.length fn = 12 && Seq.for_all (fun (i, c) -> ok i c) (String.to_seqi fn)

  let dma t r ~fn =
    counted t "dma" ~answer:(fun () -> Error "injected: no way to the memory") (fun () ->
        if not (is_bus_address fn) then
          Error (if t.mut = m_dma_vague then "bad address" else "not a bus address: " ^ fn)
        else
          match List.assoc_opt (String.lowercase_ascii fn) functions with
          | None -> Error ("no such function: " ^ fn)
          | Some bar -> (
              match r.kind with
              | Memory E.Device when r.place.size <= bar -> (
                  match c_bus_dma t.dev r.ptr (String.lowercase_ascii fn) with
                  | 0L -> Error (Printf.sprintf "%s is kept by another open of this machine's devices" fn)
                  | -1L -> Error "no memory for the bus window"
                  | a -> Ok (E.Bus a))
              | Memory E.Device ->
                  Error
                    (Printf.sprintf "BAR of %s is %d bytes, smaller than the region's %d" fn bar
                       r.place.size)
              | _ -> Error (Printf.sprintf "%s reaches only Device memory by DMA" fn)))

  (* The binary format: "rigfake 1", then "fn NAME SCRATCH OP" lines. *)
  let parse b =
    let lines = String.split_on_char '\n' b in
    let rec fns acc seen lineno = function
      | [] -> Ok (List.rev acc)
      | line :: rest -> (
          let err why = Error (Printf.sprintf "rig-fake image, line %d: %s" lineno why) in
          match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim line)) with
          | [] -> fns acc seen (lineno + 1) rest
          | [ "fn"; name; scratch; op ] -> (
              let digits = String.for_all (function '0' .. '9' -> true | _ -> false) scratch in
              match (digits, int_of_string_opt scratch, List.assoc_opt op ops) with
              | _ when List.mem name seen -> err ("function " ^ name ^ " defined twice")
              | false, _, _ | _, None, _ -> err ("scratch is not a decimal byte count: " ^ scratch)
              | _, _, None -> err ("unknown op: " ^ op)
              | true, Some s, Some o -> fns ((name, s, o) :: acc) (name :: seen) (lineno + 1) rest)
          | _ -> err "expected: fn NAME SCRATCH OP")
    in
    match lines with
    | "rigfake 1" :: rest -> fns [] [] 2 rest
    | _ -> Error "not a rig-fake image"

  let image t b =
    counted t "image" ~answer:(fun () -> Error "injected: refused") (fun () ->
        let parsed =
          match parse b with
          | Error "not a rig-fake image" when t.mut = m_image_takes_anything -> Ok []
          | p -> p
        in
        match parsed with
        | Error _ as e -> e
        | Ok fns ->
            let a = Array.of_list fns in
            let iptr =
              c_image_load t.dev
                (Array.map (fun (n, _, _) -> n) a)
                (Array.map (fun (_, s, _) -> s) a)
                (Array.map (fun (_, _, o) -> o) a)
            in
            Ok
              {
                on = t;
                iptr;
                fns = List.mapi (fun i (n, _, _) -> (n, i)) fns;
                unloaded = Atomic.make false;
                started = [];
                making = [];
              })

  let loaded i fn = if Atomic.get i.unloaded then invalid_arg ("fake: " ^ fn ^ " of an unloaded image")

  let entry i f =
    counted i.on "entry" ~answer:(fun () -> E.No_memory 64) (fun () ->
        (if i.on.mut = m_entry_lock_uncounted then Mutex.protect entry_mutex else fun g -> g ()) @@ fun () ->
        loaded i "entry";
        if i.on.mut = m_prepare_oom_stuck && List.mem f i.making then
          (* waits for the making to end, which nothing will say *)
          Mutex.protect making_mutex (fun () -> while List.mem f i.making do Condition.wait making_done making_mutex done);
        match List.assoc_opt f i.fns with
        | None -> E.Absent
        | Some k -> (
            match c_entry i.iptr k with
            | -1 ->
                invalid_arg
                  (Printf.sprintf
                     "fake: function %s needs %d bytes of scratch, more than the device's %d bytes \
                      of Device memory"
                     f (c_scratch i.iptr k) i.on.cfg.device_bytes)
            | -2 -> E.No_memory (c_scratch i.iptr k)
            | e -> E.Entry (Int64.of_int e)))

  (* Synchronous: the entry is made before prepare returns, and whatever
     it answered is left for the next entry to find (CODE-6). *)
  let prepare i f =
    counted i.on "prepare" (fun () ->
        loaded i "prepare";
        match List.assoc_opt f i.fns with
        | None -> if i.on.mut = m_prepare_reports then raise Not_found
        | Some k ->
            if i.on.mut = m_prepare_reports_oom then begin
              (* Makes the entry at once, and says when memory is short. *)
              if c_entry i.iptr k = -2 then failwith (Printf.sprintf "fake: prepare %s: no memory for its scratch" f)
            end
            else if i.on.mut = m_prepare_reserves_then_logs then begin
              (* The reservation is in no record until c_prepare's entry
                 takes it over: nothing gives it back if the trace raises. *)
              let scratch = c_scratch i.iptr k in
              c_charge i.on.dev (kind_code E.Device) scratch;
              prepare_trace := Printf.sprintf "prepare %s: %d bytes reserved" f scratch;
              c_charge i.on.dev (kind_code E.Device) (-scratch);
              c_prepare i.iptr k
            end
            else if i.on.mut = m_prepare_marks_then_logs then begin
              (* Its "started" record is written before the work, and
                 nothing takes it back if the trace raises. *)
              if not (List.mem f i.started) then begin
                i.started <- f :: i.started;
                prepare_trace := Printf.sprintf "prepare %s: started" f;
                c_prepare i.iptr k
              end
            end
            else if i.on.mut = m_prepare_fault_after_make then begin
              (* The device's state is looked at once the work is done. *)
              c_prepare i.iptr k;
              if c_dead i.on.dev then raise (Fault (c_fault_reason i.on.dev))
            end
            else if i.on.mut = m_prepare_fault_marks then begin
              (* The record is cleared where the making ends only. *)
              let key = (f, c_scratch i.iptr k) in
              if not (Hashtbl.mem being_made key) then begin
                Hashtbl.replace being_made key ();
                if c_dead i.on.dev then raise (Fault (c_fault_reason i.on.dev));
                c_prepare i.iptr k;
                Hashtbl.remove being_made key
              end
            end
            else if i.on.mut = m_prepare_oom_stuck then begin
              (* The mark is cleared where the making succeeds only. *)
              if not (List.mem f i.making) then begin
                i.making <- f :: i.making;
                if c_entry i.iptr k <> -2 then i.making <- List.filter (( <> ) f) i.making
              end
            end
            else if i.on.mut = m_prepare_evicts_first || i.on.mut = m_prepare_evicts_pooled
                    || i.on.mut = m_prepare_steals_when_short then begin
              (* A one-program cache per image (or one that makes room only
                 when f does not fit): room is made first (the pooled one
                 keeps the memory for its next program), then a line of
                 trace, then the making. *)
              c_evict_prepared i.iptr k (i.on.mut = m_prepare_evicts_pooled) (i.on.mut = m_prepare_steals_when_short);
              prepare_trace := Printf.sprintf "prepare %s: room made" f;
              c_prepare i.iptr k
            end
            else if i.on.mut = m_prepare_c_lock_uncounted then c_prepare_traced i.iptr k (fun k -> prepare_trace := Printf.sprintf "prepare %s (function %d)" f k)
            else c_prepare i.iptr k)

  let grow t =
    counted t "grow" ~answer:(fun () -> E.Short 64) (fun () ->
        let grow () = match c_grow t.dev with 0 -> E.Grown | n -> E.Short n in
        if t.mut = m_alloc_grow_order then P.Lock.protect queue_lock (fun () -> P.Lock.protect memory_lock grow)
        else if t.mut = m_grow_stats_uncounted then
          Mutex.protect table_mutex (fun () ->
              let a = grow () in
              table_log := Printf.sprintf "grow of device %d: %s" t.id (match a with E.Grown -> "grown" | Short n -> Printf.sprintf "short %d" n) :: !table_log;
              a)
        else grow ())

  (* No lock, no check: rig may call it while it holds a lock (TIME-1). *)
  let signaled t =
    ignore (injected "signaled");
    if t.mut = m_signaled_checks_holds then P.check_unheld "signaled";
    if t.mut = m_stop_drops_word && Atomic.get t.stopped then 0
    else if t.mut = m_signaled_gone_after_stop && Atomic.get t.stopped && Atomic.fetch_and_add t.reads_after_stop 1 > 0 then
      raise (Fault "fake: the word's page was released at stop")
    else if t.mut = m_signaled_shadow then Atomic.get t.shadow
    else if t.mut = m_signaled_cached then begin
      if Atomic.fetch_and_add t.signaled_calls 1 land 7 = 0 then Atomic.set t.shadow (c_word t.dev);
      Atomic.get t.shadow
    end
    else if t.mut = m_signaled_low_word then c_word t.dev land 0xFFFF_FFFF
    else if t.mut = m_signaled_last_submitted then c_last_value t.dev
    else if t.mut = m_signaled_try_lock then begin
      (* Counts its reads under a lock it only tries, counted (rig_hold). *)
      P.hold ();
      if Mutex.try_lock stats_mutex then begin
        incr signaled_reads;
        Mutex.unlock stats_mutex
      end;
      P.give ();
      c_word t.dev
    end
    else if t.mut = m_signaled_takes_lock then P.Lock.protect alloc_lock (fun () -> c_word t.dev)
    else if t.mut = m_signaled_locks_inside_alloc && thread_inside_alloc () then P.Lock.protect inside_alloc_lock (fun () -> c_word t.dev)
    else if t.mut = m_signaled_busy && Atomic.get alloc_busy > 0 then failwith "fake: signaled while the channel is busy"
    else if t.mut = m_signaled_consumes_fault && c_dead t.dev then begin
      Atomic.set fault_read_by t.id;
      c_word t.dev
    end
    else c_word t.dev

  let sleep t ~seen ~still_ms =
    (* The early return (TIME-3) answers at once, waiting for nothing. *)
    counted t "sleep" ~answer:ignore (fun () ->
        let step =
          if t.mut = m_sleep_keeps_runtime then c_sleep_holding
          else if t.mut = m_sleep_keeps_runtime_late then fun dev seen still ->
            (* the rest of the wait "is short": a plain wait, runtime kept *)
            let half = still / 2 in
            c_sleep dev seen half || (c_word dev = seen && c_sleep_holding dev seen (still - half))
          else if t.mut = m_sleep_keeps_runtime_short then fun dev seen still ->
            if still <= 5 then c_sleep_holding dev seen still else c_sleep dev seen still
          else if t.mut = m_sleep_keeps_runtime_busy then fun dev seen still ->
            (* "completion is near, poll for it": only with work in flight *)
            if c_last_value dev <> c_word dev then c_sleep_holding dev seen still else c_sleep dev seen still
          else if t.mut = m_sleep_keeps_runtime_beside_feed then held_slices ~while_:(by_another last_feed)
          else if t.mut = m_sleep_keeps_runtime_beside_alloc then held_slices ~while_:(by_another last_alloc)
          else if t.mut = m_sleep_keeps_runtime_amid_alloc then held_slices ~while_:(fun () -> Atomic.get allocs_in_flight > 0)
          else if t.mut = m_sleep_keeps_runtime_while_fed then
            held_slices ~while_:(fun () ->
                let me = Thread.id (Thread.self ()) in
                List.exists (fun id -> id <> me) (Atomic.get t.sleepers.feeding))
          else if t.mut = m_sleep_keeps_runtime_beside_sleeper then
            held_slices ~while_:(fun () -> Atomic.get t.sleepers.waiting > 1)
          else c_sleep
        in
        let unmasked = if t.mut = m_sleep_unmasks then Some (Thread.sigmask Unix.SIG_SETMASK []) else None in
        let wait () =
          if t.mut = m_sleep_fault_unblocked then c_sleep_fault_unblocked t.dev seen still_ms
          else if t.mut = m_sleep_wait_masked then step t.dev seen still_ms
          else if t.mut = m_sleep_retry_masked then
            (* a wait for the first quarter; the word unmoved, the rest "is
               a retry" that calls the blocking step directly *)
            let first = still_ms / 4 in
            P.wait (fun () -> step t.dev seen first) || (c_word t.dev = seen && step t.dev seen (still_ms - first))
          else P.wait (fun () -> step t.dev seen still_ms)
        in
        let wait =
          if t.mut = m_commit_fails_beside_sleep || t.mut = m_sleep_keeps_runtime_beside_sleeper then fun () ->
            Atomic.incr t.sleepers.begun;
            Atomic.incr t.sleepers.waiting;
            Fun.protect ~finally:(fun () -> Atomic.decr t.sleepers.waiting) wait
          else wait
        in
        let faulted =
          Fun.protect
            ~finally:(fun () -> Option.iter (fun m -> ignore (Thread.sigmask Unix.SIG_SETMASK m)) unmasked)
            (if t.mut = m_wait_drops_lock then fun () -> wait_dropping_lock wait else wait)
        in
        Atomic.set t.shadow (c_word t.dev);
        if faulted && not (t.mut = m_signaled_consumes_fault && Atomic.get fault_read_by = t.id) then
          raise (Fault (c_fault_reason t.dev)))

  let stop t ~fault:_ =
    public "stop" (fun () ->
        if not (Atomic.exchange t.stopped true) then begin
          (* an injected raise ends stop before it ends the device's work,
             as an asynchronous exception may (STOP-7) *)
          ignore (injected "stop");
          c_stop t.dev
        end)

  let unload i =
    public "unload" (fun () ->
        ignore (injected "unload");
        if Atomic.exchange i.unloaded true then invalid_arg "fake: image unloaded twice";
        if i.on.mut = m_stop_forgets_images && Atomic.get i.on.stopped then invalid_arg "fake: unload of an image stop released";
        c_unload i.iptr)
end

(* --------------------------------------------------------- the package *)

let name = "fake"

(* The devices dropped without a stop, as their finaliser saw them; like
   every finaliser of a driver's, it blocks signals with rig_shield (SIG-7). *)
let unstopped_devices : string list Atomic.t = Atomic.make []

(* Takes what it reads, not the device: a finaliser of the device itself
   would keep it, and its C device, for one more collection. *)
let note_unstopped ~name ~id ~mut stopped () =
  if not (Atomic.get stopped) then begin
    let note () = update unstopped_devices (fun l -> Printf.sprintf "%s#%d" name id :: l) in
    if mut = m_finaliser_unshielded then note ()
    else if mut = m_finaliser_waits_unshielded then begin
      P.shield note;
      P.wait (fun () -> Thread.delay 0.001)
    end
    else P.shield note
  end

let unstopped () = Atomic.get unstopped_devices

(* The log of the exit-handler-unshielded, -half-shielded and
   -waits-unshielded mutants. *)
let exit_log : string list Atomic.t = Atomic.make []

let open_device slot =
  let cfg = Atomic.get config in
  let mut = Atomic.get mutant in
  if mut = m_exit_handler_unshielded then
    at_exit (fun () -> update exit_log (fun l -> Printf.sprintf "%s still open at exit" names.(slot) :: l));
  if mut = m_exit_handler_half_shielded then
    at_exit (fun () ->
        P.shield (fun () -> update exit_log (fun l -> Printf.sprintf "%s still open at exit" names.(slot) :: l));
        let summary = Printf.sprintf "%d line(s) in the exit log, the last: %s" (List.length (Atomic.get exit_log)) (String.concat "; " (Atomic.get exit_log)) in
        update exit_log (fun l -> summary :: l));
  if mut = m_exit_handler_waits_unshielded then
    at_exit (fun () ->
        P.shield (fun () -> update exit_log (fun l -> Printf.sprintf "%s still open at exit" names.(slot) :: l));
        P.wait (fun () -> Thread.delay 0.001));
  let dev = c_open [| cfg.device_bytes; cfg.mapped_bytes; cfg.pinned_bytes |] cfg.queue_slots mut in
  if cfg.commit_hold_ms > 0 then c_set_commit_hold dev cfg.commit_hold_ms;
  let q = E.c_queue ~fns:(c_queue_fns ()) ~dev:(c_dev_ptr dev) ~may_block:cfg.may_block in
  (* The queue's closures hold dev, so the C device outlives any holder of
     the queue, not just of the device. *)
  let keep v = ignore (Sys.opaque_identity dev); v in
  let keep = if mut = m_sleep_keeps_runtime_beside_feed then fun v -> stamp last_feed; keep v else keep in
  let sleepers = { waiting = Atomic.make 0; begun = Atomic.make 0; feeding = Atomic.make [] } in
  let rec note f = let l = Atomic.get sleepers.feeding in if not (Atomic.compare_and_set sleepers.feeding l (f l)) then note f in
  let fed () = let me = Thread.id (Thread.self ()) in note (List.filter (fun id -> id <> me)) in
  let room s =
    let a = keep (q.room s) in
    if mut = m_sleep_keeps_runtime_while_fed && a = E.Room then (let me = Thread.id (Thread.self ()) in note (fun l -> me :: l));
    a
  in
  let queue =
    {
      E.room;
      submit = (fun s ~value -> keep (q.submit s ~value));
      commit =
        (fun () ->
          if mut = m_sleep_keeps_runtime_while_fed then fed ();
          if mut <> m_commit_fails_beside_sleep then keep (q.commit ())
          else
            (* a sleep in its wait as the commit begins, or one begun while
               it ran, fails it *)
            let beside = Atomic.get sleepers.waiting > 0 and b0 = Atomic.get sleepers.begun in
            let ok = keep (q.commit ()) in
            ok && not (beside || Atomic.get sleepers.begun <> b0));
    }
  in
  let stopped = Atomic.make false in
  let word = region_on dev stopped Word (c_word_region dev) in
  let t =
    {
      id = Atomic.fetch_and_add next_id 1;
      name = names.(slot);
      slot;
      dev;
      cfg;
      mut;
      stopped;
      shadow = Atomic.make 0;
      signaled_calls = Atomic.make 0;
      reads_after_stop = Atomic.make 0;
      sleepers;
      nth_open = 1 + Atomic.fetch_and_add opens_of_name.(slot) 1;
      opened_at = Unix.gettimeofday ();
      facts =
        {
          E.may_block = cfg.may_block;
          host_addresses = cfg.host_addresses;
          maps_host = cfg.maps_host;
          own_word = Some word;
          queue;
        };
    }
  in
  Gc.finalise_last (note_unstopped ~name:t.name ~id:t.id ~mut stopped) t;
  t

(* The make-records-unmasked mutant's table of opens. *)
let opened_log : string list ref = ref []

(* The openers-cached mutant's list, from the first call. *)
let openers_cache = Atomic.make None

let rec openers () =
  match Atomic.get openers_cache with
  | Some os when Atomic.get mutant = m_openers_cached -> os
  | _ ->
      let os = openers_fresh () in
      if Atomic.get mutant = m_openers_cached then Atomic.set openers_cache (Some os);
      os

and openers_fresh () =
  public "openers" @@ fun () ->
  Array.to_list
    (Array.mapi
       (fun slot name ->
         {
           E.name;
           make =
             (fun () ->
               let body () =
                 let t = open_device slot in
                 Weak.set newest slot (Some t);
                 t
               in
               if Atomic.get mutant = m_make_in_lock then P.masked body
               else if Atomic.get mutant = m_make_records_unmasked then begin
                 (* The open is masked; its record in the table is not. *)
                 let t = public (name ^ ".make") (fun () -> open_device slot) in
                 opened_log := Printf.sprintf "%s opened as device %d" name slot :: !opened_log;
                 Weak.set newest slot (Some t);
                 t
               end
               else if Atomic.get mutant = m_make_table_uncounted then
                 public (name ^ ".make") (fun () ->
                     let t = body () in
                     Mutex.protect table_mutex (fun () -> table_log := Printf.sprintf "%s opened as device %d" name slot :: !table_log);
                     t)
               else public (name ^ ".make") body);
         })
       names)

(* The fake machine's PCI functions, acting on their bus: the windows dma
   opened (fake_bus_read, fake_bus_write).  Not a function of the driver. *)
let bus_agent =
  let fail fn a n = invalid_arg (Printf.sprintf "fake bus: %s reaches no memory at 0x%Lx (%d bytes)" fn a n) in
  {
    E.read =
      (fun ~fn (E.Bus a) n ->
        let into = Bytes.create n in
        if c_bus_copy (String.lowercase_ascii fn) a into false then Bytes.to_string into else fail fn a n);
    write =
      (fun ~fn (E.Bus a) s ->
        if not (c_bus_copy (String.lowercase_ascii fn) a (Bytes.of_string s) true) then fail fn a (String.length s));
  }

let kit =
  {
    E.binary = "rigfake 1\nfn spin 0 spin\nfn fault 0 fault\nfn hang 0 hang\nfn fill 0 fill\n";
    refused_binary = Some "not an image";
    spin = Some "spin";
    fault = Some "fault";
    hang = Some "hang";
    scratch = Some (fun n -> (Printf.sprintf "rigfake 1\nfn scratch %d nop\n" n, "scratch"));
    bus_function = Some "0000:41:00.0";
    bus_agent = Some bus_agent;
  }

let kit_more =
  let scratch_functions sizes =
    let names = List.mapi (fun k _ -> Printf.sprintf "scratch%d" k) sizes in
    ("rigfake 1\n" ^ String.concat "" (List.map2 (Printf.sprintf "fn %s %d nop\n") names sizes), names)
  in
  E.kit_more ~refused_launch:(kit.binary ^ "fn refuse 0 refuse\n", "refuse") ~scratch_functions ()

let configure ?(device_bytes = defaults.device_bytes) ?(mapped_bytes = defaults.mapped_bytes)
    ?(pinned_bytes = defaults.pinned_bytes) ?(queue_slots = defaults.queue_slots)
    ?(may_block = defaults.may_block) ?(host_addresses = defaults.host_addresses)
    ?(maps_host = defaults.maps_host) ?(commit_hold_ms = defaults.commit_hold_ms) () =
  P.check_unheld "configure";
  if device_bytes < 0 || mapped_bytes < 0 || pinned_bytes < 0 || queue_slots < 0 || commit_hold_ms < 0 then
    invalid_arg "Fake.configure: negative size";
  Atomic.set config
    { device_bytes; mapped_bytes; pinned_bytes; queue_slots; may_block; host_addresses; maps_host; commit_hold_ms }

let set_mutant m =
  P.check_unheld "set_mutant";
  match m with
  | None -> Atomic.set mutant 0
  | Some n -> (
      match List.find_opt (fun (n', _, _, _) -> n' = n) mutant_table with
      | Some (_, _, _, code) -> Atomic.set mutant code
      | None -> invalid_arg ("Fake.set_mutant: no mutant " ^ n))

let pending_injections () =
  List.filter_map (fun i -> if Atomic.get i.left > 0 then Some i.fn else None) (Atomic.get injections)

let clear_injections () =
  P.check_unheld "clear_injections";
  Atomic.set injections [];
  List.iter (fun (_, code) -> c_inject code 0 0 "") c_injected

let reset () =
  P.check_unheld "reset";
  Atomic.set config defaults;
  Atomic.set mutant 0

let inject ~fn ~nth what =
  P.check_unheld "inject";
  if not (List.mem fn injectable) then invalid_arg ("Fake.inject: not an injectable function: " ^ fn);
  if nth < 1 then invalid_arg "Fake.inject: nth must be at least 1";
  if what = `Answer && not (List.mem fn answerable) then invalid_arg ("Fake.inject: " ^ fn ^ " has no failure answer");
  match List.assoc_opt fn c_injected with
  | Some code -> (
      (* C cannot raise: a Raise there fails the call, as Fail does; room
         fails only by answering RIG_GROW. *)
      match what with
      | `Fault why when fn <> "room" -> c_inject code nth 2 why
      | `Fault _ | `Raise _ | `Fail | `Answer -> c_inject code nth 1 "")
  | None -> update injections (fun l -> l @ [ { fn; left = Atomic.make nth; what } ])

let usage t m = c_used t.dev (kind_code m)
