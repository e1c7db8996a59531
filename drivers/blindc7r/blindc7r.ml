(* blindc7r: drivers about the SECOND half of CODE-7, "a prepare that raises
   must have changed nothing".  Written from the document
   (spec/rig_edge_driver.txt, spec/clauses.tsv) and the installed interface
   (rig_edge.mli, rig_edge_primitives.mli, rig_edge.h) alone, before any
   certifier ran on them; drivers/blindc7 (an earlier blind set on CODE-7)
   gave the layout.

   Each driver is hostmem (drivers/hostmem) with its prepare, and what
   prepare shares with entry and unload, changed: hostmem's device itself
   (its C stubs, hm_*, linked in from hostmem's library), its image format
   and its kit (Hostmem.kit).  An entry's scratch is made by hm_entry, which
   charges it to the device's Device budget (4 MiB), so that what a prepare
   leaves made shows in what alloc of Device memory can still get.

   WHAT "CHANGED NOTHING" MEANS HERE (my reading, what c7rcheck measures).
   After a prepare i f that raised (an asynchronous exception at any of its
   allocations or waits, or a Fault), compared with the same device and
   image just before that prepare:
   (M) Device memory: alloc gets exactly as much as before, right after the
       raise and still after the driver's own threads have had time to run
       (a helper that outlives the raise and reserves later is a change);
   (U) unload right after the raise gives back everything: nothing stays
       charged after unload (a helper that publishes into an unloaded
       image is a change);
   (P) the next (clean) prepare i f behaves as on an image that never saw
       the raised one (a "started" record left behind is a change);
   (E) the next entry i f returns (no "pending" left for good), makes
       exactly what entry makes on a fresh image (one scratch) and answers
       a handle that launches without faulting the device (no stale handle);
   (O) other functions' state is untouched (an eviction done before the
       raise is a change).
   Threads that outlive the raise but change none of these (they end as
   soon as they see their job cancelled) are not counted as changes.

   What every driver shares (kept as hostmem does it, so that every other
   clause holds): hostmem's alloc/free/map_peer/map_host/dma/image parse/
   grow/signaled/sleep/stop; make and openers start with check_unheld and
   run under Prim.masked (LOCK-4, SIG-6); one counted lock per image
   (Prim.Lock.protect, ASYNC-2) guards every slot; entry waits for a pending
   prepare with Prim.Lock.await (a wait, SIG-2), then claims what prepare
   made or makes the entry itself as hostmem does (Absent, Invalid_argument
   for more scratch than the device has, No_memory having made nothing):
   CODE-2, CODE-3, CODE-5, CODE-6; every wait in prepare is Prim.wait around
   Thread.delay (runtime released, SIG-2, SIG-3); helper threads start with
   Prim.spawn (signals blocked for life, SIG-8) and block only in
   Thread.delay; unload waits for nothing, cancels helpers and gives back
   what the slots hold; no prepare ever raises an exception of its own
   except Fault (CODE-6 "report nothing").  A prepare of an f with an entry
   or a started prepare starts nothing (first half of CODE-7) in all of them.

   THE TABLE

   | driver                  | what its prepare does                                       | expected   | where the bug shows (what a check must do)              |
   |-------------------------|-------------------------------------------------------------|------------|---------------------------------------------------------|
   | c7r-stuck-pending       | marks f pending (entry will wait), waits for "the device's  | CODE-7     | raise at its wait (signal) or at an allocation after the |
   |                         | compiler" (a wait), then compiles into the slot and clears  |            | mark: nothing is charged, but the next entry i f waits  |
   |                         | pending.  No handler: a raise after the mark leaves f       |            | for good (E), and a clean prepare starts nothing (P).   |
   |                         | pending for good.                                           |            |                                                         |
   | c7r-half-rollback       | marks pending, reserves+records the program in the slot's   | CODE-7     | raise at its upload wait: memory is back (M ok), but    |
   |                         | "prepared" field, uploads (a wait), clears pending.  Its    |            | the next entry answers the freed handle: it charges     |
   |                         | handler frees the program and clears pending but leaves the |            | nothing (E) and a Launch of it faults the device (E);   |
   |                         | freed handle in the slot.                                   |            | a clean prepare starts nothing (P).                     |
   | c7r-orphan-thread       | asynchronous: starts the compiler thread (Prim.spawn) under | CODE-7     | raise at an allocation inside/after Prim.spawn (a       |
   |                         | the lock, then counts it pending and registers its ticket   |            | Gc.Memprof exception; no wait in it): ~80 ms later the  |
   |                         | (a cons: allocates).  A raise between the start and the     |            | unregistered thread reserves and publishes (M later);   |
   |                         | register leaves a thread unload cannot cancel.              |            | with unload right after the raise, it publishes into    |
   |                         |                                                             |            | the unloaded image: charged for good (U).               |
   | c7r-fault-after-commit  | synchronous: compiles into the slot (exception-safe), then  | CODE-7     | make the device fault first (launch kit's fault         |
   |                         | reads the device's fault state and raises Fault: the        |            | function, sleep raises Fault), then prepare f: it       |
   |                         | program stays made when prepare raises Fault.               |            | raises Fault with one scratch charged (M).  unload      |
   |                         |                                                             |            | gives it back: only visible before unload.              |
   | c7r-evict-first         | keeps one unclaimed prepared program per image: "makes room | CODE-7     | prepare g (clean), then prepare f interrupted at its    |
   |                         | first" (frees g's unclaimed program), then uploads (a wait),|            | wait: alloc gets one scratch MORE than before (O, M).   |
   |                         | then compiles f.  Its handler gives back f's part only.     |            |                                                         |
   | c7r-started-set         | records f in a "started" set (so a later prepare starts     | CODE-7     | raise at its wait: memory and entry are fine, but a     |
   |                         | nothing), uploads (a wait), then compiles.  The record is   |            | clean prepare of f afterwards starts nothing where on a |
   |                         | not undone on the raise.                                    |            | fresh image it makes the program (P: differential).     |
   | c7r-ok-cstub            | builds its log line and reads f's code (a wait) touching    | conforming | -                                                       |
   |                         | nothing; then ONE C call claims f (CAS), reserves (hm_entry)|            |                                                         |
   |                         | and records the handle: no OCaml code between or after.     |            |                                                         |
   |                         | entry uses the same claim, and waits (Prim.wait polling)    |            |                                                         |
   |                         | while another thread is inside it.  No lock in prepare.     |            |                                                         |
   | c7r-ok-wait-first       | all its waits and allocations come before it touches        | conforming | -                                                       |
   |                         | anything; then one locked section checks, reserves and      |            |                                                         |
   |                         | records; a handler undoes it if the lock's give raises.     |            |                                                         |
   | c7r-ok-retry            | tries to make the program in one locked section; when the   | conforming | (its waits exist only when Device memory is short)     |
   |                         | budget lacks it, waits 2 ms and tries again (3 times), then |            |                                                         |
   |                         | gives up silently.  Nothing is held across a wait.          |            |                                                         |
   | c7r-ok-cancel-stages    | asynchronous, two stages on a helper (a Device code buffer, | conforming | -                                                       |
   |                         | then the scratch, then publish); the helper waits for       |            |                                                         |
   |                         | prepare's "go"; prepare waits for stage 1's ack (a wait);   |            |                                                         |
   |                         | its handler cancels under the lock: frees both stages,      |            |                                                         |
   |                         | clears pending, unpublishes; the helper then ends at once.  |            |                                                         |
   | c7r-ok-fault-rollback   | c7r-fault-after-commit whose Fault path first gives the     | conforming | -                                                       |
   |                         | program back (raises Fault having changed nothing).         |            |                                                         |
   | c7r-ok-shadow-commit    | marks pending, reserves into its own ticket, builds the     | conforming | -                                                       |
   |                         | image's new table of prepared programs aside (a persistent  |            |                                                         |
   |                         | Map), verifies (a wait), commits by one pointer swap under  |            |                                                         |
   |                         | the lock (rebuilding if the table moved); its handler       |            |                                                         |
   |                         | undoes each step (swap, reservation, mark).                 |            |                                                         |

   The conforming prepares survive an exception at EVERY allocation on the
   calling thread, the edge's own included (Prim.Lock's take and give,
   Prim.spawn, Prim.wait), since each commit made inside a Lock.protect is
   covered by a handler that undoes it (keyed on a record allocated before
   anything is touched), and c7r-ok-cstub commits in C after its last
   allocation.  The handlers themselves allocate (their Lock.protect): a
   second asynchronous exception inside a handler is not covered (no driver
   code can be).

   AMBIGUITIES noticed in the document:
   1. "changed nothing" is not defined observably.  Driver-internal records
      (a log line, a counter, a "started" set) are invisible through the
      Driver signature except by how later calls behave; I count a record as
      a change iff a later prepare, entry or unload behaves differently
      (c7r-started-set shows only differentially: "doing nothing is a valid
      prepare", so a certifier must compare with the driver's own behaviour
      on a fresh image).
   2. Timing: must nothing have changed at the moment prepare raises, or
      also later (a helper that reserves 80 ms after the raise)?  I read
      "have changed nothing" as: nothing changed then, and nothing it
      started changes anything afterwards.
   3. Is a started thread that outlives the raise and then ends without
      effect a change?  ("A prepare ... must start nothing" uses "start" for
      work.)  I say no when it ends on its own promptly and touches nothing.
   4. Fault: "A Driver.Fault from a counted call ... lose[s] the device", and
      rig then calls stop, free and unload.  After a Fault, "changed
      nothing" is observable only between the raise and unload (an alloc of
      the lost device): is that window in scope?  I say yes (c7r-fault-
      after-commit).  Also, prepare "must report nothing, failures
      included" while EXC-3 mentions Fault from prepare: I read Fault
      (device faulted) as allowed, a failure of the prepare itself as not.
   5. Which exceptions: EXC-3 says an exception other than Fault from
      prepare loses nothing, yet "An asynchronous exception ... rig calls
      Driver.stop, Driver.free and Driver.unload after it" suggests the
      device is stopped after any asynchronous one.  If it is, only (M)
      before unload and (U) remain observable; (P) and (E) need the device to
      stay usable.  c7rcheck keeps using it.
   6. The window after the last commit: an exception at an allocation of
      Prim.Lock.protect's give (the edge's code, not the driver's), after a
      body that committed, makes the prepare raise "having changed"
      something unless the driver undoes a completed commit in a handler.
      ASYNC-2 only speaks of locks.  Is undoing a completed prepare
      required?  My conforming drivers do it; a certifier that injects only
      in driver frames would not need it.
   7. Undo vs. concurrency: once the commit's lock is given, an entry on
      another thread may claim what the prepare made before its handler
      runs; the handler then cannot undo it.  I take "changed nothing" as
      "nothing beyond what that entry made itself".
   8. Waits on helper threads: SIG-2 makes every wait call rig_unblock, and
      SIG-8 says a driver's thread blocks signals for its life.  Helpers
      here block in Thread.delay, signals blocked, not in Prim.wait.
   9. Nested calls: the lock probes call prepare (same and other function)
      from an allocation inside prepare.  If the outer prepare is then
      interrupted, "changed nothing" must exclude what the nested, completed
      prepare of another function made; the document does not say so.
  10. A prepare whose compile found no memory: "report nothing" means it
      raises nothing; may it leave a negative record ("no memory last
      time")?  None of mine do.
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

(* c7r-ok-cstub: where the C call records the handle it made. *)
type cell = { mutable ch : int }

(* blindc7r_stubs.c: claim (0 -> 1), hm_entry, record into the cell, publish
   (1 -> 2, or back to 0 without memory), in one C call. *)
external c_claim_make : cdev -> int -> int -> int Atomic.t -> cell -> int = "c7r_claim_make"

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* A helper's compile time, and c7r-ok-cancel-stages's code buffer. *)
let compile_time = 0.08
let code_bytes = 4096

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
                | None, _ -> Error (Printf.sprintf "blindc7r: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindc7r: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindc7r: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindc7r: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindc7r: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindc7r: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------------- modes *)

type mode =
  | Stuck_pending
  | Half_rollback
  | Orphan_thread
  | Fault_after_commit
  | Evict_first
  | Started_set
  | Ok_cstub
  | Ok_wait_first
  | Ok_retry
  | Ok_cancel_stages
  | Ok_fault_rollback
  | Ok_shadow_commit

(* name, mode, expected failing clause *)
let modes =
  [
    ("c7r-stuck-pending", Stuck_pending, "CODE-7");
    ("c7r-half-rollback", Half_rollback, "CODE-7");
    ("c7r-orphan-thread", Orphan_thread, "CODE-7");
    ("c7r-fault-after-commit", Fault_after_commit, "CODE-7");
    ("c7r-evict-first", Evict_first, "CODE-7");
    ("c7r-started-set", Started_set, "CODE-7");
    ("c7r-ok-cstub", Ok_cstub, "conforming");
    ("c7r-ok-wait-first", Ok_wait_first, "conforming");
    ("c7r-ok-retry", Ok_retry, "conforming");
    ("c7r-ok-cancel-stages", Ok_cancel_stages, "conforming");
    ("c7r-ok-fault-rollback", Ok_fault_rollback, "conforming");
    ("c7r-ok-shadow-commit", Ok_shadow_commit, "conforming");
  ]

let expected = List.map (fun (n, _, e) -> (n, e)) modes

module SMap = Map.Make (String)

(* ------------------------------------------------------------- driver *)

module Make (M : sig
  val name : string
  val mode : mode
end) : Package = struct
  module D = struct
    type t = { c : cdev; queue : queue; mutable word : region option }
    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    (* One prepare's own record, allocated before the prepare touches
       anything: what it marked, reserved and published, so that its handler
       knows what to give back.  Mutable fields under the image's lock. *)
    type ticket = {
      mutable marked : bool;  (* counted in the slot's pending *)
      mutable th : int;  (* scratch reserved, not yet published *)
      mutable code : int;  (* c7r-ok-cancel-stages: the code buffer *)
      mutable pub : int;  (* the handle it published (slot.ph or made) *)
      st : int Atomic.t;  (* helper jobs: 0 wait, 1 go, 2 cancelled, 3 finished *)
      acked : bool Atomic.t;  (* c7r-ok-cancel-stages: stage 1 done *)
    }

    (* One function of an image, made at load. *)
    type slot = {
      fname : string;
      fkind : int;
      scratch : int;
      mutable h : int;  (* the entry entry answered; 0: none *)
      mutable ph : int;  (* made by a prepare, not yet claimed by an entry *)
      mutable pending : int;  (* prepares started and not finished: entry waits *)
      mutable started : bool;  (* c7r-started-set *)
      mutable tk : ticket option;  (* c7r-ok-cancel-stages: the running job *)
      state : int Atomic.t;  (* c7r-ok-cstub: 0 none, 1 making, 2 made, 3 unloaded *)
      cell : cell;  (* c7r-ok-cstub: the handle *)
    }

    type image = {
      dev : t;
      slots : slot list;
      lock : Prim.Lock.t;
      cond : Condition.t;
      mutable made : int SMap.t;  (* c7r-ok-shadow-commit: prepared, unclaimed *)
      mutable tickets : ticket list;  (* c7r-orphan-thread: registered jobs *)
      mutable unloaded : bool;
    }

    exception Fault of string

    let key = "blindc7r"

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access (r : region) = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindc7r: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindc7r: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindc7r: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindc7r: write of a freed region")

    let locate _ (r : region) =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindc7r: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some ({ owner = d; h; size = n; kind = Mem } : region)

    let free _ (r : region) =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindc7r: free of a region that is not live"

    let map_peer d _ (r : region) : region =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindc7r: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n : region =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindc7r: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindc7r: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let slot (name, (k, n)) =
      {
        fname = name;
        fkind = kind_code k;
        scratch = n;
        h = 0;
        ph = 0;
        pending = 0;
        started = false;
        tk = None;
        state = Atomic.make 0;
        cell = { ch = 0 };
      }

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns ->
          Ok
            {
              dev = d;
              slots = List.map slot fns;
              lock = Prim.Lock.create "blindc7r.image";
              cond = Condition.create ();
              made = SMap.empty;
              tickets = [];
              unloaded = false;
            }

    (* The slot of f; Not_found if the image has no f.  Allocates nothing. *)
    let rec find f = function [] -> raise Not_found | s :: r -> if String.equal s.fname f then s else find f r

    let fits s = s.scratch <= capacity

    let too_big s =
      invalid_arg
        (Printf.sprintf "blindc7r: %s needs %d bytes of scratch, the device has %d in all" s.fname s.scratch capacity)

    (* The compile: f's scratch, charged to the Device budget; its handle, 0
       when the budget lacks it.  Allocates nothing. *)
    let compile i s = c_entry i.dev.c s.fkind (round_up s.scratch word)

    (* Under the lock: no entry, nothing prepared, no prepare started. *)
    let fresh i s = s.h = 0 && s.ph = 0 && s.pending = 0 && (not (SMap.mem s.fname i.made)) && fits s

    let peek i s = Prim.Lock.protect i.lock (fun () -> fresh i s)

    (* Under the lock: a started prepare has finished. *)
    let finish i s =
      s.pending <- s.pending - 1;
      Condition.broadcast i.cond

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    (* prepare's waits: the upload of f's code, the read of it from the image,
       the device's compiler queue, a retry's back-off.  Each is a wait: the
       signals rig_mask blocked are unblocked around a blocking step that
       releases the runtime (SIG-2, SIG-3). *)
    let pause () = Prim.wait (fun () -> Thread.delay 0.002)
    let upload = pause
    let read_code = pause
    let queue_turn = pause
    let verify = pause
    let backoff = pause

    let new_ticket () =
      { marked = false; th = 0; code = 0; pub = 0; st = Atomic.make 0; acked = Atomic.make false }

    (* Under the lock: count t's prepare pending if f is fresh. *)
    let mark i s t =
      Prim.Lock.protect i.lock (fun () ->
          if fresh i s then begin
            s.pending <- s.pending + 1;
            t.marked <- true
          end)

    (* Under the lock: give back everything t holds or published and that no
       entry claimed yet, cancel its job, uncount it. *)
    let undo_locked i s t =
      (match Atomic.get t.st with 0 | 1 -> Atomic.set t.st 2 | _ -> ());
      if t.code <> 0 then begin
        ignore (c_free i.dev.c t.code);
        t.code <- 0
      end;
      if t.th <> 0 then begin
        ignore (c_free i.dev.c t.th);
        t.th <- 0
      end;
      if t.pub <> 0 then begin
        if s.ph = t.pub then begin
          ignore (c_free i.dev.c t.pub);
          s.ph <- 0
        end
        else begin
          match SMap.find_opt s.fname i.made with
          | Some h when h = t.pub ->
              ignore (c_free i.dev.c h);
              i.made <- SMap.remove s.fname i.made
          | _ -> ()
        end;
        t.pub <- 0
      end;
      if t.marked then begin
        t.marked <- false;
        finish i s
      end;
      match s.tk with Some t' when t' == t -> s.tk <- None | _ -> ()

    let undo i s t = Prim.Lock.protect i.lock (fun () -> undo_locked i s t)

    (* ------------------------------------------------------- entry *)

    (* c7r-ok-cstub: no lock; the C claim decides who makes. *)
    let rec entry_cstub i s =
      match Atomic.get s.state with
      | 2 -> Entry (Int64.of_int s.cell.ch)
      | 1 ->
          Prim.wait (fun () -> Thread.delay 0.0005);
          entry_cstub i s
      | _ ->
          if not (fits s) then too_big s;
          let h = c_claim_make i.dev.c s.fkind (round_up s.scratch word) s.state s.cell in
          if h < 0 then entry_cstub i s else if h = 0 then No_memory (max s.scratch word) else Entry (Int64.of_int h)

    let entry i f =
      match M.mode with
      | Ok_cstub -> ( match find f i.slots with exception Not_found -> Absent | s -> entry_cstub i s)
      | _ ->
          Prim.Lock.protect i.lock (fun () ->
              match find f i.slots with
              | exception Not_found -> Absent
              | s -> (
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
                  else
                    match SMap.find_opt f i.made with
                    | Some h ->
                        s.h <- h;
                        i.made <- SMap.remove f i.made;
                        Entry (Int64.of_int h)
                    | None ->
                        if not (fits s) then too_big s;
                        s.h <- compile i s;
                        if s.h = 0 then No_memory (max s.scratch word) else Entry (Int64.of_int s.h)))

    (* ------------------------------------------------------- helpers *)

    (* Thread.delay on a helper (signals blocked), cut short once [go ()]
       turns false. *)
    let nap go dur =
      let steps = ref (int_of_float (dur *. 1000.)) in
      while go () && !steps > 0 do
        decr steps;
        match Thread.delay 0.001 with () -> () | exception _ -> ()
      done

    (* c7r-orphan-thread's compiler thread: compiles, then publishes unless
       its ticket was cancelled (by unload, which cancels the registered
       ones). *)
    let orphan_job i s t () =
      (match Thread.delay compile_time with () -> () | exception _ -> ());
      Prim.Lock.protect i.lock (fun () ->
          if Atomic.get t.st <> 2 && s.h = 0 && s.ph = 0 then s.ph <- compile i s;
          if s.pending > 0 then finish i s else Condition.broadcast i.cond)

    (* c7r-ok-cancel-stages's job: waits for go (1) or a cancel (2), then a
       code buffer, the scratch, and the publish, each under the lock and
       only while the job is not cancelled; ends as soon as it is. *)
    let stage_job i s t () =
      while Atomic.get t.st = 0 do
        match Thread.delay 0.0005 with () -> () | exception _ -> ()
      done;
      let go () = Atomic.get t.st = 1 in
      if go () then begin
        Prim.Lock.protect i.lock (fun () -> if go () then t.code <- c_alloc i.dev.c true code_bytes);
        Atomic.set t.acked true;
        nap go compile_time;
        Prim.Lock.protect i.lock (fun () -> if go () then t.th <- compile i s);
        nap go 0.01;
        Prim.Lock.protect i.lock (fun () ->
            if go () then begin
              if t.code <> 0 then begin
                ignore (c_free i.dev.c t.code);
                t.code <- 0
              end;
              if t.th <> 0 && s.h = 0 && s.ph = 0 then begin
                s.ph <- t.th;
                t.pub <- t.th;
                t.th <- 0
              end
              else if t.th <> 0 then begin
                ignore (c_free i.dev.c t.th);
                t.th <- 0
              end;
              Atomic.set t.st 3;
              if t.marked then begin
                t.marked <- false;
                finish i s
              end;
              match s.tk with Some t' when t' == t -> s.tk <- None | _ -> ()
            end)
      end

    (* c7r-ok-cancel-stages: prepare waits until the job took stage 1 (or
       ended). *)
    let rec wait_ack t =
      if Atomic.get t.st = 1 && not (Atomic.get t.acked) then begin
        Prim.wait (fun () -> Thread.delay 0.0005);
        wait_ack t
      end

    (* ------------------------------------------------------- prepare *)

    let prepare i f =
      match find f i.slots with
      | exception Not_found -> ()
      | s -> (
          match M.mode with
          | Stuck_pending ->
              let marked =
                Prim.Lock.protect i.lock (fun () ->
                    if fresh i s then begin
                      s.pending <- s.pending + 1;
                      true
                    end
                    else false)
              in
              if marked then begin
                (* BUG: no handler.  A raise from here to the finish (this
                   wait, the closure below) leaves f pending for good. *)
                queue_turn ();
                Prim.Lock.protect i.lock (fun () ->
                    if s.h = 0 && s.ph = 0 then s.ph <- compile i s;
                    finish i s)
              end
          | Half_rollback ->
              if peek i s then begin
                let t = new_ticket () in
                match
                  mark i s t;
                  if t.marked then begin
                    Prim.Lock.protect i.lock (fun () -> s.ph <- compile i s);
                    upload ();
                    Prim.Lock.protect i.lock (fun () ->
                        t.marked <- false;
                        finish i s)
                  end
                with
                | () -> ()
                | exception e ->
                    Prim.Lock.protect i.lock (fun () ->
                        (* BUG: gives the program back, keeps its handle. *)
                        if s.ph <> 0 then ignore (c_free i.dev.c s.ph);
                        if t.marked then begin
                          t.marked <- false;
                          finish i s
                        end);
                    raise e
              end
          | Orphan_thread ->
              if peek i s then begin
                let t = new_ticket () in
                Prim.Lock.protect i.lock (fun () ->
                    if fresh i s then begin
                      (* BUG: the thread runs from here on; what registers
                         it (pending, the ticket list) comes after, and the
                         cons allocates. *)
                      ignore (Prim.spawn (orphan_job i s t));
                      s.pending <- s.pending + 1;
                      i.tickets <- t :: i.tickets
                    end)
              end
          | Fault_after_commit ->
              if peek i s then begin
                let t = new_ticket () in
                (match
                   Prim.Lock.protect i.lock (fun () ->
                       if fresh i s then begin
                         s.ph <- compile i s;
                         t.pub <- s.ph
                       end)
                 with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e);
                (* BUG: the device's state is read once the program is in:
                   a fault of earlier work raises with it kept. *)
                check_fault i.dev
              end
          | Evict_first ->
              if peek i s then begin
                let t = new_ticket () in
                match
                  mark i s t;
                  if t.marked then begin
                    (* Room first: the image keeps one unclaimed prepared
                       program. *)
                    Prim.Lock.protect i.lock (fun () ->
                        List.iter
                          (fun g ->
                            if g != s && g.ph <> 0 then begin
                              ignore (c_free i.dev.c g.ph);
                              g.ph <- 0
                            end)
                          i.slots);
                    upload ();
                    Prim.Lock.protect i.lock (fun () ->
                        if s.ph = 0 && s.h = 0 then begin
                          s.ph <- compile i s;
                          t.pub <- s.ph
                        end;
                        t.marked <- false;
                        finish i s)
                  end
                with
                | () -> ()
                | exception e ->
                    (* BUG: f's part goes back; the eviction stays done. *)
                    undo i s t;
                    raise e
              end
          | Started_set ->
              let first =
                Prim.Lock.protect i.lock (fun () ->
                    if fresh i s && not s.started then begin
                      s.started <- true;
                      true
                    end
                    else false)
              in
              if first then begin
                (* BUG: f stays "started" if anything from here raises. *)
                upload ();
                let t = new_ticket () in
                match
                  Prim.Lock.protect i.lock (fun () ->
                      if s.h = 0 && s.ph = 0 then begin
                        s.ph <- compile i s;
                        t.pub <- s.ph
                      end)
                with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e
              end
          | Ok_cstub ->
              if fits s && Atomic.get s.state = 0 then begin
                (* What can raise comes first and touches nothing. *)
                let why = Printf.sprintf "prepare %s: %d bytes of scratch" f s.scratch in
                ignore (Sys.opaque_identity why);
                read_code ();
                (* The claim, the reservation and its record: one C call,
                   no OCaml code between them or after. *)
                ignore (c_claim_make i.dev.c s.fkind (round_up s.scratch word) s.state s.cell)
              end
          | Ok_wait_first ->
              if peek i s then begin
                let why = Printf.sprintf "prepare %s: %d bytes of scratch" f s.scratch in
                ignore (Sys.opaque_identity why);
                read_code ();
                let t = new_ticket () in
                match
                  Prim.Lock.protect i.lock (fun () ->
                      if fresh i s then begin
                        s.ph <- compile i s;
                        t.pub <- s.ph
                      end)
                with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e
              end
          | Ok_retry ->
              if peek i s then begin
                let t = new_ticket () in
                let rec attempt n =
                  let short =
                    Prim.Lock.protect i.lock (fun () ->
                        if fresh i s then begin
                          s.ph <- compile i s;
                          t.pub <- s.ph;
                          s.ph = 0
                        end
                        else false)
                  in
                  if short && n > 0 then begin
                    backoff ();
                    attempt (n - 1)
                  end
                in
                match attempt 3 with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e
              end
          | Ok_cancel_stages ->
              if peek i s then begin
                let t = new_ticket () in
                let some_t = Some t in
                match
                  ignore (Prim.spawn (stage_job i s t));
                  Prim.Lock.protect i.lock (fun () ->
                      if fresh i s then begin
                        s.pending <- s.pending + 1;
                        t.marked <- true;
                        s.tk <- some_t;
                        Atomic.set t.st 1
                      end
                      else Atomic.set t.st 2);
                  wait_ack t
                with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e
              end
          | Ok_fault_rollback ->
              if peek i s then begin
                let t = new_ticket () in
                match
                  Prim.Lock.protect i.lock (fun () ->
                      if fresh i s then begin
                        s.ph <- compile i s;
                        t.pub <- s.ph
                      end);
                  check_fault i.dev
                with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e
              end
          | Ok_shadow_commit ->
              if peek i s then begin
                let t = new_ticket () in
                let rec commit () =
                  let old = i.made in
                  let next = SMap.add f t.th old in
                  let swapped =
                    Prim.Lock.protect i.lock (fun () ->
                        if i.made == old then begin
                          i.made <- next;
                          t.pub <- t.th;
                          t.th <- 0;
                          t.marked <- false;
                          finish i s;
                          true
                        end
                        else false)
                  in
                  if not swapped then commit ()
                in
                match
                  mark i s t;
                  if t.marked then begin
                    t.th <- compile i s;
                    if t.th <> 0 then begin
                      verify ();
                      commit ()
                    end
                    else
                      Prim.Lock.protect i.lock (fun () ->
                          t.marked <- false;
                          finish i s)
                  end
                with
                | () -> ()
                | exception e ->
                    undo i s t;
                    raise e
              end)

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          i.unloaded <- true;
          let fr h = if h <> 0 then ignore (c_free i.dev.c h) in
          SMap.iter
            (fun f h -> match find f i.slots with s when s.h = h -> () | _ -> fr h | exception Not_found -> fr h)
            i.made;
          i.made <- SMap.empty;
          List.iter (fun t -> Atomic.set t.st 2) i.tickets;
          i.tickets <- [];
          List.iter
            (fun s ->
              (match s.tk with Some t -> undo_locked i s t | None -> ());
              fr s.h;
              if s.ph <> s.h then fr s.ph;
              s.h <- 0;
              s.ph <- 0;
              if Atomic.exchange s.state 3 = 2 then fr s.cell.ch)
            i.slots)

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n
    let signaled d = c_signaled d.c

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
    Prim.check_unheld "Blindc7r.make";
    Prim.masked (fun () ->
        let c = c_open capacity in
        let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
        let d = { D.c; queue; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let device_names = [ M.name ^ "0"; M.name ^ "1" ]

  let openers () =
    Prim.check_unheld "Blindc7r.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make }) device_names)

  let kit = Hostmem.kit
end

let drivers : (string * (module Package)) list =
  List.map
    (fun (name, mode, _) ->
      ( name,
        (module Make (struct
          let name = name
          let mode = mode
        end) : Package) ))
    modes
