(* blindc7n: drivers about the SECOND half of CODE-7, "a prepare that raises
   must have changed nothing".  Written from the document
   (spec/rig_edge_driver.txt, spec/clauses.tsv) and the installed interface
   (rig_edge.mli, rig_edge_primitives.mli, rig_edge.h) alone, with hostmem
   (drivers/hostmem) as the model and drivers/blindc7r's dune, plugin and
   first lines for the layout only; no certifier ran on them.

   Each driver is hostmem with its prepare, and what prepare shares with
   entry and unload, changed: hostmem's device itself (its C stubs, hm_*,
   linked in from hostmem's library), its image format and its kit
   (Hostmem.kit).  An entry's scratch is made by hm_entry, charged to the
   device's Device budget (4 MiB); some drivers' entries also hold a Device
   code or constants buffer (hm_alloc, charged).  So what a prepare leaves
   made shows in what alloc of Device memory can still get.

   WHAT EVERY DRIVER SHARES (kept as hostmem does it, so that every other
   clause holds): hostmem's alloc/free/map_peer/map_host/dma/image parse/
   grow/signaled/sleep/stop; make and openers start with check_unheld and
   run under Prim.masked (LOCK-4, SIG-6); one counted lock per image
   (Prim.Lock.protect, ASYNC-2) guards every table; entry waits for a
   started prepare with Prim.Lock.await (a wait, SIG-2), then claims what it
   made or makes the entry itself (Absent; Invalid_argument when scratch +
   code exceed the device; No_memory having made nothing): CODE-2, CODE-3,
   CODE-5, CODE-6; every wait in prepare is Prim.wait around Thread.delay
   (runtime released, SIG-2, SIG-3); helper threads start with Prim.spawn
   (SIG-8), take only the image's lock and block only in Thread.delay;
   unload waits for nothing, cancels started prepares and gives back all
   they and the entries hold; no prepare raises an exception of its own.
   A prepare starts only where f has no entry and no started or published
   prepare, marking f in the same locked section (CODE-7's first half).
   Each handle is stored into its record right after the C call that made
   it, with no allocation between (no asynchronous exception can come
   there), so a handler can find everything made.

   THE TABLE  (expected: what a correct CODE-7 check must say)

   | driver                | what its prepare does                                        | expected   | where the bug shows                                        |
   |-----------------------|--------------------------------------------------------------|------------|------------------------------------------------------------|
   | c7n-ok-helper-staging | async: marks f, starts a helper and, as its very last step   | conforming | - (during a CLEAN prepare Device memory drops by 64 KiB    |
   |                       | (no allocation after it), lets it go.  The helper takes a    |            | more than the entry's footprint; after a raise inside      |
   |                       | 64 KiB temporary Device staging buffer, compiles 30 ms, then |            | spawn a cancelled helper lives ~1 ms, touching nothing)    |
   |                       | under the lock frees the staging, makes the entry, publishes.|            |                                                            |
   | c7n-ok-code-first     | sync, partial: a wait, then only the entry's 4 KiB Device    | conforming | - (what it makes is not what entry makes)                  |
   |                       | code buffer; entry adopts it and adds the scratch.           |            |                                                            |
   | c7n-ok-twice          | heuristic: the first prepare of f only counts the ask; the   | conforming | - (the first prepare changes a count and starts nothing;   |
   |                       | second makes the whole entry.  The handler gives the ask back|            | the handler restores the count)                            |
   | c7n-ok-many-steps     | sync: 32 KiB upload buffer, wait, link table, code buffer,   | conforming | - (85 allocation points, 3 waits)                          |
   |                       | wait, log line, scratch, wait, upload freed, publish.  The   |            |                                                            |
   |                       | handler undoes everything, also after the publish.           |            |                                                            |
   | c7n-ok-slow-helper    | async: marks f, starts a helper that compiles 300-600 ms and | conforming | - (a cancelled helper ends within 10 ms)                   |
   |                       | then makes the entry under the lock unless cancelled; a raise|            |                                                            |
   |                       | (even inside spawn, with the thread running) cancels.        |            |                                                            |
   | c7n-ok-two-buffers    | async, two Device buffers: the helper makes an 8 KiB         | conforming | - (a raise at the prepare's wait frees what the helper     |
   |                       | constants buffer, then 20 ms later the scratch, each under   |            | already made)                                              |
   |                       | the lock if not cancelled; the prepare waits (polling waits, |            |                                                            |
   |                       | <= 50 ms) for the helper to take the job.                    |            |                                                            |
   | c7n-ok-budget         | a budget of its own: <= 64 KiB of unclaimed prepared scratch | conforming | -                                                          |
   |                       | per image; charged with the mark, refunded by claim/undo.    |            |                                                            |
   | c7n-ok-creg           | keeps the prepared scratch in a C registry under             | conforming | -                                                          |
   |                       | "c7n/<image>/<f>": key recorded first, then ONE C call makes |            |                                                            |
   |                       | the entry and registers it.                                  |            |                                                            |
   | c7n-ok-ack-undo       | sync: wait, scratch, publish, then waits for the cache       | conforming | - (its undo removes a publication no entry claimed)        |
   |                       | writer's ack; any raise undoes it wholly.                    |            |                                                            |
   | c7n-ok-failed-memo    | after a genuine no-memory failure, remembers f and prepares  | conforming | -                                                          |
   |                       | it no more until an entry of f; a raise is undone wholly.    |            |                                                            |
   | c7n-refund-late       | ok-budget, but the job records its charge only after the     | CODE-7     | raise at/before the compile's wait: the budget stays       |
   |                       | compile's wait ("the size the compiler reports"); the undo   |            | charged, so a later clean prepare of f (or g) starts       |
   |                       | refunds the recorded charge, 0 before then.                  |            | nothing where a fresh image makes the scratch (memory      |
   |                       |                                                              |            | after that prepare: differential).  Memory is fine.        |
   | c7n-creg-gap          | ok-creg, but makes the entry (C call 1), builds the key (an  | CODE-7     | raise at the key's allocations: the scratch stays charged, |
   |                       | OCaml allocation), then registers it (C call 2).             |            | recorded nowhere: memory after the raise, and after unload.|
   | c7n-negative-cache    | ok-failed-memo, but its handler takes any exception for a    | CODE-7     | any raise after the mark: later clean prepares of f start  |
   |                       | failed compile and remembers f.                              |            | nothing (differential).  Memory is fine.                   |
   | c7n-resume-partial    | entry = code buffer + scratch; the handler keeps a code      | CODE-7     | raise between the code buffer and the publish: 4 KiB stay  |
   |                       | buffer already made, published as partial, "for the next     |            | charged until entry adopts it or unload frees it (memory   |
   |                       | entry to resume from".                                       |            | right after the raise).                                    |
   | c7n-keep-after-commit | ok-ack-undo, but once published the work counts as committed:| CODE-7     | raise at the ack's wait or an allocation after the publish:|
   |                       | a raise in the ack's wait keeps it (entry claims it, unload  | (my        | f's scratch stays charged until entry or unload (memory    |
   |                       | frees it).                                                   | reading)   | right after the raise).                                    |
   | c7n-deferred-free     | its handler "makes no device call": it unmarks f and puts    | CODE-7     | raise after the scratch is made: charged until the image's |
   |                       | what was made on the image's garbage list, freed by the      |            | next prepare/entry/unload (memory after the raise, also    |
   |                       | image's next prepare, entry or unload.                       |            | 0.75 s later).                                             |

   c7n-keep-after-commit: I read the document as NOT allowing it.  "A
   prepare that raises must have changed nothing" has no exception for
   asynchronous exceptions, and the asynchronous paragraph says such an
   exception "can end any OCaml code of the driver": a wait of prepare
   after its commit is prepare's code, so prepare raises there having made
   f's scratch.  Nothing leaks (the work is recorded, entry claims it,
   unload gives it back), which is why a driver author may think it
   allowed; but the clause is about what changed, not about leaks.  A
   conforming driver must either commit after its last wait and allocation
   or undo the commit (c7n-ok-ack-undo).

   AMBIGUITIES met in the document:
   1. keep-after-commit above: is work that a prepare committed before an
      asynchronous exception ended it "changed"?  EXC-3 (an exception from
      prepare loses nothing, so rig goes on using the image) makes keeping
      it harmless; the clause's words forbid it.
   2. "changed nothing" is not defined observably.  A record of the
      driver's own (a budget, a negative cache) shows only in how later
      prepares behave, and since "doing nothing is a valid prepare" only
      differentially, against the same driver on an image that never saw
      the raise.  I count it (refund-late, negative-cache).
   3. Transients: does a helper that outlives a raise for a few ms, doing
      nothing, count as a change (is a thread "started")?  I say no.  And
      may a clean prepare hold temporary Device memory that entry's
      footprint does not have (helper-staging's staging)?  Nothing forbids
      it; a checker comparing a clean prepare's footprint with entry's
      would flag it.
   4. The window after a commit: an exception can come after prepare's
      body committed, in the give of Prim.Lock.protect (edge code).  My
      conforming drivers undo a publication no entry claimed yet; if an
      entry on another thread claimed it meanwhile, the undo cannot, and
      the raised prepare has "made" the entry through that entry.
   5. "A started prepare": I read started as "started making something";
      c7n-ok-twice's first prepare only counts an ask, so its second
      prepare may start.
   6. No_memory after a partial prepare (code-first): entry makes nothing
      and leaves the prepared code buffer prepared ("having made nothing")
      rather than freeing it ("answer as if it made the entry itself"); its
      n counts only the bytes still missing.
   7. Helper threads' blocking: SIG-2 makes every wait call rig_unblock,
      SIG-8 makes a driver's thread block signals for life; helpers here
      block in Thread.delay, not Prim.wait.
   8. May a prepare wait at all ("may ... return without waiting")?
      c7n-ok-two-buffers waits up to 50 ms for its helper's ack: I read
      waiting as allowed, not required to be absent.
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

(* blindc7n_stubs.c: the process-wide registry of prepared programs. *)
external c_reg_put : string -> int -> bool = "c7n_reg_put"
external c_reg_take : string -> int = "c7n_reg_take"
external c_reg_make : cdev -> int -> int -> string -> int = "c7n_reg_make"

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* Device buffers of the drivers' own (bytes, multiples of Rig.word). *)
let code_buffer = 4096      (* a code buffer: part of the entry (code-first, many-steps, resume-partial) *)
let const_buffer = 8192     (* a constants buffer: part of the entry (two-buffers) *)
let staging_bytes = 65536   (* a helper's temporary staging buffer (helper-staging) *)
let upload_bytes = 32768    (* many-steps' temporary upload buffer *)
let budget_cap = 65536      (* unclaimed prepared scratch one image may hold (budget, refund-late) *)

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
                | None, _ -> Error (Printf.sprintf "c7n: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "c7n: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "c7n: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "c7n: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "c7n: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "c7n: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------- shared state *)

type dev = {
  c : cdev;
  id : int;
  dname : string;
  queue : queue;
  mutable word : region option;  (* set once at open *)
}

and region = { owner : dev; h : int; size : int; kind : rkind }
and rkind = Mem | Mapping | Word

(* What one prepare makes, before and after it publishes.  Each field is
   stored right after the C call that makes it, with no allocation between
   (so no asynchronous exception can come between the make and its record),
   and zeroed right after the free.  [release_job] frees what it still
   holds, as often as one likes. *)
type job = {
  cancelled : bool Atomic.t;  (* its prepare raised, or unload came: make nothing more *)
  go : bool Atomic.t;         (* helper-staging: the prepare returned; the helper may start *)
  ack : bool Atomic.t;        (* two-buffers: the helper took the job *)
  mutable staging : int;      (* a temporary Device buffer (not part of the entry) *)
  mutable code : int;         (* a Device code/constants buffer (part of the entry) *)
  mutable scratch : int;      (* the entry's handle (hm_entry: its scratch) *)
  mutable charged : int;      (* what it holds of the image's prepare budget *)
  mutable key : string;       (* the registry key its scratch is recorded under ("": none) *)
}

let new_job () =
  {
    cancelled = Atomic.make false;
    go = Atomic.make false;
    ack = Atomic.make false;
    staging = 0;
    code = 0;
    scratch = 0;
    charged = 0;
    key = "";
  }

(* A function's prepare: started (entry waits for it), or published
   (entry claims what it made). *)
type prep = Pending of job | Ready of job

(* An entry: its handle (0 while entry makes it) and its code buffer. *)
type ent = { mutable eh : int; mutable ecode : int }

type image = {
  dev : dev;
  iid : int;
  fns : (string * (kind * int)) list;
  code_bytes : int;                       (* the code buffer each entry has, 0: none *)
  lock : Prim.Lock.t;                     (* guards everything below *)
  cond : Condition.t;                     (* a prepare published or gave up *)
  entries : (string, ent) Hashtbl.t;
  preps : (string, prep) Hashtbl.t;
  asks : (string, int ref) Hashtbl.t;     (* twice: prepares asked per function *)
  failed : (string, unit) Hashtbl.t;      (* failed-memo, negative-cache: do not prepare again *)
  mutable budget : int;                   (* budget, refund-late: unclaimed prepared bytes *)
  mutable garbage : int list;             (* deferred-free: handles to free at the next call *)
}

let next_iid = Atomic.make 1

let new_image d fns code_bytes =
  {
    dev = d;
    iid = Atomic.fetch_and_add next_iid 1;
    fns;
    code_bytes;
    lock = Prim.Lock.create "c7n.image";
    cond = Condition.create ();
    (* sized so that no resize (which allocates midway) happens for any
       image of a reasonable size *)
    entries = Hashtbl.create 64;
    preps = Hashtbl.create 64;
    asks = Hashtbl.create 64;
    failed = Hashtbl.create 64;
    budget = 0;
    garbage = [];
  }

(* A wait of a driver's function: Thread.delay releases the runtime (SIG-2,
   SIG-3). *)
let pause ms = Prim.wait (fun () -> Thread.delay (float_of_int ms /. 1000.))

let free_h i h = if h <> 0 then ignore (c_free i.dev.c h)
let fn_of i f = List.assoc_opt f i.fns

(* ------------------------------------------- what prepare and entry share *)

(* All of these run under i.lock. *)

let collect_garbage i =
  match i.garbage with
  | [] -> ()
  | g ->
      i.garbage <- [];
      List.iter (free_h i) g

let release_job i j =
  free_h i j.staging;
  j.staging <- 0;
  free_h i j.code;
  j.code <- 0;
  free_h i j.scratch;
  j.scratch <- 0;
  if j.key <> "" then begin
    free_h i (c_reg_take j.key);
    j.key <- ""
  end;
  i.budget <- i.budget - j.charged;
  j.charged <- 0

let startable i f =
  (match Hashtbl.find_opt i.entries f with Some e when e.eh <> 0 -> false | _ -> true)
  && not (Hashtbl.mem i.preps f)

(* CODE-7's first half: starts (marks f Pending j) only when f has no entry
   and no started prepare, and entry would not refuse it. *)
let start_pending i f j =
  if not (startable i f) then None
  else
    match fn_of i f with
    | Some (_, n) as r when n + i.code_bytes <= capacity ->
        Hashtbl.replace i.preps f (Pending j);
        r
    | _ -> None

(* j made what it makes: entry may claim it. *)
let publish i f j =
  match Hashtbl.find_opt i.preps f with
  | Some (Pending j') when j' == j && not (Atomic.get j.cancelled) ->
      Hashtbl.replace i.preps f (Ready j);
      Condition.broadcast i.cond
  | _ -> release_job i j

(* Undoes j wholly: its mark or its publication (if no entry claimed it
   yet), and what it still holds.  Idempotent. *)
let undo i f j =
  Atomic.set j.cancelled true;
  (match Hashtbl.find_opt i.preps f with
  | Some (Pending j' | Ready j') when j' == j ->
      Hashtbl.remove i.preps f;
      Condition.broadcast i.cond
  | _ -> ());
  release_job i j

(* [body ()], and on any exception out of it, j undone wholly, even after
   it published (an exception can also come after the last line of the
   body, in the give of a Lock.protect). *)
let guarded i f j body =
  match body () with
  | () -> ()
  | exception e ->
      Prim.Lock.protect i.lock (fun () -> undo i f j);
      raise e

(* ------------------------------------------------------------- entry *)

let fits i f n =
  if n + i.code_bytes > capacity then
    invalid_arg
      (Printf.sprintf "c7n: %s needs %d bytes (%d of scratch, %d of code), the device has %d in all" f
         (n + i.code_bytes) n i.code_bytes capacity)

(* Under i.lock: makes f's entry, adopting what a published prepare made.
   The table's slot is made first and filled in place (no allocation
   between a make and its record).  Without memory it makes nothing: what it
   made itself is given back, what a prepare made stays prepared. *)
let make_entry i f k n adopted =
  let bytes = round_up n word in
  let e = { eh = 0; ecode = 0 } in
  Hashtbl.replace i.entries f e;
  (match adopted with
  | Some j ->
      Hashtbl.remove i.preps f;
      if j.key <> "" then begin
        j.scratch <- c_reg_take j.key;
        j.key <- ""
      end;
      e.ecode <- j.code;
      j.code <- 0;
      e.eh <- j.scratch;
      j.scratch <- 0;
      release_job i j (* its staging, if any, and its budget charge *)
  | None -> ());
  let made_code = i.code_bytes > 0 && e.ecode = 0 in
  if made_code then e.ecode <- c_alloc i.dev.c true i.code_bytes;
  if made_code && e.ecode = 0 then begin
    Hashtbl.remove i.entries f;
    No_memory (i.code_bytes + max n word)
  end
  else begin
    if e.eh = 0 then e.eh <- c_entry i.dev.c (kind_code k) bytes;
    if e.eh <> 0 then begin
      Hashtbl.remove i.failed f;
      Entry (Int64.of_int e.eh)
    end
    else begin
      if made_code then begin
        free_h i e.ecode;
        e.ecode <- 0
      end
      else if e.ecode <> 0 then begin
        let j = new_job () in
        j.code <- e.ecode;
        e.ecode <- 0;
        Hashtbl.replace i.preps f (Ready j)
      end;
      Hashtbl.remove i.entries f;
      No_memory ((if made_code then i.code_bytes else 0) + max n word)
    end
  end

(* CODE-6: waits (Lock.await, a wait) for a started prepare, then claims
   what it made or makes the entry itself. *)
let entry i f =
  Prim.Lock.protect i.lock (fun () ->
      collect_garbage i;
      let rec go () =
        match Hashtbl.find_opt i.entries f with
        | Some e when e.eh <> 0 -> Entry (Int64.of_int e.eh)
        | _ -> (
            match fn_of i f with
            | None -> Absent
            | Some (k, n) -> (
                fits i f n;
                match Hashtbl.find_opt i.preps f with
                | Some (Pending _) ->
                    Prim.Lock.await i.lock i.cond;
                    go ()
                | Some (Ready j) -> make_entry i f k n (Some j)
                | None -> make_entry i f k n None))
      in
      go ())

(* Waits for nothing: cancels started prepares (their helpers then end
   without making anything) and gives back everything. *)
let unload i =
  Prim.Lock.protect i.lock (fun () ->
      collect_garbage i;
      Hashtbl.iter
        (fun _ e ->
          free_h i e.eh;
          free_h i e.ecode)
        i.entries;
      Hashtbl.clear i.entries;
      Hashtbl.iter
        (fun _ (Pending j | Ready j) ->
          Atomic.set j.cancelled true;
          release_job i j)
        i.preps;
      Hashtbl.clear i.preps;
      Hashtbl.clear i.asks;
      Hashtbl.clear i.failed;
      i.budget <- 0;
      Condition.broadcast i.cond)

(* ========================================================= the prepares *)

let make_scratch i k n = c_entry i.dev.c (kind_code k) (round_up n word)

(* -- c7n-ok-helper-staging ---------------------------------------------
   Asynchronous.  The prepare marks f, starts a helper, and as its very last
   step (no allocation after it) lets the helper go.  The helper takes a
   temporary Device staging buffer, "compiles" 30 ms, and when it publishes
   gives the staging back and makes the entry, all under the lock.  Before
   "go" the helper touches nothing; a raise before it cancels the job. *)

let staging_helper i f j =
  let rec await () =
    if Atomic.get j.cancelled then false
    else if Atomic.get j.go then true
    else begin
      Thread.delay 0.001;
      await ()
    end
  in
  match fn_of i f with
  | Some (k, n) when await () ->
      let ok =
        Prim.Lock.protect i.lock (fun () ->
            if Atomic.get j.cancelled then false
            else begin
              j.staging <- c_alloc i.dev.c true staging_bytes;
              if j.staging = 0 then begin
                undo i f j;
                false
              end
              else true
            end)
      in
      if ok then begin
        Thread.delay 0.03;
        Prim.Lock.protect i.lock (fun () ->
            if not (Atomic.get j.cancelled) then begin
              free_h i j.staging;
              j.staging <- 0;
              j.scratch <- make_scratch i k n;
              if j.scratch = 0 then undo i f j else publish i f j
            end)
      end
  | _ -> ()

let prep_helper_staging i f =
  let j = new_job () in
  match
    if Prim.Lock.protect i.lock (fun () -> Option.is_some (start_pending i f j)) then begin
      ignore (Prim.spawn (fun () -> staging_helper i f j));
      true
    end
    else false
  with
  | started -> if started then Atomic.set j.go true
  | exception e ->
      Prim.Lock.protect i.lock (fun () -> undo i f j);
      raise e

(* -- c7n-ok-code-first ---------------------------------------------------
   Synchronous, partial: makes only the entry's Device code buffer; entry
   adopts it and adds the scratch (an entry without prepare makes both). *)

let prep_code_first i f =
  let j = new_job () in
  guarded i f j (fun () ->
      match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
      | None -> ()
      | Some _ ->
          pause 2 (* reads the function's code *);
          j.code <- c_alloc i.dev.c true i.code_bytes;
          Prim.Lock.protect i.lock (fun () -> if j.code <> 0 then publish i f j else undo i f j))

(* -- c7n-ok-twice --------------------------------------------------------
   A heuristic: prepares only functions asked for twice.  The first prepare
   of f counts the ask and starts nothing; the second makes the whole entry
   (a wait, then the scratch).  The handler gives the ask back. *)

let prep_twice i f =
  let j = new_job () in
  let bumped = ref None in
  match
    let go =
      Prim.Lock.protect i.lock (fun () ->
          if not (startable i f && Option.is_some (fn_of i f)) then false
          else begin
            let c =
              match Hashtbl.find_opt i.asks f with
              | Some c -> c
              | None ->
                  let c = ref 0 in
                  Hashtbl.replace i.asks f c;
                  c
            in
            bumped := Some c;
            incr c;
            !c >= 2 && Option.is_some (start_pending i f j)
          end)
    in
    match (go, fn_of i f) with
    | true, Some (k, n) ->
        pause 3 (* compiles *);
        j.scratch <- make_scratch i k n;
        Prim.Lock.protect i.lock (fun () -> if j.scratch <> 0 then publish i f j else undo i f j)
    | _ -> ()
  with
  | () -> ()
  | exception e ->
      Prim.Lock.protect i.lock (fun () ->
          (match !bumped with Some c -> decr c | None -> ());
          undo i f j);
      raise e

(* -- c7n-ok-many-steps ---------------------------------------------------
   Synchronous, several allocations and waits: an upload buffer (temporary),
   wait, a link table, the code buffer, wait, a log line, the scratch, wait,
   the upload buffer given back, publish.  The handler undoes it all. *)

let prep_many_steps i f =
  let j = new_job () in
  let give_up () = Prim.Lock.protect i.lock (fun () -> undo i f j) in
  guarded i f j (fun () ->
      match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
      | None -> ()
      | Some (k, n) ->
          j.staging <- c_alloc i.dev.c true upload_bytes;
          if j.staging = 0 then give_up ()
          else begin
            pause 1 (* uploads the source *);
            let relocs = List.init 16 (fun x -> (x * 8, f)) in
            j.code <- c_alloc i.dev.c true i.code_bytes;
            if j.code = 0 then give_up ()
            else begin
              pause 1 (* links *);
              ignore (Sys.opaque_identity (Printf.sprintf "%s: %d relocations" f (List.length relocs)));
              j.scratch <- make_scratch i k n;
              if j.scratch = 0 then give_up ()
              else begin
                pause 1 (* verifies *);
                free_h i j.staging;
                j.staging <- 0;
                Prim.Lock.protect i.lock (fun () -> publish i f j)
              end
            end
          end)

(* -- c7n-ok-slow-helper --------------------------------------------------
   Asynchronous: the job is registered (marked) before the helper starts;
   the helper compiles 300-600 ms (checking for cancellation every 10 ms)
   and only then makes the entry, under the lock, unless cancelled. *)

let slow_helper i f j k n =
  let ms = 300 + (Hashtbl.hash f mod 301) in
  let rec nap left =
    if left > 0 && not (Atomic.get j.cancelled) then begin
      Thread.delay 0.01;
      nap (left - 10)
    end
  in
  nap ms;
  Prim.Lock.protect i.lock (fun () ->
      if not (Atomic.get j.cancelled) then begin
        j.scratch <- make_scratch i k n;
        if j.scratch = 0 then undo i f j else publish i f j
      end)

let prep_slow_helper i f =
  let j = new_job () in
  guarded i f j (fun () ->
      match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
      | None -> ()
      | Some (k, n) -> ignore (Prim.spawn (fun () -> slow_helper i f j k n)))

(* -- c7n-ok-two-buffers --------------------------------------------------
   Asynchronous, two Device buffers: a helper makes the entry's constants
   buffer, then (20 ms later) its scratch, each under the lock and only if
   the job is not cancelled.  The prepare waits (polling, at most ~50 ms) for
   the helper to take the job; a raise cancels the job and frees what the
   helper made so far. *)

let two_helper i f j k n =
  let ok =
    Prim.Lock.protect i.lock (fun () ->
        if Atomic.get j.cancelled then false
        else begin
          Atomic.set j.ack true;
          j.code <- c_alloc i.dev.c true i.code_bytes;
          if j.code = 0 then begin
            undo i f j;
            false
          end
          else true
        end)
  in
  if ok then begin
    Thread.delay 0.02;
    Prim.Lock.protect i.lock (fun () ->
        if not (Atomic.get j.cancelled) then begin
          j.scratch <- make_scratch i k n;
          if j.scratch = 0 then undo i f j else publish i f j
        end)
  end

let prep_two_buffers i f =
  let j = new_job () in
  guarded i f j (fun () ->
      match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
      | None -> ()
      | Some (k, n) ->
          ignore (Prim.spawn (fun () -> two_helper i f j k n));
          let rec w left =
            if left > 0 && not (Atomic.get j.ack) then begin
              pause 1;
              w (left - 1)
            end
          in
          w 50)

(* -- c7n-ok-budget / c7n-refund-late -------------------------------------
   A budget of the driver's own: an image holds at most budget_cap bytes of
   unclaimed prepared scratch; a prepare that would exceed it starts
   nothing.  The prepare charges its bytes when it starts; entry's claim,
   unload and the undo refund what the job holds (j.charged).
   refund-late (BROKEN): the job records its charge (j.charged) only once
   the compile reported the program's size, after the wait; the budget was
   charged before it.  A raise before that refunds 0: the budget stays
   charged, and later prepares of the image start nothing. *)

let prep_budget ~late i f =
  let j = new_job () in
  guarded i f j (fun () ->
      match
        Prim.Lock.protect i.lock (fun () ->
            match fn_of i f with
            | Some (_, n) when startable i f && i.budget + round_up n word <= budget_cap -> (
                match start_pending i f j with
                | None -> None
                | r ->
                    let b = round_up n word in
                    i.budget <- i.budget + b;
                    if not late then j.charged <- b;
                    r)
            | _ -> None)
      with
      | None -> ()
      | Some (k, n) ->
          pause 2 (* compiles; the compiler reports the size *);
          if late then j.charged <- round_up n word;
          j.scratch <- make_scratch i k n;
          Prim.Lock.protect i.lock (fun () -> if j.scratch <> 0 then publish i f j else undo i f j))

(* -- c7n-ok-creg / c7n-creg-gap ------------------------------------------
   The prepared scratch lives in a process-wide C registry, under the key
   "c7n/<image>/<f>"; entry takes it from there, unload and the undo take
   and free it.
   ok-creg: the key is built and recorded in the job first; then ONE C
   call makes the entry and records it under the key.
   creg-gap (BROKEN): makes the entry (C call 1), then builds the key (an
   OCaml allocation), then records it (C call 2).  An exception at the
   key's allocations leaves an entry recorded nowhere: the undo, which
   takes by key, finds nothing; unload neither. *)

let reg_key i f = Printf.sprintf "c7n/%d/%s" i.iid f

let prep_creg ~gap i f =
  let j = new_job () in
  guarded i f j (fun () ->
      match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
      | None -> ()
      | Some (k, n) ->
          let code = kind_code k and bytes = round_up n word in
          if gap then begin
            pause 2 (* compiles *);
            let h = c_entry i.dev.c code bytes in
            if h <> 0 then begin
              let key = reg_key i f in
              j.key <- key;
              if not (c_reg_put key h) then begin
                j.key <- "";
                free_h i h
              end
            end;
            Prim.Lock.protect i.lock (fun () -> if j.key <> "" then publish i f j else undo i f j)
          end
          else begin
            j.key <- reg_key i f;
            pause 2 (* compiles *);
            let h = c_reg_make i.dev.c code bytes j.key in
            Prim.Lock.protect i.lock (fun () -> if h <> 0 then publish i f j else undo i f j)
          end)

(* -- c7n-ok-ack-undo / c7n-keep-after-commit -----------------------------
   Synchronous: compiles (a wait), makes the entry, publishes it, then
   waits for the program cache's writer to acknowledge (a wait).
   ok-ack-undo: on any raise, the undo removes the publication if no entry
   claimed it yet.
   keep-after-commit (BROKEN): once published, the prepare's work is
   "committed": a raise after it (in the acknowledgement's wait) keeps it
   (the next entry claims it, unload gives it back), so the prepare raises
   having made f's scratch. *)

let prep_ack ~keep i f =
  let j = new_job () in
  let committed = ref false in
  let body () =
    match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
    | None -> ()
    | Some (k, n) ->
        pause 1 (* compiles *);
        j.scratch <- make_scratch i k n;
        if j.scratch = 0 then Prim.Lock.protect i.lock (fun () -> undo i f j)
        else begin
          Prim.Lock.protect i.lock (fun () -> publish i f j);
          committed := true;
          pause 2 (* the cache writer acknowledges *)
        end
  in
  match body () with
  | () -> ()
  | exception e ->
      if not (keep && !committed) then Prim.Lock.protect i.lock (fun () -> undo i f j);
      raise e

(* -- c7n-ok-failed-memo / c7n-negative-cache -----------------------------
   Synchronous; a prepare that found no memory remembers f as failed and
   does not prepare it again until an entry of f is made (entry makes it
   itself meanwhile).
   ok-failed-memo: only a genuine no-memory failure is remembered; a raise
   is undone wholly.
   negative-cache (BROKEN): the handler treats any exception as a failed
   compile and remembers f: after a raise, later prepares of f start
   nothing. *)

let prep_memo ~on_raise i f =
  let j = new_job () in
  let body () =
    match
      Prim.Lock.protect i.lock (fun () -> if Hashtbl.mem i.failed f then None else start_pending i f j)
    with
    | None -> ()
    | Some (k, n) ->
        pause 2 (* compiles *);
        j.scratch <- make_scratch i k n;
        Prim.Lock.protect i.lock (fun () ->
            if j.scratch <> 0 then publish i f j
            else begin
              undo i f j;
              Hashtbl.replace i.failed f ()
            end)
  in
  match body () with
  | () -> ()
  | exception e ->
      Prim.Lock.protect i.lock (fun () ->
          undo i f j;
          if on_raise then Hashtbl.replace i.failed f ());
      raise e

(* -- c7n-resume-partial (BROKEN) -----------------------------------------
   Synchronous, entry = code buffer + scratch: makes the code buffer, compiles
   into it (a wait), makes the scratch, publishes.  Its handler keeps a code
   buffer already compiled, published as a partial Ready "so that the next
   entry resumes from it" (entry adopts it and adds the scratch; unload
   frees it): the prepare raises having made the code buffer. *)

let prep_resume i f =
  let j = new_job () in
  let body () =
    match Prim.Lock.protect i.lock (fun () -> start_pending i f j) with
    | None -> ()
    | Some (k, n) ->
        pause 1 (* reads the code *);
        j.code <- c_alloc i.dev.c true i.code_bytes;
        if j.code = 0 then Prim.Lock.protect i.lock (fun () -> undo i f j)
        else begin
          pause 2 (* compiles into the code buffer *);
          j.scratch <- make_scratch i k n;
          Prim.Lock.protect i.lock (fun () -> if j.scratch <> 0 then publish i f j else undo i f j)
        end
  in
  match body () with
  | () -> ()
  | exception e ->
      Prim.Lock.protect i.lock (fun () ->
          match Hashtbl.find_opt i.preps f with
          | Some (Pending j') when j' == j && j.code <> 0 ->
              free_h i j.scratch;
              j.scratch <- 0;
              Hashtbl.replace i.preps f (Ready j);
              Condition.broadcast i.cond
          | _ -> undo i f j);
      raise e

(* -- c7n-deferred-free (BROKEN) ------------------------------------------
   Synchronous: compiles (a wait), makes the scratch, uploads (a wait),
   publishes.  Its handler "makes no device call from a handler": it unmarks
   f and puts what the prepare made on the image's garbage list, which the
   image's next prepare, entry or unload frees.  Until then the raise has
   left f's scratch charged. *)

let prep_deferred i f =
  let j = new_job () in
  let body () =
    match
      Prim.Lock.protect i.lock (fun () ->
          collect_garbage i;
          start_pending i f j)
    with
    | None -> ()
    | Some (k, n) ->
        pause 1 (* compiles *);
        j.scratch <- make_scratch i k n;
        if j.scratch = 0 then Prim.Lock.protect i.lock (fun () -> undo i f j)
        else begin
          pause 1 (* uploads *);
          Prim.Lock.protect i.lock (fun () -> publish i f j)
        end
  in
  match body () with
  | () -> ()
  | exception e ->
      Prim.Lock.protect i.lock (fun () ->
          Atomic.set j.cancelled true;
          (match Hashtbl.find_opt i.preps f with
          | Some (Pending j' | Ready j') when j' == j ->
              Hashtbl.remove i.preps f;
              Condition.broadcast i.cond
          | _ -> ());
          if j.scratch <> 0 then begin
            i.garbage <- j.scratch :: i.garbage;
            j.scratch <- 0
          end);
      raise e

(* ====================================================== the packages *)

module type STRATEGY = sig
  val name : string
  val code_bytes : int
  val prepare : image -> string -> unit
end

module Make (S : STRATEGY) : Package = struct
  module D = struct
    type t = dev
    type nonrec region = region
    type nonrec image = image

    exception Fault of string

    let key = S.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "c7n: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "c7n: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "c7n: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "c7n: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "c7n: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "c7n: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "c7n: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "c7n: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "c7n: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b = match parse b with Error e -> Error e | Ok fns -> Ok (new_image d fns S.code_bytes)
    let entry = entry
    let prepare = S.prepare
    let unload = unload
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

  let name = S.name
  let next_id = Atomic.make 0

  let make dname () =
    Prim.check_unheld (S.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let d = { c; id = Atomic.fetch_and_add next_id 1; dname; queue; word = None } in
        d.word <- Some { owner = d; h = 0; size = 8; kind = Word };
        d)

  let openers () =
    Prim.check_unheld (S.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ S.name ^ "0"; S.name ^ "1" ])

  let kit = Hostmem.kit
end

let driver name code_bytes prepare : string * (module Package) =
  ( name,
    (module Make (struct
      let name = name
      let code_bytes = code_bytes
      let prepare = prepare
    end)) )

(* (name, package) for every driver; [expected] says which must show the
   bug (see the table at the top). *)
let drivers : (string * (module Package)) list =
  [
    driver "c7n-ok-helper-staging" 0 prep_helper_staging;
    driver "c7n-ok-code-first" code_buffer prep_code_first;
    driver "c7n-ok-twice" 0 prep_twice;
    driver "c7n-ok-many-steps" code_buffer prep_many_steps;
    driver "c7n-ok-slow-helper" 0 prep_slow_helper;
    driver "c7n-ok-two-buffers" const_buffer prep_two_buffers;
    driver "c7n-ok-budget" 0 (prep_budget ~late:false);
    driver "c7n-ok-creg" 0 (prep_creg ~gap:false);
    driver "c7n-ok-ack-undo" 0 (prep_ack ~keep:false);
    driver "c7n-ok-failed-memo" 0 (prep_memo ~on_raise:false);
    driver "c7n-refund-late" 0 (prep_budget ~late:true);
    driver "c7n-creg-gap" 0 (prep_creg ~gap:true);
    driver "c7n-negative-cache" 0 (prep_memo ~on_raise:true);
    driver "c7n-resume-partial" code_buffer prep_resume;
    driver "c7n-keep-after-commit" 0 (prep_ack ~keep:true);
    driver "c7n-deferred-free" 0 prep_deferred;
  ]

let expected name = if String.length name >= 7 && String.sub name 0 7 = "c7n-ok-" then "conforming" else "CODE-7"

(* Clean prepares before the one probed: c7n-ok-twice's making prepare is
   the second. *)
let warmups name = if name = "c7n-ok-twice" then [ 0; 1 ] else [ 0 ]
