(* blindlk: twenty rig drivers over hostmem's device (its C stubs, hm_*,
   and its image format), each with one behaviour changed, about locks,
   signals, helper threads, finalisers and waits.  Written from
   spec/rig_edge_driver.txt, spec/clauses.tsv, spec/decisions.md and the
   edge interfaces only.  check/lkcheck shows each bug or oddity directly.

   | driver                 | what it does                                                        | clause     | the document's words it breaks (broken) / that allow it (conforming) |
   |------------------------|---------------------------------------------------------------------|------------|-----------------------------------------------------------------------|
   | lk-ok-extra-lock       | a counted device lock besides the image's: alloc, grow, entry and   | conforming | "A driver must count each lock it holds while OCaml code runs ...      |
   |                        | unload take it (image lock first, always); openers takes a global   |            | (rig_hold)"; "out of the driver's order" (one order is kept); "as      |
   |                        | lock under its mask                                                 |            | Mutex.protect does" (Prim.Lock.protect)                               |
   | lk-ok-helper           | two helper threads per device: a link probe (Prim.spawn) and a C    | conforming | "A thread the driver starts blocks them for its life"; peer answers   |
   |                        | ticker started under make's mask; stop stops the ticker, waits for  |            | "from what d and d' learned when they opened" without waiting for the  |
   |                        | neither                                                             |            | probe; stop "must not wait"                                            |
   | lk-ok-sliced           | sleep waits in 20-ms slices, each a Prim.wait of its own, checking  | conforming | "inside its waits, each of which calls rig_unblock right before its    |
   |                        | the fault between slices                                            |            | blocking step"; "It may return earlier, on ... a timer of the          |
   |                        |                                                                     |            | driver's own" (it does not even need to)                              |
   | lk-ok-shielded         | a finaliser on each device and an exit handler (with a 5-ms wait   | conforming | "Its finalisers and exit handlers block them with rig_shield, waits    |
   |                        | inside), both under Prim.shield                                     |            | included"                                                             |
   | lk-signaled-locks      | signaled takes a counted stats lock to never answer less than an    | LOCK-5     | "Driver.locate, Driver.peer and Driver.signaled check nothing and      |
   |                        | earlier read                                                        |            | must take no lock"                                                    |
   | lk-locate-faulted      | locate raises Fault for a region of a device sleep saw fault        | LOCK-6     | "rig calls locate and peer at any time, and they must call nothing     |
   |                        |                                                                     |            | that may block or fault"                                              |
   | lk-peer-waits-link     | peer spins (Thread.delay) until both opens' link probes ended,      | LOCK-6     | same sentence: "must call nothing that may block"                     |
   |                        | ~250 ms after make; no lock                                         |            |                                                                       |
   | lk-entry-unload-order  | entry takes image then device lock; unload device then image        | LOCK-8     | "a take of another driver lock out of the driver's order can make two |
   |                        |                                                                     |            | threads wait for each other for good"                                 |
   | lk-alloc-grow-order    | alloc takes device then global budget lock; grow budget then device | LOCK-8     | same sentence                                                         |
   | lk-locate-cache        | locate keeps a one-entry cache (handle, place) in two fields,       | LOCK-9     | "A function that takes no lock may be called from a callback at any   |
   |                        | written around the place's allocation: a locate from a callback     |            | point"                                                                |
   |                        | there leaves the cache pairing one region with another's place      |            |                                                                       |
   | lk-sleep-retry-masked  | sleep's first slice is a Prim.wait; the slices after it call the    | SIG-2      | "inside its waits, each of which calls rig_unblock right before its    |
   |                        | blocking stub directly, with rig's signals still blocked            |            | blocking step and rig_block right after it"                           |
   | lk-sleep-wide-wait     | the whole of sleep (fault checks, the raise of Fault) inside one    | SIG-2      | same sentence: "right before its blocking step ... right after it";   |
   |                        | Prim.wait: OCaml code runs with signals unblocked                   |            | "A signal's handler therefore runs in a driver only ... inside its     |
   |                        |                                                                     |            | waits"                                                                |
   | lk-make-half-masked    | make masks only the device's open (for its thread); builds the      | SIG-6      | "The driver's functions that start with the check of rig_holds ()     |
   |                        | device record unmasked, masks again to register it                  |            | above block signals the same way for their whole run"                 |
   | lk-openers-unmasked    | openers takes the global table lock with no mask at all             | SIG-6      | same sentence                                                         |
   | lk-fin-unshielded      | a finaliser on each device (a trace line) without Prim.shield       | SIG-7      | "Its finalisers and exit handlers block them with rig_shield"         |
   | lk-exit-unshielded     | an exit handler (statistics to $LK_STATS) without Prim.shield       | SIG-7      | same sentence                                                         |
   | lk-ticker-clean-mask   | the C ticker thread empties its own signal mask as it starts        | SIG-8      | "A thread the driver starts blocks them for its life"                 |
   | lk-make-sigmask        | make blocks exactly rig's set, but with Thread.sigmask              | SIG-9      | "A driver's OCaml code counts its locks and blocks signals through    |
   |                        |                                                                     |            | Rig_edge_primitives"                                                  |
   | lk-entry-cleanup-first | entry's hand-taken (counted) image mutex: on a raise it records the | ASYNC-2    | "must give it back first in both the return and the raise"            |
   |                        | failure (allocating) before it gives the mutex back                 |            |                                                                       |
   | lk-unload-take-early   | unload takes the (counted) image mutex, then lists the handles      | ASYNC-2    | "take each lock ... immediately before the handler that gives it      |
   |                        | (allocating) before the handler that gives it back                  |            | back, with no allocation or call in between"                          |

   Ambiguities met, and how this set reads them:

   1. LOCK-5 vs TIME-1 and LOCK-6.  Taking a lock "may block", so a lock in
      locate or peer would break LOCK-6 as well; the LOCK-5 driver therefore
      takes its lock in signaled, a lock only signaled takes and holds over an
      atomic read, so that it never waits in practice (TIME-1's "must not
      block" is read as a wait that can last, which this one cannot).
   2. LOCK-5's "no lock": hostmem's C mutex is a lock too, but the reference
      locate and signaled never reach it; the LOCK-6 drivers were kept off
      every hm_* call that takes it, so that "no lock" stays true for them.
   3. LOCK-6's "may fault" read as: locate or peer raises Fault (the driver's
      own fault), not only calls something that faults.
   4. LOCK-9 is filed as a driver-side clause with no stated duty.  Read as:
      a function that takes no lock must be safe to re-enter from a callback
      (a finaliser, a signal handler, a Memprof callback) that runs at any
      allocation inside it, i.e. keep no state whose update an allocation
      splits.  The same bug also races between threads; LOCK-6's "at any
      time" names only block and fault, so LOCK-9 is its clause.
   5. SIG-2's "each of which calls rig_unblock right before its blocking
      step": read as both (a) every blocking step of a driver call must be
      such a wait (a wait left masked breaks it) and (b) only the blocking
      step may be inside it (OCaml code in the unblocked span breaks it).
   6. SIG-6's "for their whole run": the closure allocated before the mask
      and the result after it are not judged (decisions.md); a make that
      masks twice with unmasked work in between is a break, even though each
      masked part is "blocked the same way".
   7. SIG-7: "exit handlers" read as at_exit handlers the driver registers
      (here at its first open, so that a run reaches them); a finaliser's
      closure allocated before Prim.shield is read as allowed, like SIG-6's.
   8. SIG-8 for a thread started in C: the document speaks of "a thread the
      driver starts", C or OCaml alike; a C thread that runs no OCaml still
      takes process-directed signals, so it must keep rig's set blocked.
   9. SIG-9 when the mask is right: a make that blocks exactly rig_mask's set
      with Thread.sigmask obeys SIG-6 in effect and breaks only SIG-9
      ("through Rig_edge_primitives").
  10. ASYNC-2 for a lock taken by hand (Prim.hold + Mutex.lock): read as
      obeyed when the match that gives it back follows the Mutex.lock
      directly and both branches give it back before anything else, as
      Mutex.protect does; "no allocation or call in between" forbids the
      listing of lk-unload-take-early, "give it back first" the recording of
      lk-entry-cleanup-first.
  11. LOCK-8 "the driver's order": no order is given by the document; read
      as "some single order over the driver's locks", so taking two locks in
      both orders (even on one thread, never deadlocking in a test) breaks it.
  12. Helper threads and stop: the document says stop "must not wait for
      its work"; a helper thread is read as not being the device's work, but
      lk-ok-helper's stop still waits for neither helper. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------ hostmem's device (C) *)

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

