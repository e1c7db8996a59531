(* blindc7: drivers about CODE-7, "A prepare of an f that has an entry or a
   started prepare must start nothing, and a prepare that raises must have
   changed nothing."  Written from the document (spec/rig_edge_driver.txt,
   spec/clauses.tsv) and the installed interface alone, before any
   certifier ran on them.

   Each driver is hostmem (drivers/hostmem) with its entry and prepare, and
   what they share, changed: hostmem's device itself (its C stubs, hm_*, are
   linked in from hostmem's library: no C file here), its image format and
   its kit (Hostmem.kit).  An entry's scratch is made by hostmem's hm_entry,
   which charges it to the device's Device budget, so that it shows in what
   alloc of Device memory can still get, as hostmem's entry does; unload
   gives back what the image's record holds.

   What every driver shares (the parts kept conforming in all of them):
   - the image keeps one record (a slot) per function, made when the image
     is loaded: the entry's handle, and a count of started prepares that
     have not finished ("pending"), all under one counted lock per image
     (Rig_edge_primitives.Lock);
   - entry waits, with Lock.await (a wait, SIG-2), while a prepare of f is
     pending, then answers from the slot, or makes the entry itself as
     hostmem does (Absent, Invalid_argument for more than the device has,
     No_memory when the budget lacks the scratch): CODE-6, CODE-2, CODE-3
     and CODE-5 hold for all;
   - a prepare never reports anything: a compile that finds no memory (or an
     f larger than the device) leaves the slot empty and the next entry makes
     the entry, or answers, itself;
   - helper threads are started with Rig_edge_primitives.spawn (signals
     blocked for life, SIG-8), block only in Thread.delay with their signals
     blocked, take the image lock with Lock.protect, and start their work
     only once prepare has committed ("go"), so that a prepare that raises
     while starting one leaves a thread that ends without doing anything;
   - waits in prepare (where a driver has one) are Rig_edge_primitives.wait
     around a Thread.delay (the runtime released), taken outside the lock;
   - unload marks the image unloaded (helpers still running then give back
     what they made) and frees what the slots hold.

   The sentences:
   (C7a) "A prepare of an f that has an entry or a started prepare must
          start nothing"  (CODE-7)
   (C7b) "and a prepare that raises must have changed nothing."  (CODE-7)
   (C6)  "prepare i f may start making what entry i f makes and return
          without waiting ... It must report nothing, failures included: the
          next entry i f must wait for what it started and answer as if it
          made the entry itself."  (CODE-6)
   (DN)  "Doing nothing is a valid prepare, as on a device whose entry makes
          nothing slow."  (Code)
   (AS)  "An asynchronous exception (Rig's Errors section) can end any OCaml
          code of the driver"  (ASYNC-1); "A driver must therefore take each
          lock it holds while OCaml code runs immediately before the handler
          that gives it back, with no allocation or call in between"
          (ASYNC-2), read here for what prepare takes as well as for locks.

   THE TABLE

   | driver                | what its prepare does                                            | clause     | sentence |
   |-----------------------|------------------------------------------------------------------|------------|----------|
   | c7-finished-only      | asynchronous: starts a helper thread that compiles f (50-300 ms, | CODE-7     | C7a      |
   |                       | then hm_entry) and publishes the entry.  Its "already started?"  |            |          |
   |                       | check looks only at finished entries (slot.h), not at pending:   |            |          |
   |                       | a second prepare before the first helper finished (before any    |            |          |
   |                       | entry) starts a second helper; the second publish overwrites the |            |          |
   |                       | first handle, whose scratch stays charged for good (not even     |            |          |
   |                       | unload frees it).                                                |            |          |
   | c7-after-entry        | synchronous: compiles into a "prepared" handle (slot.ph) that    | CODE-7     | C7a      |
   |                       | the next entry claims.  Its check is a "prepared" flag that only |            |          |
   |                       | prepare sets: for an f whose entry entry made itself, prepare    |            |          |
   |                       | compiles again; the copy is never claimed and stays charged      |            |          |
   |                       | until unload.                                                    |            |          |
   | c7-reserve-then-log   | synchronous, pending marked so that entry waits: reserves the    | CODE-7     | C7b      |
   |                       | scratch (hm_entry) into a local, formats a log line (allocates), |            |          |
   |                       | waits 2 ms for the "upload" (a wait), then records the handle.   |            |          |
   |                       | An asynchronous exception at the allocation or the wait ends     |            |          |
   |                       | prepare: its handler clears pending but cannot know the handle:  |            |          |
   |                       | the scratch stays charged for good.                              |            |          |
   | c7-handler-forgets    | synchronous: reserves the scratch into slot.staging, uploads (a  | CODE-7     | C7b      |
   |                       | 2 ms wait), then promotes staging to the entry.  Its try/finally |            |          |
   |                       | gives back the pending mark only: a prepare an asynchronous      |            |          |
   |                       | exception ends at the upload leaves staging charged; unload      |            |          |
   |                       | does not know staging; the next prepare overwrites it.           |            |          |
   | c7-cache-flushed      | synchronous: compiles into the device's program cache (slot.     | CODE-7     | C7a      |
   |                       | cached, stamped with the device's cache epoch) that entry claims |            |          |
   |                       | from; its check looks only at that cache, whose index is dropped |            |          |
   |                       | (epoch bumped) by anything that frees Device memory or an alloc  |            |          |
   |                       | of Device memory that fails.  After such an unrelated free, a    |            |          |
   |                       | prepare of an f with an entry compiles again (charged until      |            |          |
   |                       | unload), and one of an f a prepare made and no entry claimed     |            |          |
   |                       | yet drops the first program from the index (charged for good).   |            |          |
   | c7-raise-leaves-job   | asynchronous: starts a helper that reserves the scratch at once, | CODE-7     | C7b      |
   |                       | acknowledges, compiles (50-300 ms) and publishes; prepare waits  |            |          |
   |                       | for the acknowledgement (a wait).  An asynchronous exception at  |            |          |
   |                       | that wait ends prepare, which leaves the job running: the        |            |          |
   |                       | scratch is charged when prepare raises and the entry published   |            |          |
   |                       | later.                                                           |            |          |
   | c7-check-then-mark    | synchronous: checks "no entry, none started" under the lock,     | CODE-7     | C7a      |
   |                       | lets go of it, reads f's code (a 2 ms wait), then compiles under |            |          |
   |                       | the lock again without checking again or having marked f         |            |          |
   |                       | started: a prepare (or an entry) concurrent with it makes the    |            |          |
   |                       | entry meanwhile, and this one compiles a second one, kept on a   |            |          |
   |                       | retired list (charged until unload).  Sequential calls are fine. |            |          |
   | c7-ok-slow-async      | c7-finished-only with the check fixed: starts a helper (50-300   | conforming | C6, C7a  |
   |                       | ms) only when f has no entry and no pending prepare; entry waits |            |          |
   |                       | for it.                                                          |            |          |
   | c7-ok-nothing         | nothing (looks f up and drops the answer).                       | conforming | DN       |
   | c7-ok-sync            | makes the entry synchronously, as entry would, when f has none;  | conforming | C6, C7a  |
   |                       | the handle goes straight into the slot (no allocation between).  |            |          |
   | c7-ok-guarded         | c7-reserve-then-log made exception-safe: the handle is stored by | conforming | C7b, AS  |
   |                       | the reserving expression itself into a record allocated before   |            |          |
   |                       | the pending mark, inside the handler, which gives it back        |            |          |
   |                       | (hm_free) and clears pending.                                    |            |          |
   | c7-ok-cancel-on-raise | c7-raise-leaves-job whose handler cancels the job under the      | conforming | C7b, AS  |
   |                       | lock: frees what the helper reserved, clears pending; the helper |            |          |
   |                       | sees the job cancelled and publishes nothing.                    |            |          |
   | c7-ok-cache           | c7-cache-flushed with the check fixed: a miss in the flushed     | conforming | C7a      |
   |                       | index falls back to the image's own record (entry, unclaimed     |            |          |
   |                       | program, pending) before compiling.                              |            |          |

   All other clauses are meant to be hostmem's for all of them: the rest of
   each driver is hostmem's code; entry is hostmem's (plus the wait for a
   pending prepare, a Lock.await, and claiming a prepared handle).

   Where a bug shows (what a check must do to see it):
   - c7-finished-only: two prepares of f within the first helper's 50 ms,
     before any entry; the charge is then two scratches.
   - c7-after-entry: entry i f, then prepare i f.
   - c7-reserve-then-log, c7-handler-forgets, c7-raise-leaves-job: an
     asynchronous exception in prepare, at its (first) wait, or (the first
     two) at an allocation after the reservation; Device memory is then
     charged after prepare raised.
   - c7-cache-flushed: entry (or prepare) of f, a free of a Device region
     or a failed Device alloc, then prepare of f.
   - c7-check-then-mark: two prepares of f (or a prepare and an entry) on
     two threads at once.

   The author's own check (drivers/blindc7/check, c7check.exe), before any
   certifier ran: each broken driver leaves one extra scratch charged in
   the scenario named above (c7-finished-only, c7-reserve-then-log and
   c7-handler-forgets also after unload), and in no other clause-relevant
   way differs; the conforming ones leave none in any scenario, including
   an exception injected at each of their own allocations in prepare
   (Gc.Memprof) and at their waits (signal_at_wait).  Caveat: an exception
   injected inside Rig_edge_primitives.Lock.protect's give (it allocates
   there, for its order records) after a body that committed makes any
   prepare that commits inside the lock (c7-ok-sync, c7-ok-cache,
   c7-ok-guarded's publish, c7-ok-slow-async's start) raise having made
   something; no driver code can close that window.

   AMBIGUITIES noticed in the document:
   1. Does an asynchronous exception out of prepare lose the device?  EXC-3
      says no exception other than Fault from prepare loses anything;
      ASYNC-1 says "rig calls Driver.stop, Driver.free and Driver.unload
      after it".  If the device is lost, "changed nothing" is observable
      only through what unload (or the device's end) gives back; I assume
      the device stays usable and a leaked scratch shows in what alloc can
      still get.
   2. Which raise does "a prepare that raises" mean?  prepare "must report
      nothing, failures included" (CODE-6), so a synchronous raise of the
      driver's own (Invalid_argument for an f larger than the device, a
      failed thread start) already breaks CODE-6; I read CODE-7's second
      half as about asynchronous exceptions (and Fault, which loses the
      device anyway).
   3. "start nothing": is a compile started and then thrown away (its
      scratch freed at once) a break?  It changes nothing lasting; only a
      transient charge shows.  None of my drivers does it; every broken one
      leaves a lasting charge.
   4. "has a started prepare": does a prepare whose compile ended without
      an entry (no memory) count as started, so that another prepare must
      start nothing?  I take a finished-without-entry prepare as no longer
      started (a new prepare may try again, since entry would too).
   5. "has an entry": made by entry, or also made by a prepare and not yet
      claimed by any entry?  I read both (prepare's result is the entry, as
      if entry had made it).
   6. "changed nothing": is a helper thread that started and ends without
      effect, a log line, or a counter a change?  I take only what is
      observable through the Driver (memory charged, entries, handles) as
      changes.
   7. ASYNC-2 gives its take-before-handler rule for locks only; for memory
      prepare reserves, the document says only "changed nothing".  The
      window after the last commit (the lock's give, the return) cannot be
      closed by a driver either; I take Mutex.protect's guarantee as the
      bar.
   8. Concurrency: "the next entry i f must wait for what it started" says
      nothing of an entry concurrent with a prepare, or of two concurrent
      prepares: which one "started" f?  I read CODE-7 as "at most one start
      per f, whatever the interleaving".
   9. A helper thread's blocking step: SIG-2 says the driver's waits call
      rig_unblock; SIG-8 says a thread the driver starts blocks signals for
      its life.  I read SIG-2 as about the waits of the driver's functions,
      on rig's threads, and let helpers block (Thread.delay) with signals
      blocked.
  10. Can an asynchronous exception reach a helper thread ("any OCaml code
      of the driver"), whose signals are blocked?  The helpers' publishing
      sections allocate nothing, and an exception in a helper's sleep still
      publishes (or gives back), so that entry never waits for good.
  11. Is memory a broken prepare leaks but unload gives back (c7-after-entry,
      c7-cache-flushed, c7-check-then-mark) as much a break as memory no one
      ever gives back (c7-finished-only, c7-reserve-then-log,
      c7-handler-forgets)?  I take both as breaks: the prepare started
      something while the image was loaded.
*)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

(* hostmem's device, whose stubs are linked in with hostmem's library. *)

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

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format (see hostmem.ml), so that Hostmem.kit is the kit. *)

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
                | None, _ -> Error (Printf.sprintf "blindc7: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindc7: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindc7: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindc7: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindc7: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindc7: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------------- modes *)

type mode =
  | Finished_only
  | After_entry
  | Reserve_then_log
  | Handler_forgets
  | Cache_flushed
  | Raise_leaves_job
  | Check_then_mark
  | Ok_slow_async
  | Ok_nothing
  | Ok_sync
  | Ok_guarded
  | Ok_cancel_on_raise
  | Ok_cache

let modes =
  [
    ("c7-finished-only", Finished_only);
    ("c7-after-entry", After_entry);
    ("c7-reserve-then-log", Reserve_then_log);
    ("c7-handler-forgets", Handler_forgets);
    ("c7-cache-flushed", Cache_flushed);
    ("c7-raise-leaves-job", Raise_leaves_job);
    ("c7-check-then-mark", Check_then_mark);
    ("c7-ok-slow-async", Ok_slow_async);
    ("c7-ok-nothing", Ok_nothing);
    ("c7-ok-sync", Ok_sync);
    ("c7-ok-guarded", Ok_guarded);
    ("c7-ok-cancel-on-raise", Ok_cancel_on_raise);
    ("c7-ok-cache", Ok_cache);
  ]

module type S = Rig_edge.Package

(* A compile's time on a helper thread: 50 to 300 ms, by function name. *)
let compile_time f = float_of_int (50 + (Hashtbl.hash f mod 251)) /. 1000.

(* ------------------------------------------------------------- driver *)

module Make (M : sig
  val name : string
  val mode : mode
end) : S = struct
  module D = struct
    type t = {
      c : cdev;
      queue : queue;
      mutable word : region option;
      epoch : int Atomic.t;  (* the program cache's index generation (cache modes) *)
    }

    and region = { owner : t; h : int; size : int; kind : rkind; device : bool }
    and rkind = Mem | Mapping | Word

    (* One function of an image, made at load; every mutable field under the
       image's lock. *)
    type slot = {
      fname : string;
      fkind : int;
      scratch : int;
      mutable h : int;  (* the entry entry answers; 0: none *)
      mutable pending : int;  (* prepares started and not finished: entry waits *)
      mutable ph : int;  (* c7-after-entry: made by prepare, not yet claimed *)
      mutable prepared : bool;  (* c7-after-entry: a prepare ran *)
      mutable staging : int;  (* c7-handler-forgets: reserved, not yet promoted *)
      mutable cached : int;  (* cache modes: the program the cache's index names *)
      mutable cached_epoch : int;  (* the index generation it was named in *)
    }

    type image = {
      dev : t;
      slots : slot list;
      lock : Prim.Lock.t;  (* guards the slots, retired, unloaded *)
      cond : Condition.t;  (* a pending prepare finished *)
      mutable retired : int list;  (* c7-check-then-mark: the losers, freed at unload *)
      mutable unloaded : bool;
      mutable note : string;  (* the last log line *)
    }

    exception Fault of string

    let key = M.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access (r : region) = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindc7: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindc7: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindc7: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindc7: write of a freed region")

    let locate _ (r : region) =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    (* Memory pressure drops the program cache's index (a reclaim hook):
       used by the cache modes' prepare only. *)
    let flush_index d = Atomic.incr d.epoch

    let alloc d m n =
      if n <= 0 then invalid_arg "blindc7: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then begin
        if m = Device then flush_index d;
        None
      end
      else Some { owner = d; h; size = n; kind = Mem; device = m = Device }

    let free _ (r : region) =
      match r.kind with
      | Word -> ()
      | Mem | Mapping ->
          if not (c_free r.owner.c r.h) then invalid_arg "blindc7: free of a region that is not live";
          if r.device then flush_index r.owner

    let map_peer d _ (r : region) =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindc7: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping; device = false }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindc7: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping; device = false }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindc7: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let slot (name, (k, n)) =
      {
        fname = name;
        fkind = kind_code k;
        scratch = n;
        h = 0;
        pending = 0;
        ph = 0;
        prepared = false;
        staging = 0;
        cached = 0;
        cached_epoch = 0;
      }

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns ->
          Ok
            {
              dev = d;
              slots = List.map slot fns;
              lock = Prim.Lock.create "blindc7.image";
              cond = Condition.create ();
              retired = [];
              unloaded = false;
              note = "";
            }

    (* The slot of f; Not_found if the image has no f.  Allocates nothing. *)
    let rec find f = function [] -> raise Not_found | s :: r -> if String.equal s.fname f then s else find f r

    let fits s = s.scratch <= capacity

    (* The compile: f's scratch, charged to the device's Device budget, and
       its handle (0: the budget lacks it).  Allocates nothing. *)
    let compile i s = c_entry i.dev.c s.fkind (round_up s.scratch word)

    (* No entry, no prepare started or made: a prepare may start. *)
    let fresh s = s.h = 0 && s.ph = 0 && s.cached = 0 && s.pending = 0 && fits s

    (* Under the lock: a started prepare has finished. *)
    let finish i s =
      s.pending <- s.pending - 1;
      Condition.broadcast i.cond

    let entry i f =
      Prim.Lock.protect i.lock (fun () ->
          match find f i.slots with
          | exception Not_found -> Absent
          | s ->
              (* CODE-6: wait for what a prepare started. *)
              while s.pending > 0 do
                Prim.Lock.await i.lock i.cond
              done;
              if s.h <> 0 then Entry (Int64.of_int s.h)
              else if s.ph <> 0 then begin
                s.h <- s.ph;
                s.ph <- 0;
                Entry (Int64.of_int s.h)
              end
              else if s.cached <> 0 then begin
                s.h <- s.cached;
                Entry (Int64.of_int s.h)
              end
              else begin
                if not (fits s) then
                  invalid_arg
                    (Printf.sprintf "blindc7: %s needs %d bytes of scratch, the device has %d in all" f s.scratch
                       capacity);
                s.h <- compile i s;
                if s.h = 0 then No_memory (max s.scratch word)
                else begin
                  s.cached <- s.h;
                  s.cached_epoch <- Atomic.get i.dev.epoch;
                  Entry (Int64.of_int s.h)
                end
              end)

    (* ------------------------------------------- what prepares share *)

    (* A helper's start: it waits for prepare's commit (go = 1) or its
       abandon (go = 2) before doing anything. *)
    let gate go k =
      while Atomic.get go = 0 do
        Thread.delay 0.001
      done;
      if Atomic.get go = 1 then k ()

    (* Under the lock: start a helper running k, and count it pending.  A
       raise changes nothing: a thread already started is abandoned. *)
    let start_helper s k =
      let go = Atomic.make 0 in
      match Prim.spawn (fun () -> gate go k) with
      | exception e ->
          Atomic.set go 2;
          raise e
      | _ ->
          s.pending <- s.pending + 1;
          Atomic.set go 1

    (* A helper's compile: slow, then the entry, published under the lock
       (its section allocates nothing). *)
    let slow_compile i s () =
      (match Thread.delay (compile_time s.fname) with () -> () | exception _ -> ());
      Prim.Lock.protect i.lock (fun () ->
          if not i.unloaded then begin
            let h = compile i s in
            (* c7-finished-only: a second helper's publish overwrites the first. *)
            if h <> 0 then s.h <- h
          end;
          finish i s)

    (* A wait of prepare's: the upload of f's code to the device, or the read
       of it from the image. *)
    let upload () = Prim.wait (fun () -> Thread.delay 0.002)

    (* Under the lock: mark f started if it is fresh. *)
    let mark i s =
      Prim.Lock.protect i.lock (fun () ->
          if fresh s then begin
            s.pending <- s.pending + 1;
            true
          end
          else false)

    (* c7-raise-leaves-job, c7-ok-cancel-on-raise: a job the helper
       acknowledges once it has reserved the scratch. *)
    type job = {
      mutable jh : int;
      accepted : bool Atomic.t;
      mutable cancelled : bool;
      mutable finished : bool;
    }

    let job_helper i s job () =
      Prim.Lock.protect i.lock (fun () ->
          if job.cancelled then ()
          else if i.unloaded then job.finished <- true
          else begin
            job.jh <- compile i s;
            if job.jh = 0 then begin
              job.finished <- true;
              finish i s
            end
          end);
      Atomic.set job.accepted true;
      (match Thread.delay (compile_time s.fname) with () -> () | exception _ -> ());
      Prim.Lock.protect i.lock (fun () ->
          if not (job.cancelled || job.finished) then begin
            if i.unloaded then ignore (c_free i.dev.c job.jh) else s.h <- job.jh;
            job.jh <- 0;
            job.finished <- true;
            finish i s
          end)

    (* c7-ok-cancel-on-raise's handler: under the lock, the job is cancelled
       and what its helper reserved given back. *)
    let cancel i s job =
      Prim.Lock.protect i.lock (fun () ->
          if not job.finished then begin
            job.cancelled <- true;
            if job.jh <> 0 then ignore (c_free i.dev.c job.jh);
            job.jh <- 0;
            job.finished <- true;
            finish i s
          end)

    (* ------------------------------------------------------- prepare *)

    let prepare i f =
      match find f i.slots with
      | exception Not_found -> ()
      | s -> (
          match M.mode with
          | Ok_nothing -> ()
          | Finished_only ->
              Prim.Lock.protect i.lock (fun () ->
                  (* BUG: "already started?" looks at finished entries only,
                     not at s.pending. *)
                  if s.h = 0 && fits s then start_helper s (slow_compile i s))
          | Ok_slow_async -> Prim.Lock.protect i.lock (fun () -> if fresh s then start_helper s (slow_compile i s))
          | After_entry ->
              Prim.Lock.protect i.lock (fun () ->
                  (* BUG: looks at what prepare did, not at s.h. *)
                  if (not s.prepared) && fits s then begin
                    s.prepared <- true;
                    let h = compile i s in
                    if h <> 0 then s.ph <- h
                  end)
          | Ok_sync -> Prim.Lock.protect i.lock (fun () -> if fresh s then s.h <- compile i s)
          | Reserve_then_log ->
              let published = ref false in
              if mark i s then begin
                match
                  let h = compile i s in
                  (* BUG: the reservation is in a local until it is recorded
                     below; the log line allocates and the upload waits. *)
                  i.note <- Printf.sprintf "prepare %s: %d bytes of scratch, entry %#x" f s.scratch h;
                  upload ();
                  Prim.Lock.protect i.lock (fun () ->
                      if h <> 0 then s.h <- h;
                      published := true;
                      finish i s)
                with
                | () -> ()
                | exception e ->
                    Prim.Lock.protect i.lock (fun () ->
                        if not !published then begin
                          published := true;
                          finish i s
                        end);
                    raise e
              end
          | Ok_guarded ->
              let job = { jh = 0; accepted = Atomic.make true; cancelled = false; finished = false } in
              if mark i s then begin
                match
                  (* The reservation is recorded by the expression that makes
                     it, inside the handler that gives it back. *)
                  job.jh <- compile i s;
                  i.note <- Printf.sprintf "prepare %s: %d bytes of scratch, entry %#x" f s.scratch job.jh;
                  upload ();
                  Prim.Lock.protect i.lock (fun () ->
                      if job.jh <> 0 then s.h <- job.jh;
                      job.jh <- 0;
                      job.finished <- true;
                      finish i s)
                with
                | () -> ()
                | exception e ->
                    Prim.Lock.protect i.lock (fun () ->
                        if not job.finished then begin
                          if job.jh <> 0 then ignore (c_free i.dev.c job.jh);
                          job.jh <- 0;
                          job.finished <- true;
                          finish i s
                        end);
                    raise e
              end
          | Handler_forgets ->
              (* Allocated before the mark, so that the cleanup itself
                 allocates nothing of the driver's: the mark always goes. *)
              let fin () = finish i s in
              let cleanup () = Prim.Lock.protect i.lock fin in
              let body () =
                Prim.Lock.protect i.lock (fun () -> s.staging <- compile i s);
                upload ();
                Prim.Lock.protect i.lock (fun () ->
                    if s.staging <> 0 then begin
                      s.h <- s.staging;
                      s.staging <- 0
                    end)
              in
              if mark i s then begin
                (* BUG: the "finally" gives back the pending mark, not the
                   staging scratch. *)
                match body () with
                | () -> cleanup ()
                | exception e ->
                    cleanup ();
                    raise e
              end
          | Cache_flushed ->
              Prim.Lock.protect i.lock (fun () ->
                  (* BUG: only the cache's index is looked at, and it is
                     dropped by unrelated frees and failed allocs. *)
                  let indexed = s.cached <> 0 && s.cached_epoch = Atomic.get i.dev.epoch in
                  if (not indexed) && s.pending = 0 && fits s then begin
                    let h = compile i s in
                    if h <> 0 then begin
                      s.cached <- h;
                      s.cached_epoch <- Atomic.get i.dev.epoch
                    end
                  end)
          | Ok_cache ->
              Prim.Lock.protect i.lock (fun () ->
                  let indexed = s.cached <> 0 && s.cached_epoch = Atomic.get i.dev.epoch in
                  if indexed then ()
                  else if not (fresh s) then
                    (* A miss in the index is no proof of absence: the
                       image's own record says f is made or started. *)
                    (if s.cached <> 0 then s.cached_epoch <- Atomic.get i.dev.epoch)
                  else begin
                    let h = compile i s in
                    if h <> 0 then begin
                      s.cached <- h;
                      s.cached_epoch <- Atomic.get i.dev.epoch
                    end
                  end)
          | Raise_leaves_job | Ok_cancel_on_raise ->
              let job = { jh = 0; accepted = Atomic.make false; cancelled = false; finished = false } in
              let k = job_helper i s job in
              let started =
                Prim.Lock.protect i.lock (fun () ->
                    if fresh s then begin
                      start_helper s k;
                      true
                    end
                    else false)
              in
              if started then begin
                (* Wait for the compiler thread to accept the job. *)
                match
                  Prim.wait (fun () ->
                      while not (Atomic.get job.accepted) do
                        Thread.delay 0.0005
                      done)
                with
                | () -> ()
                | exception e ->
                    (* c7-raise-leaves-job (BUG): the job runs on. *)
                    if M.mode = Ok_cancel_on_raise then cancel i s job;
                    raise e
              end
          | Check_then_mark ->
              (* BUG: checked, not marked; not checked again. *)
              if Prim.Lock.protect i.lock (fun () -> fresh s) then begin
                upload ();
                Prim.Lock.protect i.lock (fun () ->
                    let h = compile i s in
                    if h <> 0 then if s.h = 0 then s.h <- h else i.retired <- h :: i.retired)
              end)

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          i.unloaded <- true;
          let fr h = if h <> 0 then ignore (c_free i.dev.c h) in
          List.iter
            (fun s ->
              fr s.h;
              if s.ph <> s.h then fr s.ph;
              if s.cached <> s.h && s.cached <> s.ph then fr s.cached;
              (* s.staging: c7-handler-forgets's leak, unknown to unload. *)
              s.h <- 0;
              s.ph <- 0;
              s.cached <- 0)
            i.slots;
          List.iter fr i.retired;
          i.retired <- [])

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n
    let signaled d = c_signaled d.c
    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> c_wait d.c seen still_ms);
        check_fault d
      end

    let stop d ~fault:_ = c_stop d.c true
  end

  let name = M.name

  let make () =
    Prim.check_unheld "Blindc7.make";
    Prim.masked (fun () ->
        let c = c_open capacity in
        let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
        let d = { D.c; queue; word = None; epoch = Atomic.make 0 } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word; device = false };
        d)

  let device_names = [ M.name ^ "0"; M.name ^ "1" ]

  let openers () =
    Prim.check_unheld "Blindc7.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make }) device_names)

  let kit = Hostmem.kit
end

let drivers : (string * (module S)) list =
  List.map
    (fun (name, mode) ->
      ( name,
        (module Make (struct
          let name = name
          let mode = mode
        end) : S) ))
    modes

let packages = List.map snd drivers
