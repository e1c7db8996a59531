(* blindgq: third-party rig drivers about the room / grow protocol (QUEUE-1,
   QUEUE-2, QUEUE-3), prepare (CODE-7) and image (CODE-1).

   Every driver is hostmem's device (hostmem's C stubs, hm_*, wrapped: memory,
   entries, the worker, the word, sleep and stop are hostmem's) behind a
   queue layer of its own (blindgq_stubs.c: staging slots per device, backed
   by blocks of Device memory charged to hostmem's budget, in front of
   hostmem's own room/submit/commit), with image/entry/prepare code of its
   own.  Each driver differs from the plain one in ONE place.

   | driver                      | what it does                                              | clause    | the document's sentence                                   |
   |-----------------------------|-----------------------------------------------------------|-----------|-----------------------------------------------------------|
   | gq-grow-spills-chunk        | grow allocates chunks of 4 blocks (32 slots); it earmarks  | QUEUE-1   | "It changes nothing the C functions read: a later room    |
   |                             | for the thread what its submission lacks and puts the     | (broken)  | puts what it made into the queues."                       |
   |                             | chunk's surplus straight into the shared free pool, where |           |                                                           |
   |                             | other threads' rooms take it before this thread's room    |           |                                                           |
   | gq-grow-reaps-reservations  | grow first "reaps" other threads' reservations that have  | QUEUE-1   | "It changes nothing the C functions read" (a reservation  |
   |                             | nothing staged (thought abandoned) and scavenges the      | (broken)  | is what submit reads; the pool is what room reads)        |
   |                             | pool's free slots into its own earmark before allocating: |           |                                                           |
   |                             | a thread whose room answered RIG_ROOM then fails submit   |           |                                                           |
   | gq-room-fifo-growers        | room serves threads that asked to grow in ticket order:   | QUEUE-2   | "Once it has answered Grown, room must not answer         |
   |                             | a grown thread gets RIG_GROW again while an older grower  | (broken)  | RIG_GROW for those parts again, whatever other            |
   |                             | (whose growth answered Short) still waits                 |           | submissions' growths answer."                             |
   | gq-room-waiter-headroom     | room keeps the pool's free slots for the other threads    | QUEUE-2   | same sentence                                             |
   |                             | whose rooms asked to grow (their needs, recorded by room) | (broken)  |                                                           |
   |                             | and counts a grown thread's earmark only past that        |           |                                                           |
   |                             | reserve: RIG_GROW again after Grown while one waits       |           |                                                           |
   | gq-grow-all-or-nothing      | grow allocates every block the submission lacks or none:  | QUEUE-3   | "It is Short n if d has no memory for n bytes the growth  |
   |                             | on a failed block it frees the blocks this call got and   | (broken)  | takes. What it made stays for a later room."              |
   |                             | answers Short (n = the bytes still lacking)               |           |                                                           |
   | gq-prepare-flag-early       | prepare hands f to a compiler thread; it marks f started  | CODE-7    | "a prepare that raises must have changed nothing"         |
   |                             | before its pacing wait; an asynchronous exception at that | (broken)  |                                                           |
   |                             | wait leaves the mark, so every later prepare of f starts  |           |                                                           |
   |                             | nothing (entry still makes f itself)                      |           |                                                           |
   | gq-prepare-rollback-leak    | prepare compiles f, records it, then waits for the        | CODE-7    | "a prepare that raises must have changed nothing"         |
   |                             | program's upload; its handler on an exception there       | (broken)  |                                                           |
   |                             | removes the record but forgets to free the scratch        |           |                                                           |
   | gq-prepare-cache-blind      | prepare fills a cache of compiled programs that it checks | CODE-7    | "A prepare of an f that has an entry or a started prepare |
   |                             | alone: a prepare of an f that entry already made          | (broken)  | must start nothing"                                       |
   |                             | compiles f again (and charges its scratch again)          |           |                                                           |
   | gq-image-index-raises       | image finds the header line with String.index b '\n':     | CODE-1    | "image d b takes the binary b, or is Error why if d       |
   |                             | a binary with no newline (kit.refused_binary) raises      | (broken)  | refuses it."                                              |
   |                             | Not_found instead of Error                                |           |                                                           |
   | gq-ok-thread-rings          | the layer's slots are per-thread rings: room reads only   | conforming| "a later room puts what it made into the queues" (here:   |
   |                             | the calling thread's ring; grow earmarks; room adds the   |           | the thread's own ring); QUEUE-2 holds since nothing but   |
   |                             | earmark to the thread's ring                              |           | the thread itself changes its ring                        |
   | gq-ok-surplus-kept          | grow allocates chunks of 4 blocks, all earmarked for the  | conforming| "What it made stays for a later room"; the surplus never  |
   |                             | thread; room takes from the earmark only what the pool    |           | reaches what other threads' C functions read             |
   |                             | lacks and keeps the rest for the thread's later rooms     |           |                                                           |
   | gq-ok-prepare-helper        | prepare paces (a wait) BEFORE changing anything, then, in | conforming| "prepare i f may start making what entry i f makes and    |
   |                             | one step under the image's lock with no wait, records the |           | return without waiting"; "Doing nothing is a valid        |
   |                             | job and hands it to a compiler thread; entry waits for    |           | prepare"; an ended prepare ended at the pacing wait,      |
   |                             | the job and, on any failure of it, makes f itself         |           | having changed nothing                                    |
   | gq-ok-lazy-image            | image checks only the header line (Error without it) and  | conforming| "image d b takes the binary b, or is Error why if d       |
   |                             | parses the function lines at first use; a bad line is a   |           | refuses it": which binaries d refuses is the driver's     |
   |                             | function the image lacks (entry: Absent)                  |           | choice; image never raises                                |

   Every other driver function is hostmem's: the plain queue layer (mode
   Plain) follows hostmem's protocol (grow earmarks the whole submission for
   the calling thread; room adopts the earmark), prepare does nothing unless
   the driver's mode says otherwise.

   Ambiguities met, and how I decided each:

   A1. "changes nothing the C functions read" (QUEUE-1): room itself reads
       the calling thread's earmark (hostmem does so too), so grow writing
       the earmark cannot be what is forbidden.  I read it as: grow changes
       none of the state that the C functions of OTHER submissions read (the
       shared pool, its free count, reservations, admission limits); what it
       makes for the calling thread reaches the queues only through that
       thread's later room.  Hence spills-chunk and reaps-reservations are
       QUEUE-1.

   A2. QUEUE-1 vs QUEUE-2 for a grow that makes too little: a grow that makes
       less than the submission needs breaks QUEUE-1's "makes what d's queues
       need" AND shows as QUEUE-2 (room answers RIG_GROW again).  I avoided
       that shape: both QUEUE-2 drivers have a grow that makes exactly what
       the plain driver makes; only room's policy (FIFO tickets, headroom for
       waiters) answers RIG_GROW after Grown.  Neither policy reads anything
       grow writes besides the caller's own earmark and the other threads'
       needs, which room (not grow) records.

   A3. "The known grow puts slots straight in the shared pool" also breaks
       QUEUE-2 once another thread takes them (the grown thread's room
       answers RIG_GROW again).  spills-chunk avoids that: the grown thread's
       earmark covers its own submission; only the chunk's surplus leaks.
       reaps-reservations likewise earmarks the whole need.  (One corner: if
       hostmem's own pool asked to grow while the layer reserved, a reap by
       another thread can take that layer reservation and the grown thread's
       room answers RIG_GROW again; that is the same reaping bug, so I count
       it as QUEUE-1.)

   A4. QUEUE-3 "What it made stays": I read it as the memory a Short growth
       obtained stays the thread's (charged, earmarked) until a later room
       puts it into the queues (or stop releases it).  An all-or-nothing
       rollback breaks it even though rig's retry then succeeds once
       reclamation frees n bytes; the probe is the budget right after Short.
       n itself is reported as the bytes still lacking (as the plain driver
       does), so only "stays" is broken.

   A5. CODE-7 "a prepare that raises must have changed nothing": rig calls
       prepare masked, so on Linux an asynchronous exception can end it only
       at a wait.  A prepare with no wait cannot be ended there; a prepare
       with a wait must do the wait before its first change, or undo every
       change in its handler.  I count as "changed" both the memory charged
       (rollback-leak) and the started mark that makes later prepares start
       nothing (flag-early): the latter changes what prepare does next.

   A6. CODE-7 "started prepare" vs "entry": a cache of prepared programs that
       prepare checks but that is distinct from the entries table is the
       cache-blind bug; consulting both tables is required.

   A7. CODE-1 and lazy validation: the document does not say which binaries a
       device must refuse; the kit names one it refuses (refused_binary).  I
       decided that an image that checks the header eagerly (so the kit's
       refused binary gets Error) and leaves malformed function lines to be
       functions the image lacks is conforming: image never raises and never
       answers anything but Ok or Error.  The CODE-1 bug is a raise.

   A8. Short n's n: the document says n is bytes d has no memory for.  With
       two layers (the gq layer and hostmem's own pool) each growing, Short n
       is the sum of both layers' missing bytes.

   A9. Where a prepare's helper thread comes from: starting it inside
       prepare would put a call that may wait (spawn) in prepare, and a
       spawn after the job is recorded could be ended by an asynchronous
       exception after a change.  So the compiler thread is the device's,
       started at open (make, masked, with Rig_edge_primitives.spawn: its
       signals stay blocked, SIG-8) and told to end at stop without being
       waited for (STOP-2, STOP-5: stop releases what the driver made to run
       work).  It takes counted locks only through Prim.Lock, image lock
       before compiler lock everywhere (LOCK-8).

   A10. QUEUE-2 "whatever other submissions' growths answer" vs a room policy
       that reads other threads' needs (fifo-growers, waiter-headroom): the
       needs are recorded by room, not by grow, so grow still changes
       nothing the C functions read (QUEUE-1 holds); the fault is room's
       answer after Grown, hence QUEUE-2 only. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------- hostmem's C side *)

type cdev

external c_open : int -> cdev = "hm_open"
external c_ptr : cdev -> nativeint = "hm_dev_ptr"
external c_fns : unit -> nativeint = "hm_fns"
external c_alloc : cdev -> bool -> int -> int = "hm_alloc"
external c_map : cdev -> nativeint -> int -> int = "hm_map"
external c_map_peer : cdev -> cdev -> int -> int = "hm_map_peer"
external c_free : cdev -> int -> bool = "hm_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "hm_access_byte" "hm_access"

external c_entry : cdev -> int -> int -> int = "hm_entry"
external c_grow : cdev -> int = "hm_grow"
external c_signaled : cdev -> int = "hm_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "hm_wait"
external c_fault : cdev -> string option = "hm_fault"
external c_stop : cdev -> bool -> unit = "hm_stop"

(* --------------------------------------------------- the layer's C side *)

type layer

external gq_create : nativeint -> nativeint -> int -> int -> layer = "gq_create"
external gq_ptr : layer -> nativeint = "gq_ptr"
external gq_fns : unit -> nativeint = "gq_fns"
external gq_grow_begin : layer -> int = "gq_grow_begin"
external gq_grow_add : layer -> int -> unit = "gq_grow_add"
external gq_stop : layer -> unit = "gq_stop"
external gq_debug : layer -> int * int = "gq_debug"

(* Layer modes: must match blindgq_stubs.c. *)
let q_plain = 0
and q_spill = 1
and q_reap = 2
and q_fifo = 3
and q_headroom = 4
and q_rings = 5
and q_surplus = 6

let slots_per_block = 8
let block_bytes = 4096
let initial_blocks = 2
let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format (hostmem.mli). *)
type kind = Nop | Spin | Fault_fn | Hang | Refuse

let kind_code = function Nop -> 0 | Spin -> 1 | Fault_fn -> 2 | Hang -> 3 | Refuse -> 4

let kind_of_string = function
  | "nop" -> Some Nop
  | "spin" -> Some Spin
  | "fault" -> Some Fault_fn
  | "hang" -> Some Hang
  | "refuse" -> Some Refuse
  | _ -> None

let header = "hostmem-image 1"

let parse b =
  match String.split_on_char '\n' b with
  | h :: lines when String.trim h = header ->
      let rec go acc = function
        | [] -> Ok (List.rev acc)
        | l :: rest -> (
            match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
            | [] -> go acc rest
            | [ name; k; n ] -> (
                match (kind_of_string k, int_of_string_opt n) with
                | None, _ -> Error (Printf.sprintf "blindgq: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindgq: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindgq: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindgq: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindgq: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindgq: not a hostmem image (no %S header)" header)

(* The lazy image's parse: good lines only, first of a name wins. *)
let parse_lenient b =
  match String.split_on_char '\n' b with
  | _ :: lines ->
      List.fold_left
        (fun acc l ->
          match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
          | [ name; k; n ] -> (
              match (kind_of_string k, int_of_string_opt n) with
              | Some k, Some n when n >= 0 && not (List.mem_assoc name acc) -> acc @ [ (name, (k, n)) ]
              | _ -> acc)
          | _ -> acc)
        [] lines
  | [] -> []

type prep = P_nothing | P_helper_ok | P_flag_early | P_rollback_leak | P_cache_blind
type imode = I_plain | I_index | I_lazy

module type CONF = sig
  val name : string
  val qmode : int
  val chunk_blocks : int       (* blocks per allocation of grow *)
  val all_or_nothing : bool
  val prep : prep
  val imode : imode
end

(* --------------------------------------------- the process's compiler *)

(* A job of the compiler thread (P_helper_ok, P_flag_early). *)
type 'img job = { img : 'img; jf : string; spec : kind * int; mutable state : jstate }

and jstate =
  | Marked  (* flag-early's mark: nothing queued yet *)
  | Queued
  | Done of (entry_answer, exn) result

(* ------------------------------------------------------------- driver *)

module type S = sig
  include Rig_edge.Package

  (* For gqcheck: the calling thread's earmark and the pool's free slots. *)
  val debug : D.t -> int * int
end

module Make (C : CONF) : S = struct
  module D = struct
    type t = {
      c : cdev;
      layer : layer;
      name : string;
      queue : queue;
      blocks : int list Atomic.t;  (* the layer's blocks: handles charged to the budget *)
      mutable word : region option;
      (* the device's compiler thread (P_helper_ok, P_flag_early): started
         at open, told to end at stop *)
      clock : Prim.Lock.t;
      ccond : Condition.t;
      cq : image job Queue.t;
      mutable cstop : bool;
    }

    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    and image = {
      dev : t;
      bin : string;
      mutable fns : (string * (kind * int)) list option;  (* None: not parsed yet (I_lazy) *)
      lock : Prim.Lock.t;  (* guards the tables *)
      cond : Condition.t;  (* the compiler's results *)
      entries : (string, int) Hashtbl.t;
      pending : (string, image job) Hashtbl.t;
      prepared : (string, int) Hashtbl.t;  (* P_cache_blind's cache *)
      mutable unloaded : bool;
    }

    exception Fault of string

    let key = C.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindgq: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindgq: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindgq: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindgq: write of a freed region")

    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindgq: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindgq: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindgq: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map_host d p n =
      let n = round_up n page in
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindgq: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindgq: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    (* ------------------------------------------------------- image *)

    let new_image d b fns =
      {
        dev = d;
        bin = b;
        fns;
        lock = Prim.Lock.create (C.name ^ ".image");
        cond = Condition.create ();
        entries = Hashtbl.create 8;
        pending = Hashtbl.create 8;
        prepared = Hashtbl.create 8;
        unloaded = false;
      }

    let image d b =
      match C.imode with
      | I_plain -> ( match parse b with Error e -> Error e | Ok fns -> Ok (new_image d b (Some fns)))
      | I_index ->
          (* BUG (CODE-1): the header line is found with String.index, which
             raises Not_found on a binary with no newline at all. *)
          let nl = String.index b '\n' in
          if String.trim (String.sub b 0 nl) <> header then
            Error (Printf.sprintf "blindgq: not a hostmem image (no %S header)" header)
          else ( match parse b with Error e -> Error e | Ok fns -> Ok (new_image d b (Some fns)))
      | I_lazy -> (
          (* header only now; the function lines at first use *)
          match String.split_on_char '\n' b with
          | h :: _ when String.trim h = header -> Ok (new_image d b None)
          | _ -> Error (Printf.sprintf "blindgq: not a hostmem image (no %S header)" header))

    (* Under i.lock. *)
    let fns i =
      match i.fns with
      | Some l -> l
      | None ->
          let l = parse_lenient i.bin in
          i.fns <- Some l;
          l

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindgq: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* A new entry of (k, n), whatever was made before. *)
    let compile_spec d f (k, n) =
      fits f n;
      let h = c_entry d.c (kind_code k) (round_up n word) in
      if h = 0 then No_memory (max n word) else Entry (Int64.of_int h)

    (* hostmem's entry body, under i.lock: the slot is made before the
       charge and filled in place after. *)
    let make_entry i f =
      match List.assoc_opt f (fns i) with
      | None -> Absent
      | Some (k, n) ->
          fits f n;
          let code = kind_code k and bytes = round_up n word in
          Hashtbl.replace i.entries f 0;
          let h = c_entry i.dev.c code bytes in
          Hashtbl.replace i.entries f h;
          if h = 0 then begin
            Hashtbl.remove i.entries f;
            No_memory (max n word)
          end
          else Entry (Int64.of_int h)

    (* ---------------------------------------- the compiler thread *)

    module Compiler = struct
      let rec loop d =
        let job =
          Prim.Lock.protect d.clock (fun () ->
              while Queue.is_empty d.cq && not d.cstop do
                Prim.Lock.await d.clock d.ccond
              done;
              if d.cstop then None else Some (Queue.pop d.cq))
        in
        match job with
        | None -> ()
        | Some job ->
            let r = try Ok (compile_spec job.img.dev job.jf job.spec) with e -> Error e in
            Prim.Lock.protect job.img.lock (fun () ->
                if job.img.unloaded then (
                  match r with Ok (Entry h) -> ignore (c_free job.img.dev.c (Int64.to_int h)) | _ -> ())
                else job.state <- Done r;
                Condition.broadcast job.img.cond);
            loop d

      let start d = ignore (Prim.spawn (fun () -> loop d))

      (* Inside the image's lock: the order is image lock, then this one. *)
      let enqueue job =
        let d = job.img.dev in
        Prim.Lock.protect d.clock (fun () ->
            Queue.push job d.cq;
            Condition.signal d.ccond)

      (* At stop: the thread ends; what it has not taken stays Queued and
         unload drops it (nothing was made for it). *)
      let stop d =
        Prim.Lock.protect d.clock (fun () ->
            d.cstop <- true;
            Queue.clear d.cq;
            Condition.broadcast d.ccond)
    end

    (* A short wait that changes nothing: lets the compiler drain (pacing),
       or the program's upload finish (rollback-leak). *)
    let pace () = Prim.wait (fun () -> Thread.delay 0.0005)

    let entry i f =
      Prim.Lock.protect i.lock (fun () ->
          match Hashtbl.find_opt i.entries f with
          | Some h when h <> 0 -> Entry (Int64.of_int h)
          | _ -> (
              match Hashtbl.find_opt i.prepared f with
              | Some h when h <> 0 ->
                  Hashtbl.replace i.entries f h;
                  Hashtbl.remove i.prepared f;
                  Entry (Int64.of_int h)
              | _ -> (
                  match Hashtbl.find_opt i.pending f with
                  | None -> make_entry i f
                  | Some job -> (
                      while (match job.state with Queued -> true | _ -> false) do
                        Prim.Lock.await i.lock i.cond
                      done;
                      match job.state with
                      | Done (Ok (Entry h)) ->
                          let h = Int64.to_int h in
                          Hashtbl.replace i.entries f h;
                          Hashtbl.remove i.pending f;
                          Entry (Int64.of_int h)
                      | _ ->
                          (* what prepare started failed, or never started:
                             answer as if entry made it itself (CODE-6) *)
                          Hashtbl.remove i.pending f;
                          make_entry i f))))

    let prepare i f =
      match C.prep with
      | P_nothing -> ()
      | P_helper_ok ->
          (* the wait first: ended here, prepare changed nothing *)
          pace ();
          Prim.Lock.protect i.lock (fun () ->
              if not (i.unloaded || Hashtbl.mem i.entries f || Hashtbl.mem i.pending f) then
                match List.assoc_opt f (fns i) with
                | None -> ()
                | Some spec ->
                    let job = { img = i; jf = f; spec; state = Queued } in
                    Hashtbl.replace i.pending f job;
                    Compiler.enqueue job)
      | P_flag_early ->
          (* BUG (CODE-7): the started mark goes in before the pacing wait,
             and nothing takes it out if an exception ends the wait. *)
          let fresh =
            Prim.Lock.protect i.lock (fun () ->
                if i.unloaded || Hashtbl.mem i.entries f || Hashtbl.mem i.pending f then false
                else
                  match List.assoc_opt f (fns i) with
                  | None -> false
                  | Some spec ->
                      Hashtbl.replace i.pending f { img = i; jf = f; spec; state = Marked };
                      true)
          in
          if fresh then begin
            pace ();
            Prim.Lock.protect i.lock (fun () ->
                match Hashtbl.find_opt i.pending f with
                | Some ({ state = Marked; _ } as job) ->
                    job.state <- Queued;
                    Compiler.enqueue job
                | _ -> ())
          end
      | P_rollback_leak -> (
          let made =
            Prim.Lock.protect i.lock (fun () ->
                match Hashtbl.find_opt i.entries f with
                | Some _ -> None
                | None -> (
                    match List.assoc_opt f (fns i) with
                    | Some (_, n) when n <= capacity -> (
                        match make_entry i f with Entry h -> Some h | _ -> None)
                    | _ -> None))
          in
          match made with
          | None -> ()
          | Some _h -> (
              (* wait for the program's upload *)
              try pace ()
              with e ->
                (* BUG (CODE-7): the rollback takes the record out but
                   forgets to free the scratch (c_free _h). *)
                Prim.Lock.protect i.lock (fun () -> Hashtbl.remove i.entries f);
                raise e))
      | P_cache_blind ->
          Prim.Lock.protect i.lock (fun () ->
              (* BUG (CODE-7): only the cache of prepared programs is
                 looked at, not the entries entry made. *)
              if not (Hashtbl.mem i.prepared f) then
                match List.assoc_opt f (fns i) with
                | Some (k, n) when n <= capacity ->
                    Hashtbl.replace i.prepared f 0;
                    let h = c_entry i.dev.c (kind_code k) (round_up n word) in
                    if h = 0 then Hashtbl.remove i.prepared f else Hashtbl.replace i.prepared f h
                | _ -> ())

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          i.unloaded <- true;
          let drop h = if h <> 0 then ignore (c_free i.dev.c h) in
          Hashtbl.iter (fun _ h -> drop h) i.entries;
          Hashtbl.iter (fun _ h -> drop h) i.prepared;
          Hashtbl.iter
            (fun _ j -> match j.state with Done (Ok (Entry h)) -> drop (Int64.to_int h) | _ -> ())
            i.pending;
          Hashtbl.reset i.entries;
          Hashtbl.reset i.prepared;
          Hashtbl.reset i.pending)

    (* -------------------------------------------------------- grow *)

    let rec keep_block d h =
      let l = Atomic.get d.blocks in
      if not (Atomic.compare_and_set d.blocks l (h :: l)) then keep_block d h

    let chunk_slots = C.chunk_blocks * slots_per_block
    let chunk_bytes = C.chunk_blocks * block_bytes

    (* The layer's part: blocks for the slots the calling thread's
       submission lacks; the bytes still missing. *)
    let grow_layer d =
      let missing = gq_grow_begin d.layer in
      if missing <= 0 then 0
      else if C.all_or_nothing then begin
        (* BUG (QUEUE-3): every block or none *)
        let wanted = (missing + chunk_slots - 1) / chunk_slots in
        let rec get k acc =
          if k = 0 then acc
          else match c_alloc d.c true chunk_bytes with 0 -> acc | h -> get (k - 1) (h :: acc)
        in
        let got = get wanted [] in
        if List.length got = wanted then begin
          List.iter
            (fun h ->
              keep_block d h;
              gq_grow_add d.layer chunk_slots)
            got;
          0
        end
        else begin
          List.iter (fun h -> ignore (c_free d.c h)) got;
          (wanted - List.length got) * chunk_bytes
        end
      end
      else
        let rec go missing =
          if missing <= 0 then 0
          else
            match c_alloc d.c true chunk_bytes with
            | 0 -> (missing + chunk_slots - 1) / chunk_slots * chunk_bytes
            | h ->
                keep_block d h;
                gq_grow_add d.layer chunk_slots;
                go (missing - chunk_slots)
        in
        go missing

    let grow d =
      let layer = grow_layer d in
      let hm = c_grow d.c in
      match layer + hm with 0 -> Grown | n -> Short n

    (* ---------------------------------------------------- timeline *)

    let signaled d = c_signaled d.c

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> c_wait d.c seen still_ms);
        check_fault d
      end

    (* hostmem's stop, then the layer's queues released (STOP-5). *)
    let stop d ~fault:_ =
      c_stop d.c true;
      gq_stop d.layer;
      (match C.prep with P_helper_ok | P_flag_early -> Compiler.stop d | _ -> ());
      List.iter (fun h -> ignore (c_free d.c h)) (Atomic.exchange d.blocks [])
  end

  let name = C.name

  let make name () =
    Prim.check_unheld "Blindgq.make";
    Prim.masked (fun () ->
        let c = c_open capacity in
        let hs = List.filter (( <> ) 0) (List.init initial_blocks (fun _ -> c_alloc c true block_bytes)) in
        let layer = gq_create (c_fns ()) (c_ptr c) C.qmode (List.length hs * slots_per_block) in
        let queue = c_queue ~fns:(gq_fns ()) ~dev:(gq_ptr layer) ~may_block:true in
        let d =
          {
            D.c;
            layer;
            name;
            queue;
            blocks = Atomic.make hs;
            word = None;
            clock = Prim.Lock.create (C.name ^ ".compiler");
            ccond = Condition.create ();
            cq = Queue.create ();
            cstop = false;
          }
        in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        (match C.prep with P_helper_ok | P_flag_early -> D.Compiler.start d | _ -> ());
        d)

  let openers () =
    Prim.check_unheld "Blindgq.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ C.name ^ "-0"; C.name ^ "-1" ])

  let kit = Hostmem.kit
  let debug (d : D.t) = gq_debug d.layer
end

(* --------------------------------------------------------- the drivers *)

type driver = {
  dname : string;
  clause : string;  (* "conforming" or the clause it breaks *)
  package : (module Rig_edge.Package);
  s : (module S);
}

let conf ?(qmode = q_plain) ?(chunk_blocks = 1) ?(all_or_nothing = false) ?(prep = P_nothing)
    ?(imode = I_plain) name : (module CONF) =
  (module struct
    let name = name
    let qmode = qmode
    let chunk_blocks = chunk_blocks
    let all_or_nothing = all_or_nothing
    let prep = prep
    let imode = imode
  end)

let driver clause c =
  let module M = Make ((val c : CONF)) in
  { dname = M.name; clause; package = (module M : Rig_edge.Package); s = (module M : S) }

let all =
  [
    driver "QUEUE-1" (conf ~qmode:q_spill ~chunk_blocks:4 "gq-grow-spills-chunk");
    driver "QUEUE-1" (conf ~qmode:q_reap "gq-grow-reaps-reservations");
    driver "QUEUE-2" (conf ~qmode:q_fifo "gq-room-fifo-growers");
    driver "QUEUE-2" (conf ~qmode:q_headroom "gq-room-waiter-headroom");
    driver "QUEUE-3" (conf ~all_or_nothing:true "gq-grow-all-or-nothing");
    driver "CODE-7" (conf ~prep:P_flag_early "gq-prepare-flag-early");
    driver "CODE-7" (conf ~prep:P_rollback_leak "gq-prepare-rollback-leak");
    driver "CODE-7" (conf ~prep:P_cache_blind "gq-prepare-cache-blind");
    driver "CODE-1" (conf ~imode:I_index "gq-image-index-raises");
    driver "conforming" (conf ~qmode:q_rings "gq-ok-thread-rings");
    driver "conforming" (conf ~qmode:q_surplus ~chunk_blocks:4 "gq-ok-surplus-kept");
    driver "conforming" (conf ~prep:P_helper_ok "gq-ok-prepare-helper");
    driver "conforming" (conf ~imode:I_lazy "gq-ok-lazy-image");
  ]