(* the ticker of blindlk_stubs.c *)
type ticker

external ticker_start : bool -> ticker = "lk_ticker_start"
external ticker_stop : ticker -> unit = "lk_ticker_stop"
external ticker_ticks : ticker -> int = "lk_ticker_ticks"
external ticker_tid : ticker -> int = "lk_ticker_tid"

(* ------------------------------------------------------ the variants *)

type variant =
  (* conforming *)
  | Ok_extra_lock
  | Ok_helper
  | Ok_sliced
  | Ok_shielded
  (* broken, one clause each *)
  | Signaled_locks  (* LOCK-5 *)
  | Locate_faulted  (* LOCK-6 *)
  | Peer_waits_link  (* LOCK-6 *)
  | Entry_unload_order  (* LOCK-8 *)
  | Alloc_grow_order  (* LOCK-8 *)
  | Locate_cache  (* LOCK-9 *)
  | Sleep_retry_masked  (* SIG-2 *)
  | Sleep_wide_wait  (* SIG-2 *)
  | Make_half_masked  (* SIG-6 *)
  | Openers_unmasked  (* SIG-6 *)
  | Fin_unshielded  (* SIG-7 *)
  | Exit_unshielded  (* SIG-7 *)
  | Ticker_clean_mask  (* SIG-8 *)
  | Make_sigmask  (* SIG-9 *)
  | Entry_cleanup_first  (* ASYNC-2 *)
  | Unload_take_early  (* ASYNC-2 *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k
let now_ms () = int_of_float (Unix.gettimeofday () *. 1000.)

(* hostmem's image format and kinds *)
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
                | None, _ -> Error (Printf.sprintf "blindlk: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindlk: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindlk: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindlk: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindlk: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindlk: not a hostmem image (no %S header)" header)

(* The signals rig_mask blocks, as system numbers: all but the fault
   signals (SIGILL 4, SIGTRAP 5, SIGABRT 6, SIGBUS 7, SIGFPE 8, SIGSEGV 11,
   SIGSYS 31).  Only lk-make-sigmask uses it. *)
let rig_set = List.filter (fun s -> not (List.mem s [ 4; 5; 6; 7; 8; 11; 31 ])) (List.init 64 (fun i -> i + 1))

(* What the library's own trace keeps (finalisers, exit handlers). *)
let trace_log : string list Atomic.t = Atomic.make []
let trace s = Atomic.set trace_log (s :: List.filteri (fun k _ -> k < 63) (Atomic.get trace_log))

module type CONFIG = sig
  val name : string
  val variant : variant
end

module Make (C : CONFIG) = struct
  let v = C.variant
  let name = C.name

  (* A lock of the driver's own, not of an image or a device: the budget of
     lk-alloc-grow-order, the device table of lk-openers-unmasked. *)
  let global = Prim.Lock.create (name ^ ".global")
  let live : (int * string) list ref = ref []  (* under [global] *)

  module D = struct
    type t = {
      c : cdev;
      id : int;
      dname : string;
      queue : queue;
      mutable word : region option;
      dlock : Prim.Lock.t;  (* Ok_extra_lock, Entry_unload_order, Alloc_grow_order *)
      stats : Prim.Lock.t;  (* Signaled_locks *)
      mutable max_seen : int;  (* under stats *)
      mutable scratch : int;  (* under dlock: bytes of scratch the entries hold *)
      mutable allocated : int;  (* under dlock *)
      fault : string option Atomic.t;  (* the fault sleep saw *)
      link_ready : bool Atomic.t;  (* Peer_waits_link, Ok_helper *)
      mutable cache_h : int;  (* Locate_cache *)
      mutable cache_place : place option;
      mutable ticker : ticker option;
    }

    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;  (* guards entries *)
      mu : Mutex.t;  (* Entry_cleanup_first, Unload_take_early: taken by hand *)
      entries : (string, int) Hashtbl.t;
      failed : (string, string) Hashtbl.t;  (* Entry_cleanup_first *)
    }

    exception Fault of string

    let key = name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindlk: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindlk: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindlk: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindlk: write of a freed region")

    let place r = { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let locate d r =
      match v with
      | Locate_faulted -> (
          (* a faulted device's memory is gone: say so rather than hand out a
             place that work can no longer use *)
          match Atomic.get d.fault with Some why -> raise (Fault why) | None -> place r)
      | Locate_cache ->
          (* rig locates the same region at every submission that names it:
             keep the last answer rather than allocate a new one each time *)
          if d.cache_h = r.h then (match d.cache_place with Some p -> p | None -> place r)
          else begin
            d.cache_h <- r.h;
            let p = place r in
            d.cache_place <- Some p;
            p
          end
      | _ -> place r

    let peer d d' =
      match v with
      | Peer_waits_link ->
          (* the answer is the one the opens learned; wait for their link
             probes to have finished learning it *)
          while not (Atomic.get d.link_ready && Atomic.get d'.link_ready) do
            Thread.delay 0.002
          done;
          true
      | _ -> true

    let raw_alloc d m n =
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let alloc d m n =
      if n <= 0 then invalid_arg "blindlk: alloc of a non-positive size";
      match v with
      | Ok_extra_lock ->
          Prim.Lock.protect d.dlock (fun () ->
              let r = raw_alloc d m n in
              if r <> None then d.allocated <- d.allocated + n;
              r)
      | Alloc_grow_order ->
          (* the device's count, then the process-wide budget *)
          Prim.Lock.protect d.dlock (fun () ->
              Prim.Lock.protect global (fun () ->
                  let r = raw_alloc d m n in
                  if r <> None then d.allocated <- d.allocated + n;
                  r))
      | _ -> raw_alloc d m n

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindlk: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindlk: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindlk: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindlk: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns ->
          Ok
            {
              dev = d;
              fns;
              lock = Prim.Lock.create (name ^ ".image");
              mu = Mutex.create ();
              entries = Hashtbl.create 8;
              failed = Hashtbl.create 1;
            }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindlk: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* hostmem's entry body, to run inside the image's lock; [charge] runs
       the scratch's charge (with the device lock where the variant has
       one). *)
    let entry_body i f charge =
      match Hashtbl.find_opt i.entries f with
      | Some h when h <> 0 -> Entry (Int64.of_int h)
      | _ -> (
          match List.assoc_opt f i.fns with
          | None -> Absent
          | Some (k, n) ->
              fits f n;
              let code = kind_code k and bytes = round_up n word in
              Hashtbl.replace i.entries f 0;
              let h = charge (fun () -> c_entry i.dev.c code bytes) bytes in
              Hashtbl.replace i.entries f h;
              if h = 0 then begin
                Hashtbl.remove i.entries f;
                No_memory (max n word)
              end
              else Entry (Int64.of_int h))

    let no_charge mk _ = mk ()

    let dev_charge d mk bytes =
      Prim.Lock.protect d.dlock (fun () ->
          let h = mk () in
          if h <> 0 then d.scratch <- d.scratch + bytes;
          h)

    let entry i f =
      match v with
      | Ok_extra_lock | Entry_unload_order ->
          (* the image's lock, then the device's: one order *)
          Prim.Lock.protect i.lock (fun () -> entry_body i f (dev_charge i.dev))
      | Entry_cleanup_first ->
          (* by hand, so that a failure is recorded for the image's
             diagnostics while the table is still ours *)
          Prim.hold ();
          Mutex.lock i.mu;
          (match entry_body i f no_charge with
          | a ->
              Mutex.unlock i.mu;
              Prim.give ();
              a
          | exception e ->
              Hashtbl.replace i.failed f (Printexc.to_string e);
              Mutex.unlock i.mu;
              Prim.give ();
              raise e)
      | Unload_take_early ->
          Prim.hold ();
          Mutex.lock i.mu;
          (match entry_body i f no_charge with
          | a ->
              Mutex.unlock i.mu;
              Prim.give ();
              a
          | exception e ->
              Mutex.unlock i.mu;
              Prim.give ();
              raise e)
      | _ -> Prim.Lock.protect i.lock (fun () -> entry_body i f no_charge)

    let prepare _ _ = ()

    let unload_body i =
      let bytes = ref 0 in
      Hashtbl.iter
        (fun f h ->
          if h <> 0 then begin
            ignore (c_free i.dev.c h);
            match List.assoc_opt f i.fns with Some (_, n) -> bytes := !bytes + round_up n word | None -> ()
          end)
        i.entries;
      Hashtbl.reset i.entries;
      !bytes

    let unload i =
      match v with
      | Ok_extra_lock ->
          Prim.Lock.protect i.lock (fun () ->
              let b = unload_body i in
              Prim.Lock.protect i.dev.dlock (fun () -> i.dev.scratch <- i.dev.scratch - b))
      | Entry_unload_order ->
          (* the device's scratch count stays consistent with the table while
             the table empties *)
          Prim.Lock.protect i.dev.dlock (fun () ->
              Prim.Lock.protect i.lock (fun () ->
                  let b = unload_body i in
                  i.dev.scratch <- i.dev.scratch - b))
      | Entry_cleanup_first ->
          Prim.hold ();
          Mutex.lock i.mu;
          (match unload_body i with
          | _ ->
              Mutex.unlock i.mu;
              Prim.give ()
          | exception e ->
              Mutex.unlock i.mu;
              Prim.give ();
              raise e)
      | Unload_take_early ->
          Prim.hold ();
          Mutex.lock i.mu;
          (* the handles first, so that the frees run over a list, not over
             the table they empty *)
          let hs = Hashtbl.fold (fun _ h acc -> if h <> 0 then h :: acc else acc) i.entries [] in
          (match
             List.iter (fun h -> ignore (c_free i.dev.c h)) hs;
             Hashtbl.reset i.entries
           with
          | () ->
              Mutex.unlock i.mu;
              Prim.give ()
          | exception e ->
              Mutex.unlock i.mu;
              Prim.give ();
              raise e)
      | _ -> Prim.Lock.protect i.lock (fun () -> ignore (unload_body i))

    let raw_grow d = match c_grow d.c with 0 -> Grown | n -> Short n

    let grow d =
      match v with
      | Ok_extra_lock -> Prim.Lock.protect d.dlock (fun () -> raw_grow d)
      | Alloc_grow_order ->
          (* the queues' blocks are charged to the process-wide budget first *)
          Prim.Lock.protect global (fun () -> Prim.Lock.protect d.dlock (fun () -> raw_grow d))
      | _ -> raw_grow d

    let signaled d =
      match v with
      | Signaled_locks ->
          (* never answer less than an earlier read: rig must not see the
             timeline go back *)
          Prim.Lock.protect d.stats (fun () ->
              let w = c_signaled d.c in
              if w > d.max_seen then d.max_seen <- w;
              d.max_seen)
      | _ -> c_signaled d.c

    let check_fault d =
      match c_fault d.c with
      | Some why ->
          Atomic.set d.fault (Some why);
          raise (Fault why)
      | None -> ()

    let slice_ms = 20

    let sleep d ~seen ~still_ms =
      match v with
      | Ok_sliced ->
          (* slices of 20 ms, each a wait of its own *)
          check_fault d;
          let deadline = now_ms () + still_ms in
          let rec go () =
            let left = deadline - now_ms () in
            if c_signaled d.c = seen && left > 0 then begin
              Prim.wait (fun () -> c_wait d.c seen (min left slice_ms));
              check_fault d;
              go ()
            end
          in
          go ()
      | Sleep_retry_masked ->
          check_fault d;
          if c_signaled d.c = seen && still_ms > 0 then begin
            let deadline = now_ms () + still_ms in
            let slice ms = Prim.wait (fun () -> c_wait d.c seen ms) in
            slice (min still_ms slice_ms);
            check_fault d;
            (* the rest of still_ms, slice by slice *)
            while c_signaled d.c = seen && deadline - now_ms () > 0 do
              c_wait d.c seen (min (deadline - now_ms ()) slice_ms);
              check_fault d
            done
          end
      | Sleep_wide_wait ->
          (* one wait for the whole sleep: signals may come in at any of its
             steps *)
          Prim.wait (fun () ->
              check_fault d;
              if c_signaled d.c = seen && still_ms > 0 then begin
                c_wait d.c seen still_ms;
                check_fault d
              end)
      | _ ->
          check_fault d;
          if c_signaled d.c = seen && still_ms > 0 then begin
            Prim.wait (fun () -> c_wait d.c seen still_ms);
            check_fault d
          end

    let stop d ~fault:_ =
      c_stop d.c true;
      match d.ticker with Some t -> ticker_stop t | None -> ()
  end

  (* ---------------------------------------------------------- package *)

  let next_id = Atomic.make 0
  let exit_registered = Atomic.make false

  let stats_line () =
    Printf.sprintf "%s: %d devices opened, %d trace lines" name (Atomic.get next_id) (List.length (Atomic.get trace_log))

  (* The library's statistics, written where LK_STATS says as the process
     exits. *)
  let at_exit_stats () =
    let s = stats_line () in
    trace s;
    match Sys.getenv_opt "LK_STATS" with
    | Some f -> (
        try
          let oc = open_out_gen [ Open_append; Open_creat ] 0o644 f in
          output_string oc (s ^ "\n");
          close_out oc
        with Sys_error _ -> ())
    | None -> ()

  let register_exit () =
    if not (Atomic.exchange exit_registered true) then
      match v with
      | Exit_unshielded -> at_exit at_exit_stats
      | Ok_shielded ->
          at_exit (fun () ->
              Prim.shield (fun () ->
                  (* let the device threads' last writes land first: a
                     wait of 5 ms, shielded like the rest *)
                  Prim.wait (fun () -> Thread.delay 0.005);
                  at_exit_stats ()))
      | _ -> ()

  let on_drop (d : D.t) =
    let s = Printf.sprintf "%s: device %s#%d dropped" name d.dname d.id in
    trace s

  let finaliser (d : D.t) =
    match v with
    | Fin_unshielded -> Gc.finalise on_drop d
    | Ok_shielded -> Gc.finalise (fun d -> Prim.shield (fun () -> on_drop d)) d
    | _ -> ()

  let helper (d : D.t) =
    match v with
    | Peer_waits_link | Ok_helper ->
        (* the link probe: what peer answers is known once it ends *)
        ignore
          (Prim.spawn (fun () ->
               Thread.delay 0.25;
               Atomic.set d.link_ready true))
    | _ -> Atomic.set d.link_ready true

  let ticker () =
    match v with
    | Ok_helper -> Some (ticker_start true)
    | Ticker_clean_mask -> Some (ticker_start false)
    | _ -> None

  let new_device dname c =
    let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
    let d =
      {
        D.c;
        id = Atomic.fetch_and_add next_id 1;
        dname;
        queue;
        word = None;
        dlock = Prim.Lock.create (name ^ ".device");
        stats = Prim.Lock.create (name ^ ".stats");
        max_seen = 0;
        scratch = 0;
        allocated = 0;
        fault = Atomic.make None;
        link_ready = Atomic.make false;
        cache_h = -1;
        cache_place = None;
        ticker = None;
      }
    in
    d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
    d

  let register_live (d : D.t) = Prim.Lock.protect global (fun () -> live := (d.id, d.dname) :: !live)

  let open_device dname =
    let d = new_device dname (c_open capacity) in
    d.ticker <- ticker ();
    helper d;
    finaliser d;
    register_exit ();
    register_live d;
    d

  let make dname () =
    Prim.check_unheld (name ^ ".make");
    match v with
    | Make_half_masked ->
        (* the mask is for the device's thread, which inherits it *)
        let c, _ptr = Prim.masked (fun () -> let c = c_open capacity in (c, c_ptr c)) in
        let d = new_device dname c in
        helper d;
        Prim.masked (fun () -> register_live d);
        d
    | Make_sigmask ->
        let old = Thread.sigmask Unix.SIG_BLOCK rig_set in
        Fun.protect ~finally:(fun () -> ignore (Thread.sigmask Unix.SIG_SETMASK old)) (fun () -> open_device dname)
    | _ -> Prim.masked (fun () -> open_device dname)

  let device_names = [ name ^ "-0"; name ^ "-1" ]

  let openers () =
    Prim.check_unheld (name ^ ".openers");
    match v with
    | Openers_unmasked ->
        (* the table of the machine's devices is the global lock's (a
           device may come or go); a list is all this builds *)
        Prim.Lock.protect global (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)
    | Ok_extra_lock ->
        Prim.masked (fun () ->
            Prim.Lock.protect global (fun () -> List.map (fun n -> { name = n; make = make n }) device_names))
    | _ -> Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = Hostmem.kit

  (* the library's own, for the check: not part of Rig_edge.Package *)
  let ticker_tid (d : D.t) = match d.ticker with Some t -> Some (ticker_tid t) | None -> None
  let ticker_ticks (d : D.t) = match d.ticker with Some t -> ticker_ticks t | None -> 0
  let busy (d : D.t) = c_busy d.c
end

(* ------------------------------------------------------------ the set *)

module type S = sig
  include Rig_edge.Package

  val ticker_tid : D.t -> int option
  val ticker_ticks : D.t -> int
  val busy : D.t -> bool
end

let drivers =
  [
    ("lk-ok-extra-lock", Ok_extra_lock, "conforming");
    ("lk-ok-helper", Ok_helper, "conforming");
    ("lk-ok-sliced", Ok_sliced, "conforming");
    ("lk-ok-shielded", Ok_shielded, "conforming");
    ("lk-signaled-locks", Signaled_locks, "LOCK-5");
    ("lk-locate-faulted", Locate_faulted, "LOCK-6");
    ("lk-peer-waits-link", Peer_waits_link, "LOCK-6");
    ("lk-entry-unload-order", Entry_unload_order, "LOCK-8");
    ("lk-alloc-grow-order", Alloc_grow_order, "LOCK-8");
    ("lk-locate-cache", Locate_cache, "LOCK-9");
    ("lk-sleep-retry-masked", Sleep_retry_masked, "SIG-2");
    ("lk-sleep-wide-wait", Sleep_wide_wait, "SIG-2");
    ("lk-make-half-masked", Make_half_masked, "SIG-6");
    ("lk-openers-unmasked", Openers_unmasked, "SIG-6");
    ("lk-fin-unshielded", Fin_unshielded, "SIG-7");
    ("lk-exit-unshielded", Exit_unshielded, "SIG-7");
    ("lk-ticker-clean-mask", Ticker_clean_mask, "SIG-8");
    ("lk-make-sigmask", Make_sigmask, "SIG-9");
    ("lk-entry-cleanup-first", Entry_cleanup_first, "ASYNC-2");
    ("lk-unload-take-early", Unload_take_early, "ASYNC-2");
  ]

let packages =
  List.map
    (fun (n, var, clause) ->
      let module M = Make (struct
        let name = n
        let variant = var
      end) in
      (n, var, clause, (module M : S)))
    drivers

let kit_more = Hostmem.kit_more
