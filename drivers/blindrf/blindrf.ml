(* blindrf: rig drivers about resources the system refuses.

   Every driver is hostmem's device (the hm_* C stubs of rig_hostmem) with an
   OCaml side copied from hostmem.ml and changed.  Refusals are SIMULATED,
   deterministically, by counters (module Refuse): "every k-th attempt of
   this driver to start a helper thread / to allocate / to open is refused".
   A refused thread start raises Failure, as Thread.create would; a refused
   open raises Failure "device busy"; a refused allocation answers "none".
   Nothing here exhausts the real machine.

   ---------------------------------------------------------------------------
   DRIVER                 WHAT IT DOES UNDER REFUSAL                         VERDICT
   ---------------------------------------------------------------------------
   rf-ok-busy-open        make: every 2nd open raises Failure "device busy"   conforming
                          (after the rig_holds check, so an in-lock call
                          changes nothing, not even the open counter).
   rf-ok-retry-open       make: a refused open is retried up to 4 times,       conforming
                          each retry after a 2 ms wait (Prim.wait around
                          Thread.delay, which releases the runtime).
   rf-ok-sync-fallback    prepare starts a helper thread that makes the       conforming
                          entry; every 3rd start is refused and prepare then
                          makes the entry itself, synchronously.
   rf-ok-give-up          prepare starts the helper BEFORE it marks f;        conforming
                          every 3rd start is refused and prepare then does
                          nothing at all (the next entry makes f).
   rf-ok-raise-clean      prepare charges f's scratch, then starts a helper   conforming
                          to finish it; every 3rd start is refused: prepare
                          frees the scratch, removes its mark, and lets the
                          refusal (Failure) escape, having changed nothing.
   rf-ok-burst-worker     prepares queue jobs for one per-image worker thread conforming
                          that drains the queue and exits; every 3rd start
                          of the worker is refused: prepare withdraws its job
                          and its mark and returns.
   rf-ok-exn-safe-helper  the helper itself meets a refusal (every 2nd        conforming
                          helper's staging is refused, raising inside it);
                          its cleanup (Fun.protect ~finally) frees what it
                          made and clears the mark, waking entry, which then
                          makes f itself.  Every 3rd helper start refused:
                          prepare withdraws its mark.
   rf-ok-nomem-retry      entry's scratch allocator refuses every 2nd         conforming
                          allocation: entry answers No_memory n having made
                          nothing, and makes the entry when asked again.
   rf-ok-alloc-none       alloc Mapped is refused every 3rd time: alloc       conforming
                          answers None (rig falls back to Pinned, GUAR-6).
   rf-ok-reaper-unload    unload hands the entries' freeing to a reaper       conforming
                          thread; every 2nd reaper is refused and unload
                          frees them itself, on the image's own device.
   rf-ok-janitor-stop     the device keeps a staging buffer the driver made;  conforming
                          stop stops the device at once (c_stop) and hands
                          the buffer's freeing to a janitor thread; every 2nd
                          janitor is refused and stop frees it inline
                          (it never waits for work).
   rf-stuck-mark          prepare marks f Pending, then its helper is         breaks CODE-6
                          refused (every 3rd); it swallows the refusal and
                          returns leaving the mark.  A later prepare of f
                          rightly starts nothing, and the next entry i f
                          waits on the mark for ever.
   rf-leaky-raise         prepare charges f's scratch, then starts the        breaks CODE-7
                          helper; every 3rd start is refused and the Failure
                          escapes, the charged scratch left behind (owned by
                          nothing).  The next entry makes f correctly.
   rf-nomem-leak          entry charges f's scratch, then asks a simulated     breaks CODE-3
                          allocator for the launch descriptor; every 2nd ask
                          is refused and entry answers No_memory n, leaving
                          the scratch charged.
   rf-claim-first         make claims the hardware (an exclusive-open flag,    breaks LOCK-4
                          as a real device refuses a second open with EBUSY)
                          BEFORE checking rig_holds (); the Invalid_argument
                          of an in-lock call leaves the claim, so every later
                          open is refused "device busy".
   rf-deferred-reap       unload hands the entries' freeing to a reaper;      breaks STOP-8
                          when the reaper is refused (every 2nd), the handles
                          are deferred under the HARDWARE's name and freed by
                          the next unload on a device of that name, on that
                          device -- which, after stop and a new open, is the
                          new device: it frees the new device's objects.
   ---------------------------------------------------------------------------

   Why each broken driver breaks that clause (the document's words):

   - rf-stuck-mark, CODE-6.  "It must report nothing, failures included: the
     next entry i f must wait for what it started and answer as if it made
     the entry itself."  The refused prepare started nothing, yet left a mark
     that says it did; the next entry waits for it and never answers, where
     an entry that made f itself answers Entry.  CODE-7 is kept: the later
     prepare of an f "that has a started prepare" starts nothing (as
     required), and this prepare did not raise.
   - rf-leaky-raise, CODE-7.  "a prepare that raises must have changed
     nothing."  It raises the refusal having charged f's scratch memory to
     the device (a Device allocation of the same size now answers None).
     CODE-6 is kept: the next entry makes f itself and answers Entry.
   - rf-nomem-leak, CODE-3.  "It is No_memory n, having made nothing, if the
     device has no memory for the n bytes f's launches need."  Its No_memory
     comes having made (and kept) f's scratch.  CODE-2 is kept: a second
     call after an Entry makes nothing new.
   - rf-claim-first, LOCK-4.  "each must raise Invalid_argument, having
     changed nothing, while rig_holds () is not 0."  It raises
     Invalid_argument having changed the claim, which refuses every later
     open of the hardware.
   - rf-deferred-reap, STOP-8.  free and unload after stop "may come after an
     open of the same hardware has made a new device of this driver, and
     must touch nothing of the new device."  Its unload frees handles of the
     old device on the new one, where they name the new device's regions.

   AMBIGUITIES met in the document, and how they are read here:

   1. "It must report nothing, failures included" (prepare) against "a
      prepare that raises must have changed nothing" and EXC-3 ("Neither
      does ... one other than Fault from ... Driver.prepare").  Read: the
      failures prepare must not report are those of the work it started
      (they come out of the next entry); a prepare that could not start
      (its thread refused) may let that refusal escape, as long as it
      changed nothing; rig loses nothing for it.  Hence rf-ok-raise-clean is
      conforming.  A Fault for a refused thread would be wrong (it "reports
      that the device faulted" and loses the device); no driver does that.
   2. "having changed nothing": a refused Thread.create changes the system
      (here: the refusal counter).  Read: what counts is the driver's state
      that later calls see (marks, charged memory, claims), not the
      simulated system's counters, which a real refusal would also leave.
      rf-ok-busy-open nevertheless counts opens only after the rig_holds ()
      check, so an in-lock call does not even move its counter.
   3. What rig does when an opener's make raises something other than
      Invalid_argument is not said.  Read: make may fail (the device cannot
      be opened right now) by raising; nothing requires it to succeed.
   4. "alloc d m n is n bytes of d's memory m, or None if d has none."
      Whether a transient refusal is "has none" is not said.  Read: yes for
      Mapped (rig's documented fallback to Pinned, GUAR-6, makes None there
      harmless); rf-ok-alloc-none refuses only Mapped.
   5. "It is No_memory n ... if the device has no memory for the n bytes".
      "if", not "only if", and "rig then ... asks again": read as allowing a
      transient refusal to answer No_memory, provided nothing was made.
   6. prepare "must start nothing" when f "has a started prepare": what a
      prepare whose start was refused left is not "a started prepare";
      conforming drivers leave no mark in that case.  A synchronous fallback
      (rf-ok-sync-fallback) is read as allowed: doing the work now is one way
      of "making what entry i f makes", and entry then answers from it.
   7. stop "must release what the driver made to run work ... and must not
      wait for that work": whether the release may finish after stop returns
      (on a janitor thread) is not said.  Read: yes, for what rig never sees
      (a staging buffer); the word and the queues' publication of the last
      value are hostmem's, written by c_stop inside stop.
   8. unload's timing is not said: read that unload may hand freeing of the
      driver's own entry memory to another thread, provided it touches only
      the image's own device (STOP-8).
   9. Driver.make/open may contain a wait (rf-ok-retry-open): functions that
      start with the rig_holds () check "block signals the same way for
      their whole run", and "the same way" is read as rig's: blocked, but
      for waits made through Prim.wait.
   10. Threads the driver starts take driver locks (Prim.Lock.protect) and,
      for waiters, Prim.Lock.await; nothing says helper threads must not;
      they hold no lock when they start and count what they take (LOCK-3).
   11. The brief's simulation raises Failure for a refused thread; OCaml 5's
      Thread.create really raises Sys_error (EAGAIN) or Out_of_memory
      (ENOMEM).  Not the document's matter: the drivers treat all three as a
      refusal (is_refusal).
   12. A make whose hardware claim is taken (rf-claim-first) answers
      Failure "device busy", also when called inside a lock: it never gets
      to the Invalid_argument LOCK-4 asks for.  That is the same clause
      LOCK-4 broken a second way, not a second clause.
*)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

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
external c_busy : cdev -> bool = "hm_busy"

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------ refusals *)

(* A deterministic refuser: the k-th attempt is refused when k mod every = 0
   (attempts counted from 1, per driver and purpose). *)
module Refuse = struct
  type t = { every : int; attempts : int Atomic.t; refused : int Atomic.t }

  let table : (string, t) Hashtbl.t = Hashtbl.create 16 (* filled at module init only *)

  let make key every =
    let r = { every; attempts = Atomic.make 0; refused = Atomic.make 0 } in
    Hashtbl.replace table key r;
    r

  let attempt r =
    let n = Atomic.fetch_and_add r.attempts 1 + 1 in
    if n mod r.every = 0 then (Atomic.incr r.refused; true) else false

  (* For the author's check. *)
  let refused key = match Hashtbl.find_opt table key with Some r -> Atomic.get r.refused | None -> -1
  let attempts key = match Hashtbl.find_opt table key with Some r -> Atomic.get r.attempts | None -> -1
end

(* Thread.create as the system may answer it: refused with Failure. *)
let spawn r f =
  if Refuse.attempt r then failwith "Thread.create: Resource temporarily unavailable (simulated refusal)"
  else Prim.spawn f

(* What Thread.create raises when the system refuses: Failure (as simulated
   here), Sys_error (OCaml 5's EAGAIN), Out_of_memory (its ENOMEM). *)
let is_refusal = function Failure _ | Sys_error _ | Out_of_memory -> true | _ -> false

(* ------------------------------------------------------------- images *)

type kind = Nop | Spin | Fault_fn | Hang

let kind_code = function Nop -> 0 | Spin -> 1 | Fault_fn -> 2 | Hang -> 3

let kind_of_string = function
  | "nop" -> Some Nop | "spin" -> Some Spin | "fault" -> Some Fault_fn | "hang" -> Some Hang | _ -> None

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
                | Some k, Some n when n >= 0 && not (List.mem_assoc name acc) -> go ((name, (k, n)) :: acc) rest
                | _ -> Error (Printf.sprintf "blindrf: bad image line %S" l))
            | _ -> Error (Printf.sprintf "blindrf: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindrf: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------ the base driver *)

module type NAME = sig
  val name : string
end

module Base (N : NAME) = struct
  type slot = Pending | Ready of int

  module D = struct
    type t = {
      c : cdev;
      name : string;  (* the hardware's name: the opener's *)
      queue : queue;
      mutable word : region option;
      mutable staging : int;  (* a buffer the driver made (rf-ok-janitor-stop), 0: none *)
    }

    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;  (* guards everything below *)
      cond : Condition.t;  (* a slot left Pending *)
      slots : (string, slot) Hashtbl.t;
      jobs : (string * kind * int) Queue.t;  (* rf-ok-burst-worker *)
      mutable worker : bool;
      mutable gone : bool;  (* unloaded *)
    }

    exception Fault of string

    let key = N.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindrf: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindrf: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindrf: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindrf: write of a freed region")

    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindrf: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindrf: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindrf: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map_host d p n =
      let h = c_map d.c p (round_up n page) in
      if h = 0 then raise (Fault "blindrf: no host memory for the mapping");
      { owner = d; h; size = round_up n page; kind = Mapping }

    let dma _ _ ~fn = Error (Printf.sprintf "blindrf: the host has no bus: no PCI function reaches it (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns ->
          Ok
            {
              dev = d;
              fns;
              lock = Prim.Lock.create (N.name ^ ".image");
              cond = Condition.create ();
              slots = Hashtbl.create 8;
              jobs = Queue.create ();
              worker = false;
              gone = false;
            }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "%s: %s needs %d bytes of scratch, the device has %d in all" N.name f n capacity)

    (* What entry needs of f, when a prepare may start making it: None for an
       f that has no function or that needs more than the device offers
       (entry reports those itself). *)
    let wanted i f =
      match List.assoc_opt f i.fns with Some (k, n) when n <= capacity -> Some (k, n) | _ -> None

    (* Makes f's scratch: its handle, 0 when the budget lacks it. *)
    let compile i k n = c_entry i.dev.c (kind_code k) (round_up n word)

    (* Records what a prepare made (h, 0 for nothing).  Under i.lock. *)
    let record i f h =
      if i.gone then (if h <> 0 then ignore (c_free i.dev.c h))
      else if h = 0 then Hashtbl.remove i.slots f
      else Hashtbl.replace i.slots f (Ready h);
      Condition.broadcast i.cond

    (* A helper's whole job: make f, record it. *)
    let helper i f k n () =
      let h = compile i k n in
      Prim.Lock.protect i.lock (fun () -> record i f h)

    (* entry, with [make i f k n] making the scratch (0: none).  It waits
       for a Pending slot (a started prepare) and answers from what it made. *)
    let entry_with make i f =
      Prim.Lock.protect i.lock (fun () ->
          let rec go () =
            match Hashtbl.find_opt i.slots f with
            | Some (Ready h) -> Entry (Int64.of_int h)
            | Some Pending ->
                Prim.Lock.await i.lock i.cond;
                go ()
            | None -> (
                match List.assoc_opt f i.fns with
                | None -> Absent
                | Some (k, n) ->
                    fits f n;
                    let h = make i f k n in
                    if h = 0 then No_memory (max n word)
                    else begin
                      Hashtbl.replace i.slots f (Ready h);
                      Entry (Int64.of_int h)
                    end)
          in
          go ())

    let entry i f = entry_with (fun i _ k n -> compile i k n) i f
    let prepare _ _ = ()

    (* Marks the image gone and hands back the handles it holds. *)
    let take_all i =
      Prim.Lock.protect i.lock (fun () ->
          i.gone <- true;
          let hs = Hashtbl.fold (fun _ s acc -> match s with Ready h -> h :: acc | Pending -> acc) i.slots [] in
          Hashtbl.reset i.slots;
          Queue.clear i.jobs;
          Condition.broadcast i.cond;
          hs)

    let unload i = List.iter (fun h -> ignore (c_free i.dev.c h)) (take_all i)
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

  let name = N.name

  (* Opens the device: no check, no mask (the callers do both). *)
  let open_dev name =
    let c = c_open capacity in
    let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
    let d = { D.c; name; queue; word = None; staging = 0 } in
    d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
    d

  let make name () =
    Prim.check_unheld (N.name ^ ".make");
    Prim.masked (fun () -> open_dev name)

  let device_names = [ N.name ^ "0"; N.name ^ "1" ]

  let openers_of make () =
    Prim.check_unheld (N.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let openers = openers_of make
  let kit = Hostmem.kit
end

(* ====================================================== conforming drivers *)

module Ok_busy_open = struct
  module B = Base (struct let name = "rf-ok-busy-open" end)
  module D = B.D

  let name = B.name
  let kit = B.kit
  let busy = Refuse.make (name ^ "/open") 2

  (* The check first: an in-lock call changes nothing, not even the count. *)
  let make n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        if Refuse.attempt busy then failwith (Printf.sprintf "%s: %s: device busy, try again later" name n);
        B.open_dev n)

  let openers = B.openers_of make
end

module Ok_retry_open = struct
  module B = Base (struct let name = "rf-ok-retry-open" end)
  module D = B.D

  let name = B.name
  let kit = B.kit
  let busy = Refuse.make (name ^ "/open") 2

  (* A refused open is retried after a short wait: the wait releases the
     runtime and unblocks signals only around its blocking step. *)
  let make n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let rec go tries =
          if not (Refuse.attempt busy) then B.open_dev n
          else if tries >= 4 then failwith (Printf.sprintf "%s: %s: device busy" name n)
          else begin
            Prim.wait (fun () -> Thread.delay 0.002);
            go (tries + 1)
          end
        in
        go 0)

  let openers = B.openers_of make
end

module Ok_sync_fallback = struct
  module B = Base (struct let name = "rf-ok-sync-fallback" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3

    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) -> (
                Hashtbl.replace i.slots f B.Pending;
                match spawn threads (helper i f k n) with
                | _ -> ()
                | exception e when is_refusal e -> record i f (compile i k n)))
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_give_up = struct
  module B = Base (struct let name = "rf-ok-give-up" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3

    (* The thread first, the mark after: a refused start leaves nothing.  The
       helper waits for i.lock, so it sees the mark. *)
    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) -> (
                match spawn threads (helper i f k n) with
                | _ -> Hashtbl.replace i.slots f B.Pending
                | exception e when is_refusal e -> ()))
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_raise_clean = struct
  module B = Base (struct let name = "rf-ok-raise-clean" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3

    let finish i f h () =
      Thread.delay 0.005 (* the slow part of making f *);
      Prim.Lock.protect i.lock (fun () -> record i f h)

    (* Scratch first, then the helper; a refused helper undoes both and the
       refusal escapes (CODE-7: having changed nothing; EXC-3). *)
    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) ->
                let h = compile i k n in
                if h <> 0 then begin
                  Hashtbl.replace i.slots f B.Pending;
                  match spawn threads (finish i f h) with
                  | _ -> ()
                  | exception e ->
                      Hashtbl.remove i.slots f;
                      ignore (c_free i.dev.c h);
                      raise e
                end)
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_burst_worker = struct
  module B = Base (struct let name = "rf-ok-burst-worker" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3

    (* Drains the image's jobs and exits when none is left. *)
    let rec burst i () =
      match
        Prim.Lock.protect i.lock (fun () ->
            if Queue.is_empty i.jobs then (i.worker <- false; None) else Some (Queue.pop i.jobs))
      with
      | None -> ()
      | Some (f, k, n) ->
          helper i f k n ();
          burst i ()

    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) ->
                Hashtbl.replace i.slots f B.Pending;
                Queue.push (f, k, n) i.jobs;
                if not i.worker then
                  match spawn threads (burst i) with
                  | _ -> i.worker <- true
                  | exception e when is_refusal e ->
                      (* no worker runs: the queue held only this job *)
                      Queue.clear i.jobs;
                      Hashtbl.remove i.slots f)
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_exn_safe_helper = struct
  module B = Base (struct let name = "rf-ok-exn-safe-helper" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3
    let staging = Refuse.make (B.name ^ "/staging") 2

    (* The helper meets its own refusal after it made f's scratch: whatever
       ends it, the finaliser frees what is unfinished and resolves the slot,
       so that entry never waits for nothing. *)
    let helper i f k n () =
      let h = ref 0 and finished = ref false in
      try
        Fun.protect
          ~finally:(fun () ->
            Prim.Lock.protect i.lock (fun () ->
                if (not !finished) && !h <> 0 then begin
                  ignore (c_free i.dev.c !h);
                  h := 0
                end;
                record i f !h))
          (fun () ->
            h := compile i k n;
            if Refuse.attempt staging then failwith "staging buffer refused (simulated)";
            finished := true)
      with _ -> ()

    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) -> (
                Hashtbl.replace i.slots f B.Pending;
                match spawn threads (helper i f k n) with
                | _ -> ()
                | exception e when is_refusal e -> Hashtbl.remove i.slots f))
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_nomem_retry = struct
  module B = Base (struct let name = "rf-ok-nomem-retry" end)

  module D = struct
    include B.D

    let scratch = Refuse.make (B.name ^ "/scratch") 2

    (* The allocator is asked before anything is made. *)
    let entry i f = entry_with (fun i _ k n -> if n > 0 && Refuse.attempt scratch then 0 else compile i k n) i f
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_alloc_none = struct
  module B = Base (struct let name = "rf-ok-alloc-none" end)

  module D = struct
    include B.D

    let mapped = Refuse.make (B.name ^ "/mapped") 3
    let alloc d m n = if m = Mapped && n > 0 && Refuse.attempt mapped then None else alloc d m n
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_reaper_unload = struct
  module B = Base (struct let name = "rf-ok-reaper-unload" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 2

    let unload i =
      let c = i.dev.c in
      let reap hs () = List.iter (fun h -> ignore (c_free c h)) hs in
      match take_all i with
      | [] -> ()
      | hs -> ( match spawn threads (reap hs) with _ -> () | exception e when is_refusal e -> reap hs ())
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Ok_janitor_stop = struct
  module B = Base (struct let name = "rf-ok-janitor-stop" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 2

    let stop d ~fault:_ =
      c_stop d.c true;
      let s = d.staging in
      d.staging <- 0;
      if s <> 0 then
        let release () = ignore (c_free d.c s) in
        match spawn threads release with _ -> () | exception e when is_refusal e -> release ()
  end

  let name = B.name
  let kit = B.kit
  let staging_bytes = 65536

  let make n () =
    Prim.check_unheld (name ^ ".make");
    Prim.masked (fun () ->
        let d = B.open_dev n in
        d.staging <- c_alloc d.c true staging_bytes;
        d)

  let openers = B.openers_of make
end

(* ========================================================= broken drivers *)

module Stuck_mark = struct
  module B = Base (struct let name = "rf-stuck-mark" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3

    (* BUG (CODE-6): the mark stays when the helper is refused. *)
    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) -> (
                Hashtbl.replace i.slots f B.Pending;
                try ignore (spawn threads (helper i f k n)) with e when is_refusal e -> ()))
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Leaky_raise = struct
  module B = Base (struct let name = "rf-leaky-raise" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 3

    let finish i f h () =
      Thread.delay 0.005;
      Prim.Lock.protect i.lock (fun () -> record i f h)

    (* BUG (CODE-7): a refused helper's Failure escapes with h charged. *)
    let prepare i f =
      Prim.Lock.protect i.lock (fun () ->
          if (not (Hashtbl.mem i.slots f)) && not i.gone then
            match wanted i f with
            | None -> ()
            | Some (k, n) ->
                let h = compile i k n in
                if h <> 0 then begin
                  ignore (spawn threads (finish i f h));
                  Hashtbl.replace i.slots f B.Pending
                end)
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Nomem_leak = struct
  module B = Base (struct let name = "rf-nomem-leak" end)

  module D = struct
    include B.D

    let descriptor = Refuse.make (B.name ^ "/descriptor") 2

    (* BUG (CODE-3): the scratch is made before the refused ask, and kept. *)
    let entry i f =
      entry_with
        (fun i _ k n ->
          let h = compile i k n in
          if h <> 0 && Refuse.attempt descriptor then 0 else h)
        i f
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

module Claim_first = struct
  module B = Base (struct let name = "rf-claim-first" end)
  module D = B.D

  let name = B.name
  let kit = B.kit
  let claims = List.map (fun n -> (n, Atomic.make false)) B.device_names

  (* BUG (LOCK-4): the claim comes before the check, and the check's
     Invalid_argument leaves it. *)
  let make n () =
    Prim.masked (fun () ->
        let claim = List.assoc n claims in
        if not (Atomic.compare_and_set claim false true) then
          failwith (Printf.sprintf "%s: %s: device busy (another open holds it)" name n);
        Prim.check_unheld (name ^ ".make");
        Fun.protect ~finally:(fun () -> Atomic.set claim false) (fun () -> B.open_dev n))

  let openers = B.openers_of make
end

module Deferred_reap = struct
  module B = Base (struct let name = "rf-deferred-reap" end)

  module D = struct
    include B.D

    let threads = Refuse.make (B.name ^ "/thread") 2
    let dlock = Prim.Lock.create (B.name ^ ".deferred")
    let deferred : (string * int list) list ref = ref []

    (* BUG (STOP-8): deferred handles are keyed by the hardware's name and
       freed on the device of the next unload of that name. *)
    let unload i =
      let hs = take_all i in
      let c = i.dev.c in
      let mine =
        Prim.Lock.protect dlock (fun () ->
            let mine, rest = List.partition (fun (n, _) -> n = i.dev.name) !deferred in
            deferred := rest;
            mine)
      in
      List.iter (fun (_, old) -> List.iter (fun h -> ignore (c_free c h)) old) mine;
      if hs <> [] then
        let reap () = List.iter (fun h -> ignore (c_free c h)) hs in
        match spawn threads reap with
        | _ -> ()
        | exception e when is_refusal e ->
            Prim.Lock.protect dlock (fun () -> deferred := (i.dev.name, hs) :: !deferred)
  end

  let name = B.name
  let kit = B.kit
  let openers = B.openers
end

(* ================================================================ all *)

let pkg (p : (module Package)) = let module P = (val p) in (P.name, p)

let conforming =
  [
    pkg (module Ok_busy_open);
    pkg (module Ok_retry_open);
    pkg (module Ok_sync_fallback);
    pkg (module Ok_give_up);
    pkg (module Ok_raise_clean);
    pkg (module Ok_burst_worker);
    pkg (module Ok_exn_safe_helper);
    pkg (module Ok_nomem_retry);
    pkg (module Ok_alloc_none);
    pkg (module Ok_reaper_unload);
    pkg (module Ok_janitor_stop);
  ]

let broken =
  [
    (pkg (module Stuck_mark), "CODE-6");
    (pkg (module Leaky_raise), "CODE-7");
    (pkg (module Nomem_leak), "CODE-3");
    (pkg (module Claim_first), "LOCK-4");
    (pkg (module Deferred_reap), "STOP-8");
  ]

let drivers = conforming @ List.map fst broken
