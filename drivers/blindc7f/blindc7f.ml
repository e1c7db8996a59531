(* blindc7f ("blind set c7f"): hostmem's device, prepare changed per driver.

   Topic: CODE-7's second half, "a prepare that raises must have changed
   nothing", where the device's work has FAULTED (a launch of the kit's
   fault function) and rig has not learnt it yet (no counted call raised
   Fault), so rig may still call prepare, which may notice the fault and
   raise Fault.  Every driver is hostmem elsewhere (same C device, hm_*
   stubs of hostmem's library, Hostmem.kit); on a healthy device every
   prepare but hostmem's own makes f's entry at once (or on a helper
   thread), which the document allows ("prepare may start making what entry
   i f makes").

   S = the scratch bytes of f (f = a "nop" function: kit.binary's nop, or
   kit.scratch's work).  "fault" = launch kit.fault through the queue (room,
   submit, commit) and let the device fault, without calling sleep.
   free = free Device memory as alloc Device sees it (largest n it grants).

   driver            | what its prepare does                                  | expected   | where the bug shows
   ------------------+--------------------------------------------------------+------------+----------------------------------------------
   c7f-keep-entry    | makes f's entry (scratch charged, recorded), then      | CODE-7     | image; entry fault; fault; free=F1;
                     | checks the device: Fault, keeping the entry            |            | prepare f -> Fault; free = F1 - S (until unload)
   c7f-hold-reserve  | reserves f's scratch (an alloc recorded in the image), | CODE-7     | same: prepare f -> Fault; free = F1 - S;
                     | checks the device: Fault, leaving the reservation      |            | unload gives it back
   c7f-stale-mark    | marks (binary, f) "being prepared" in a process-wide   | CODE-7     | fault; prepare f -> Fault (free unchanged);
                     | pipeline cache, checks the device: Fault, mark left;   |            | stop; open the name again; image; prepare f
                     | a later prepare of (binary, f) on any device thinks    |            | makes nothing, prepare g (same S) makes S:
                     | another is making it and starts nothing                |            | f is treated as having a started prepare
   c7f-leak-staging  | takes a 4096-byte staging buffer, makes f, checks the  | CODE-7     | prepare f -> Fault; free = F1 - 4096; unload;
                     | device; its fault path drops f's entry but forgets     |            | free still F0 - 4096 (leaked for the device's
                     | the staging buffer                                     |            | life)
   c7f-async-runs-on | starts a helper thread that makes f, checks the        | CODE-7     | prepare f -> Fault; ~20 ms later free =
                     | device: Fault, the helper goes on and records f        |            | F1 - S; entry f answers the helper's entry
   c7f-ok-early      | checks the device first: Fault having touched nothing; | conforming | (same sequences: free unchanged by every
                     | else makes f                                           |            | raise, nothing leaks, f and g alike later)
   c7f-ok-alternate  | on a faulted device raises Fault (touching nothing) on | conforming |   "
                     | every other call (a driver-wide call count), makes f   |            |
                     | on the others; makes f on a healthy device             |            |
   c7f-ok-ignore     | ignores faults: makes f, never raises                  | conforming |   "
   c7f-ok-async-undo | helper thread makes f; on a fault prepare cancels the  | conforming |   "
                     | job (and drops what it made, if it made it) before     |            |
                     | raising Fault                                          |            |
   c7f-ok-giveback   | staging buffer + makes f, notices the fault after      | conforming |   "
                     | making, gives back entry and staging, then Fault       |            |

   Every prepare starts nothing for an f that has an entry or a pending
   helper job (CODE-7's first half), reports no failure of its own (an f
   unknown, too big, or without memory: nothing, entry answers; CODE-6), and
   raises only Fault, only once the device has faulted (c_fault, which stays
   recorded, so sleep still raises it: TIME-5).  Locks are Prim.Lock
   (counted, ASYNC-2), helpers are Prim.spawn threads (SIG-8); between a
   charge of device memory and its record no allocation comes, as in
   hostmem's entry.  Entry waits for a pending job (CODE-6); unload never
   waits: a job that finds its image unloaded makes nothing.

   Ambiguities met in the document:
   - CODE-6 says prepare "must report nothing, failures included", yet
     "Any counted call may raise [Fault]" and EXC-3 makes a Fault from
     prepare lose the device: read as Fault (the device's state, not a
     failure to make f) being allowed from prepare, all else reported by
     entry.
   - "changed nothing": nothing says what state counts.  Read as what
     prepare makes or records (memory, entries, reservations, started
     prepares, marks another prepare reads), not an internal call counter
     (c7f-ok-alternate changes one at every call, raising ones included).
     A change a later unload gives back (keep-entry, hold-reserve) is still
     a change: the clause speaks of the moment prepare raises, and rig
     may take a while to stop and unload.
   - Whether "changed nothing" covers work a prepare started that goes on
     after it raised (async-runs-on): read as yes, the state must not
     change because of that call, then or later.
   - Whether it covers state beyond the image and device (a process-wide
     cache outliving the lost device: stale-mark) and whether "an f that has
     a started prepare" can be met through another image: read as yes; the
     only evidence is differential (a later prepare that does nothing is
     itself valid), so the bug shows as f and g treated differently.
   - Whether prepare may ignore a fault rig has not learnt (ok-ignore) or
     raise it only sometimes (ok-alternate): nothing forbids either; TIME-5
     binds only sleep. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------- hostmem's device, its C side *)

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

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k
let staging_bytes = 4096

(* ------------------------------------------------- images (hostmem's) *)

type kind = Nop | Spin | Fault_fn | Hang

let kind_code = function Nop -> 0 | Spin -> 1 | Fault_fn -> 2 | Hang -> 3

let kind_of_string = function
  | "nop" -> Some Nop
  | "spin" -> Some Spin
  | "fault" -> Some Fault_fn
  | "hang" -> Some Hang
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
                | None, _ -> Error (Printf.sprintf "c7f: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "c7f: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "c7f: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "c7f: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "c7f: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "c7f: not a hostmem image (no %S header)" header)

(* ---------------------------------------------- the shared driver base *)

(* Everything of Driver but key and prepare: hostmem's, with images that
   also hold the helper jobs, reservations and staging buffer some
   prepares use, all given back by unload. *)
module Base = struct
  type t = { c : cdev; name : string; queue : queue; mutable word : region option }
  and region = { owner : t; h : int; size : int; kind : rkind }
  and rkind = Mem | Mapping | Word

  (* A helper thread's making of f (async prepares). *)
  type job = { mutable cancelled : bool; mutable made : int }

  type image = {
    dev : t;
    bin : string;
    fns : (string * (kind * int)) list;
    lock : Prim.Lock.t;  (* guards all below *)
    cond : Condition.t;  (* a job ended *)
    entries : (string, int) Hashtbl.t;  (* f -> handle; 0: a slot being filled *)
    pending : (string, job) Hashtbl.t;  (* f -> its helper job, not ended *)
    reserve : (string, int) Hashtbl.t;  (* f -> a region reserved for it; 0: being filled *)
    mutable staging : int;  (* a staging buffer held during a prepare, 0 none *)
    mutable unloaded : bool;
  }

  exception Fault of string

  let facts d =
    { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

  let access r = function
    | Read { off; into } ->
        let len = Bytes.length into in
        if off < 0 || off + len > r.size then invalid_arg "c7f: read out of the region";
        if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "c7f: read of a freed region")
    | Write { off; from } ->
        let len = String.length from in
        if off < 0 || off + len > r.size then invalid_arg "c7f: write out of the region";
        if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
          raise (Fault "c7f: write of a freed region")

  let locate _ r =
    { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

  let peer _ _ = true

  let alloc d m n =
    if n <= 0 then invalid_arg "c7f: alloc of a non-positive size";
    let h = c_alloc d.c (m = Device) n in
    if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

  let free _ r =
    match r.kind with
    | Word -> ()
    | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "c7f: free of a region that is not live"

  let map_peer d _ r =
    let h = c_map_peer d.c r.owner.c r.h in
    if h = 0 then raise (Fault "c7f: map_peer of a region that is not live");
    { owner = d; h; size = r.size; kind = Mapping }

  let map d p n =
    let h = c_map d.c p n in
    if h = 0 then raise (Fault "c7f: no host memory for the mapping");
    { owner = d; h; size = n; kind = Mapping }

  let map_host d p n = map d p (round_up n page)

  let dma _ _ ~fn =
    Error (Printf.sprintf "c7f: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

  let image d b =
    match parse b with
    | Error e -> Error e
    | Ok fns ->
        Ok
          {
            dev = d;
            bin = b;
            fns;
            lock = Prim.Lock.create "c7f.image";
            cond = Condition.create ();
            entries = Hashtbl.create 8;
            pending = Hashtbl.create 8;
            reserve = Hashtbl.create 8;
            staging = 0;
            unloaded = false;
          }

  let fits f n =
    if n > capacity then
      invalid_arg (Printf.sprintf "c7f: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

  (* Under i.lock. *)
  let has_entry i f = match Hashtbl.find_opt i.entries f with Some h -> h <> 0 | None -> false

  (* The scratch bytes of f, when f is a function of i that fits the
     device; None otherwise (prepare then starts nothing: entry answers). *)
  let bytes_of i f =
    match List.assoc_opt f i.fns with
    | Some (_, n) when n <= capacity -> Some (round_up n word)
    | _ -> None

  (* Makes f's entry, as entry does, unless it has one: the handle made, 0
     if none (it had one, f is unknown or too big, or no memory: reports
     nothing).  Under i.lock.  Slot first, then the charge, then the record
     in place: no allocation between the charge and its record. *)
  let make_locked i f =
    if has_entry i f then 0
    else
      match List.assoc_opt f i.fns with
      | Some (k, n) when n <= capacity ->
          let code = kind_code k and bytes = round_up n word in
          Hashtbl.replace i.entries f 0;
          let h = c_entry i.dev.c code bytes in
          Hashtbl.replace i.entries f h;
          if h = 0 then Hashtbl.remove i.entries f;
          h
      | _ -> 0

  (* Gives back f's entry.  Under i.lock. *)
  let drop_entry_locked i f =
    match Hashtbl.find_opt i.entries f with
    | Some h ->
        Hashtbl.remove i.entries f;
        if h <> 0 then ignore (c_free i.dev.c h)
    | None -> ()

  (* hostmem's entry, which first waits for a helper job of f (CODE-6). *)
  let entry i f =
    Prim.Lock.protect i.lock (fun () ->
        while Hashtbl.mem i.pending f do
          Prim.Lock.await i.lock i.cond
        done;
        match Hashtbl.find_opt i.entries f with
        | Some h when h <> 0 -> Entry (Int64.of_int h)
        | _ -> (
            match List.assoc_opt f i.fns with
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
                else Entry (Int64.of_int h)))

  (* Gives back everything the image holds; never waits: a helper job that
     ends later finds the image unloaded and makes nothing. *)
  let unload i =
    Prim.Lock.protect i.lock (fun () ->
        i.unloaded <- true;
        Hashtbl.iter (fun _ h -> if h <> 0 then ignore (c_free i.dev.c h)) i.entries;
        Hashtbl.reset i.entries;
        Hashtbl.iter (fun _ r -> if r <> 0 then ignore (c_free i.dev.c r)) i.reserve;
        Hashtbl.reset i.reserve;
        let s = i.staging in
        i.staging <- 0;
        if s <> 0 then ignore (c_free i.dev.c s);
        Hashtbl.iter (fun _ j -> j.cancelled <- true) i.pending;
        Hashtbl.reset i.pending;
        Condition.broadcast i.cond)

  let grow d = match c_grow d.c with 0 -> Grown | n -> Short n
  let signaled d = c_signaled d.c
  let fault_of d = c_fault d.c
  let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

  let sleep d ~seen ~still_ms =
    check_fault d;
    if c_signaled d.c = seen && still_ms > 0 then begin
      Prim.wait (fun () -> c_wait d.c seen still_ms);
      check_fault d
    end

  let stop d ~fault:_ = c_stop d.c true

  (* ---- helper jobs (async prepares) *)

  (* The helper: "compiles" for 20 ms, then makes f's entry unless the job
     was cancelled or the image unloaded. *)
  let helper i f job () =
    (try Thread.delay 0.02 with _ -> ());
    try
      Prim.Lock.protect i.lock (fun () ->
          if (not job.cancelled) && not i.unloaded then job.made <- make_locked i f;
          (match Hashtbl.find_opt i.pending f with
          | Some j when j == job -> Hashtbl.remove i.pending f
          | _ -> ());
          Condition.broadcast i.cond)
    with _ -> ()

  (* Starts a job for f unless f has an entry or a job, or is unknown or too
     big: the job, or None.  Under i.lock. *)
  let start_job_locked i f =
    if i.unloaded || has_entry i f || Hashtbl.mem i.pending f || bytes_of i f = None then None
    else begin
      let job = { cancelled = false; made = 0 } in
      Hashtbl.replace i.pending f job;
      match Prim.spawn (helper i f job) with
      | _ -> Some job
      | exception e ->
          Hashtbl.remove i.pending f;
          raise e
    end
end

(* --------------------------------------------------------- the drivers *)

module type SHAPE = sig
  val name : string
  val prepare : Base.image -> string -> unit
end

module Make (S : SHAPE) : Rig_edge.Package = struct
  module D = struct
    include Base

    let key = S.name
    let prepare = S.prepare
  end

  let name = S.name

  let make dname () =
    Prim.check_unheld (S.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let d = { Base.c; name = dname; queue; word = None } in
        d.word <- Some { Base.owner = d; h = 0; size = 8; kind = Base.Word };
        d)

  let device_names = [ S.name ^ ".0"; S.name ^ ".1" ]

  let openers () =
    Prim.check_unheld (S.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = Hostmem.kit
end

open Base

(* ---- broken *)

(* Makes f's entry, then checks the device and raises Fault keeping it. *)
module Keep_entry = struct
  let name = "c7f-keep-entry"

  let prepare i f =
    Prim.Lock.protect i.lock (fun () -> if make_locked i f <> 0 then check_fault i.dev)
end

(* Reserves f's scratch, checks the device, raises Fault leaving the
   reservation (recorded in the image: unload gives it back). *)
module Hold_reserve = struct
  let name = "c7f-hold-reserve"

  let prepare i f =
    Prim.Lock.protect i.lock (fun () ->
        if not (has_entry i f) then
          match bytes_of i f with
          | None -> ()
          | Some 0 ->
              check_fault i.dev;
              ignore (make_locked i f)
          | Some bytes ->
              let r =
                match Hashtbl.find_opt i.reserve f with
                | Some r when r <> 0 -> r
                | _ ->
                    Hashtbl.replace i.reserve f 0;
                    let r = c_alloc i.dev.c true bytes in
                    Hashtbl.replace i.reserve f r;
                    r
              in
              if r = 0 then Hashtbl.remove i.reserve f (* no memory: entry answers *)
              else begin
                check_fault i.dev;
                (* the reservation becomes the entry's scratch *)
                Hashtbl.remove i.reserve f;
                ignore (c_free i.dev.c r);
                ignore (make_locked i f)
              end)
end

(* A process-wide cache of the (binary, function) pairs being prepared:
   a prepare that finds its pair there leaves the making to the one that
   marked it.  The fault path raises with the mark left. *)
module Stale_mark = struct
  let name = "c7f-stale-mark"
  let cache_lock = Prim.Lock.create "c7f.cache"
  let in_flight : (string * string, unit) Hashtbl.t = Hashtbl.create 8

  let prepare i f =
    if not (Prim.Lock.protect i.lock (fun () -> has_entry i f || Hashtbl.mem i.pending f)) then begin
      let key = (i.bin, f) in
      let mine =
        Prim.Lock.protect cache_lock (fun () ->
            if Hashtbl.mem in_flight key then false
            else begin
              Hashtbl.replace in_flight key ();
              true
            end)
      in
      if mine then begin
        check_fault i.dev;
        Prim.Lock.protect i.lock (fun () -> ignore (make_locked i f));
        Prim.Lock.protect cache_lock (fun () -> Hashtbl.remove in_flight key)
      end
    end
end

(* A staging buffer, f's entry, a device check; the fault path drops f's
   entry and resets the image's build state, forgetting to free the
   staging buffer it named. *)
module Leak_staging = struct
  let name = "c7f-leak-staging"

  let prepare i f =
    Prim.Lock.protect i.lock (fun () ->
        if (not (has_entry i f)) && bytes_of i f <> None then begin
          i.staging <- c_alloc i.dev.c true staging_bytes;
          let h = make_locked i f in
          match fault_of i.dev with
          | Some why ->
              if h <> 0 then drop_entry_locked i f;
              i.staging <- 0;
              raise (Fault why)
          | None ->
              let s = i.staging in
              i.staging <- 0;
              if s <> 0 then ignore (c_free i.dev.c s)
        end)
end

(* Starts a helper job that makes f, then checks the device and raises
   Fault, leaving the job to run on and record f's entry. *)
module Async_runs_on = struct
  let name = "c7f-async-runs-on"

  let prepare i f =
    match Prim.Lock.protect i.lock (fun () -> start_job_locked i f) with
    | None -> ()
    | Some _ -> check_fault i.dev
end

(* ---- conforming *)

(* Checks the device before anything. *)
module Ok_early = struct
  let name = "c7f-ok-early"

  let prepare i f =
    check_fault i.dev;
    Prim.Lock.protect i.lock (fun () -> ignore (make_locked i f))
end

(* On a faulted device, raises Fault on every other call (a count of the
   driver's prepare calls), having touched nothing; makes f otherwise. *)
module Ok_alternate = struct
  let name = "c7f-ok-alternate"
  let calls = Atomic.make 0

  let prepare i f =
    let n = Atomic.fetch_and_add calls 1 in
    (match fault_of i.dev with Some why when n land 1 = 0 -> raise (Fault why) | _ -> ());
    Prim.Lock.protect i.lock (fun () -> ignore (make_locked i f))
end

(* Ignores faults: makes f, never raises. *)
module Ok_ignore = struct
  let name = "c7f-ok-ignore"
  let prepare i f = Prim.Lock.protect i.lock (fun () -> ignore (make_locked i f))
end

(* Starts a helper job; on a fault, cancels it (and drops what it made, if
   it was quick enough) under the lock, then raises Fault. *)
module Ok_async_undo = struct
  let name = "c7f-ok-async-undo"

  let prepare i f =
    match Prim.Lock.protect i.lock (fun () -> start_job_locked i f) with
    | None -> ()
    | Some job -> (
        match fault_of i.dev with
        | None -> ()
        | Some why ->
            Prim.Lock.protect i.lock (fun () ->
                job.cancelled <- true;
                (match Hashtbl.find_opt i.pending f with
                | Some j when j == job -> Hashtbl.remove i.pending f
                | _ -> ());
                (match Hashtbl.find_opt i.entries f with
                | Some h when h <> 0 && h = job.made -> drop_entry_locked i f
                | _ -> ());
                Condition.broadcast i.cond);
            raise (Fault why))
end

(* A staging buffer and f's entry; notices the fault after making and
   gives both back before raising Fault. *)
module Ok_giveback = struct
  let name = "c7f-ok-giveback"

  let prepare i f =
    Prim.Lock.protect i.lock (fun () ->
        if (not (has_entry i f)) && bytes_of i f <> None then begin
          i.staging <- c_alloc i.dev.c true staging_bytes;
          let h = make_locked i f in
          let s = i.staging in
          i.staging <- 0;
          if s <> 0 then ignore (c_free i.dev.c s);
          match fault_of i.dev with
          | Some why ->
              if h <> 0 then drop_entry_locked i f;
              raise (Fault why)
          | None -> ()
        end)
end

let drivers : (string * (module Rig_edge.Package)) list =
  [
    ("CODE-7", (module Make (Keep_entry)));
    ("CODE-7", (module Make (Hold_reserve)));
    ("CODE-7", (module Make (Stale_mark)));
    ("CODE-7", (module Make (Leak_staging)));
    ("CODE-7", (module Make (Async_runs_on)));
    ("conforming", (module Make (Ok_early)));
    ("conforming", (module Make (Ok_alternate)));
    ("conforming", (module Make (Ok_ignore)));
    ("conforming", (module Make (Ok_async_undo)));
    ("conforming", (module Make (Ok_giveback)));
  ]
