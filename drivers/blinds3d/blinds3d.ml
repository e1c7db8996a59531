(* blinds3d: drivers about SIG-3, written from the document alone
   (spec/rig_edge_driver.txt, spec/clauses.tsv, spec/decisions.md) and the
   installed interface.  Each driver is hostmem's (its OCaml side copied
   below, over hostmem's C device, the hm_* stubs) with [sleep], and what
   sleep uses (blinds3d_stubs.c), changed.  Everything but the blocking step
   of sleep's wait is hostmem's, so that a broken driver breaks SIG-3 and
   nothing else.

   SIG-3, clauses.tsv: "A wait's blocking step releases the OCaml runtime
   while it blocks, as a blocking stub does."  The document's sentence
   (Drivers): "... inside its waits, each of which calls rig_unblock right
   before its blocking step and rig_block right after it, whether the step
   returns or raises, and whose step releases the OCaml runtime while it
   blocks, as a blocking stub does."  Call it S3 below.

   Every blocking step of every driver runs inside Rig_edge_primitives.wait
   (so SIG-2's unblock/block stays right), returns at the latest after
   still_ms (TIME-4), and ends early when the word moves, the device faults
   or stops, as hostmem's does.  "Kept" = the step blocks while holding the
   OCaml runtime (the domain lock), in C, without caml_enter_blocking_section.

   THE TABLE (expectations written before anything was built or run; the last
   column is what the certifier said, filled in after).

   | driver                  | what its sleep's blocking step does                         | clause     | sentence broken / relied on                  | certifier said |
   |-------------------------|-------------------------------------------------------------|------------|----------------------------------------------|----------------|
   | s3d-kept-first          | polls the word every 1 ms in C with nanosleep, HOLDING the  | SIG-3      | S3: "whose step releases the OCaml runtime   | SIG-3 fail only|
   |                         | runtime, for the first 40% of still_ms; then hostmem's      | (broken)   | while it blocks": it blocks 40% holding it.  |                |
   |                         | released wait (hm_wait) for the rest.                       |            |                                              |                |
   | s3d-kept-tail           | hostmem's released wait until 500 ms before still_ms runs   | SIG-3      | S3: the final 500 ms (all of a sleep of      | SIG-3 fail only|
   |                         | out, then polls HOLDING the runtime for the final 500 ms    | (broken)   | <= 500 ms) block holding the runtime.        |                |
   |                         | (the whole sleep when still_ms <= 500).                     |            |                                              |                |
   | s3d-kept-middle         | released for the first quarter of still_ms, HOLDING for the | SIG-3      | S3: half of each unmoved sleep blocks        | SIG-3 fail only|
   |                         | middle half (a share proportional to still_ms), released    | (broken)   | holding the runtime.                         |                |
   |                         | for the last quarter.                                       |            |                                              |                |
   | s3d-kept-alternate      | per device, the 1st, 3rd, 5th ... call of sleep blocks      | SIG-3      | S3: every wait's step must release; half of  | SIG-3 fail only|
   |                         | HOLDING the runtime for the whole wait; the others are      | (broken)   | the calls' waits never do.                   |                |
   |                         | hostmem's released wait.                                    |            |                                              |                |
   | s3d-slice-reentry       | C timed condition wait in 10 ms slices; the first slice is  | SIG-3      | S3: every slice after the first blocks       | SIG-3 fail only|
   |                         | released, then the runtime is taken back to read the word   | (broken)   | holding the runtime (all but 10 ms).         |                |
   |                         | and the fault, and the retry jumps back past                |            |                                              |                |
   |                         | caml_enter_blocking_section (forgets to release again).     |            |                                              |                |
   | s3d-spin-first          | reads the word once in C; unmoved, it spins on it (busy,    | SIG-3      | S3: the spin is the wait's blocking (it      | SIG-3 fail only|
   |                         | pause instruction) HOLDING the runtime for half of          | (broken)   | waits for the word) and holds the runtime.   |                |
   |                         | still_ms, then hostmem's released wait for the rest.        |            |                                              |                |
   | s3d-retake-poll         | a C loop: hm_wait released for 10 ms, takes the runtime     | SIG-3      | S3: about half of every wait blocks in the   | SIG-3 fail only|
   |                         | back to poll the word and fault, then nanosleeps 10 ms      | (broken)   | nanosleep holding the runtime.               |                |
   |                         | STILL HOLDING it; repeats (about 50% kept throughout).      |            |                                              |                |
   | s3d-ok-helper-thread    | hostmem's sleep; but each open device runs an OCaml thread  | conforming | S3 is about the wait's step only; "A thread  | SIG-3 pass;    |
   |                         | of the driver's (Prim.spawn) that computes, allocating and  |            | the driver starts blocks them for its life"  | TIME-4 failed  |
   |                         | Thread.yield-ing, from make until stop (so the runtime is   |            | (SIG-8) is all that is asked of it.          | in 1 of 3 full |
   |                         | busy, though not held by the sleeper, during every sleep).  |            |                                              | runs (load)    |
   | s3d-ok-c-burner         | hostmem's sleep; while any device of the driver is open, a  | conforming | S3 (about the runtime, not the CPU); SIG-8   | all pass       |
   |                         | C pthread of the driver's (signals blocked) burns a CPU in  |            | for the thread.                              |                |
   |                         | a busy loop, never touching the OCaml runtime.              |            |                                              |                |
   | s3d-ok-short-waits      | many short released waits: hostmem's hm_wait for at most    | conforming | S3 "releases the OCaml runtime while it      | all pass       |
   |                         | 2 ms at a time, in a C loop that takes the runtime back     |            | blocks": between the waits it does not       |                |
   |                         | briefly between them to read the word and the fault.        |            | block, it reads the word.                    |                |
   | s3d-ok-timer-slack      | hostmem's released wait, asked for still_ms - s with the    | conforming | S3 (released); TIME-4 "must return ... at    | all pass       |
   |                         | thread's timer slack (prctl PR_SET_TIMERSLACK) set to s =   |            | the latest after still_ms": the oversleep    |                |
   |                         | still_ms/2 (at most 250 ms), so the C wait oversleeps its   |            | stays within it.                             |                |
   |                         | timeout by up to s; slack restored after.                   |            |                                              |                |
   | s3d-ok-early-return     | released wait (hm_wait); two calls in three return early,   | conforming | Timeline: "It may return earlier, on an      | all pass       |
   |                         | after at most 1-4 ms (a timer of the driver's own).         |            | event of other work or a timer of the        |                |
   |                         |                                                             |            | driver's own".                               |                |
   | s3d-ok-released-spin    | spins (busy, burning the CPU) on the clock for at most 1 ms | conforming | S3: the spin blocks (waits) with the runtime | all pass       |
   |                         | at a time inside caml_enter/leave_blocking_section, taking  |            | released; only the word reads between spins  |                |
   |                         | the runtime back only to read the word and the fault.       |            | hold it.                                     |                |

   What the certifier said: the last column above, in short; in full in the
   section "RESULTS" right after this table.

   RESULTS (filled in after the runs; nothing was changed after them)
   Built at 15:15 UTC with the commands of the brief; certified with --seeds 1
   -j 3, first --only SIG-3, then every clause, one driver at a time, then
   --only SIG-3 --seeds 3 again.  The machine was loaded by another run (load
   average 20-36 on 2 cores) during all of them.  Every full certification:
   74 clauses, 6 n/a (the bus clauses and the like, as for hostmem), 0
   unchecked.  SIG-3's case is probe.SIG-3.wait-releases-runtime: 6 sleeps of
   about 56 ms each with the word unmoved, while another OCaml thread waits
   for the runtime; "kept" below is the time it waited, of the sleeps' total.
   - s3d-kept-first: SIG-3 fail (kept 134 ms of 337, 40%), 67 pass; same
     with 3 seeds.  Expected.
   - s3d-kept-tail: SIG-3 fail (kept 334 ms of 338: the probe's sleeps are
     shorter than the 500 ms tail, so every sleep is kept whole), 67 pass.
     Expected.
   - s3d-kept-middle: SIG-3 fail (kept 165 ms of 337, 49%), 67 pass.
     Expected.
   - s3d-kept-alternate: SIG-3 fail (kept 199 ms of 337, about half the
     calls), 67 pass.  Expected.
   - s3d-slice-reentry: SIG-3 fail (kept 275 ms of 339, 81%: all but the
     first 10 ms slice of each 56 ms sleep), 67 pass.  Expected.
   - s3d-spin-first: SIG-3 fail (kept 161 ms of 332, 48%), 67 pass.
     Expected.
   - s3d-retake-poll: SIG-3 fail (kept 161 ms of 340, 47%), 67 pass.
     Expected.
   - s3d-ok-helper-thread: SIG-3 pass (1 seed, then 3 seeds).  Its first full
     certification failed TIME-4 ("with work hanging, sleep ~seen:0
     ~still_ms:562 returned after 988 ms, and again ~still_ms:551 after 849
     ms", case probe.TIME-4.bounded-sleep, seed 1); its replay (3 times) and
     two more full certifications right after passed every clause (68 pass,
     0 fail).  Not changed.  My reading: hostmem's released wait ends on time,
     but the sleeping thread must take the runtime back from the helper
     thread, which holds it between its yields; on a machine that overloaded
     (2 cores, load ~30) the helper can be descheduled while it holds it, so
     the return comes late.  Whether that late return is the driver's TIME-4
     fault (its own thread delays sleep's return) or an artefact of the load
     is one of the ambiguities below; it is intermittent, not a SIG-3 verdict.
   - s3d-ok-c-burner: all 68 pass (SIG-3 pass with 1 and 3 seeds).  Expected.
   - s3d-ok-short-waits: all 68 pass.  Expected.
   - s3d-ok-timer-slack: all 68 pass.  Expected.
   - s3d-ok-early-return: all 68 pass.  Expected.
   - s3d-ok-released-spin: all 68 pass.  Expected.

   AMBIGUITIES of the document met, and how they are read here:
   - "while it blocks": the document does not say what counts as blocking
     inside a step.  Read as: every stretch of the step in which it waits
     for the word, an event or time to pass (a syscall sleep, a condition
     wait, a busy spin on the word or the clock).  So a spin that holds the
     runtime breaks SIG-3 (s3d-spin-first), and a spin with the runtime
     released conforms (s3d-ok-released-spin).  The instants where a step
     runs to read the word between two released waits are not blocking, so
     taking the runtime back for them conforms (s3d-ok-short-waits,
     s3d-ok-released-spin); nanosleeping while it holds it is blocking
     (s3d-retake-poll).
   - SIG-3 states no share: "releases ... while it blocks" is read as all of
     the blocking, so any kept part breaks it.  The kept parts here are made
     large (>= 40% of an unmoved sleep, or whole sleeps on half the calls)
     so that a checker can see them; a sleep that ends early on the word
     may keep less (s3d-kept-tail keeps nothing when the word moves before
     its final 500 ms).
   - "as a blocking stub does": read as caml_enter_blocking_section /
     caml_leave_blocking_section around the blocking call (releasing the
     domain's runtime lock, so that the domain's other threads run and
     other domains' stop-the-world sections proceed).
   - The document speaks of "a wait's blocking step" only: a thread of the
     driver that holds the runtime while it computes (s3d-ok-helper-thread)
     or one that burns a CPU outside the runtime (s3d-ok-c-burner) is not a
     wait and is read as conforming; only SIG-8 (its signals blocked) is
     asked of such a thread.
   - The document bounds sleep by still_ms (TIME-4) and allows early
     returns; it says nothing about how precisely a C wait keeps its own
     timeout.  An oversleep of the C wait that still returns within
     still_ms is read as conforming (s3d-ok-timer-slack).  The thread's
     timer slack is restored before the step returns, since the calling
     thread is rig's.
   - Blocking that is not inside a wait of the primitives would break SIG-2
     (no rig_unblock before it) as well; so every blocking of every driver
     here, kept or not, is inside Rig_edge_primitives.wait's step, and the
     broken drivers break S3's last part alone.
   - A driver thread that computes holds the runtime between its yields, and
     a sleep whose wait ended must take it back before it returns: the
     document bounds sleep's return by still_ms (TIME-4) but says nothing of
     the driver's other threads delaying it.  Read here as conforming as long
     as the thread yields often (s3d-ok-helper-thread yields every few tens
     of microseconds of work); the one late return seen came under heavy
     machine load (see RESULTS).
   - "every other call" (s3d-kept-alternate) counts sleep calls per device
     that reach the wait (not those that return at once because the word
     already differs or still_ms is 0); the first such call is kept. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

(* hostmem's device: hostmem_stubs.c, linked into the plugin. *)
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
external c_stopped : cdev -> bool = "hm_stopped"

(* blinds3d's own (blinds3d_stubs.c): the blocking steps of the sleeps. *)

(* The monotonic clock, in ms. *)
external c_now_ms : unit -> int = "s3d_now_ms" [@@noalloc]

(* [c_kept_wait c seen ms] polls the word (and fault, stop) every 1 ms for
   [ms] ms, nanosleeping WITH the runtime held; true if the wait is over
   (word moved, fault, stop), false if [ms] ran out. *)
external c_kept_wait : cdev -> int -> int -> bool = "s3d_kept_wait"

external c_spin_first : cdev -> int -> int -> unit = "s3d_spin_first"
external c_slice_reentry : cdev -> int -> int -> unit = "s3d_slice_reentry"
external c_retake_poll : cdev -> int -> int -> unit = "s3d_retake_poll"
external c_short_waits : cdev -> int -> int -> unit = "s3d_short_waits"
(* [c_slack_set ms] sets the calling thread's timer slack to [ms] ms and
   answers the slack it had (ns); [c_slack_restore ns] gives it back. *)
external c_slack_set : int -> int = "s3d_slack_set" [@@noalloc]
external c_slack_restore : int -> unit = "s3d_slack_restore" [@@noalloc]
external c_released_spin : cdev -> int -> int -> unit = "s3d_released_spin"

(* The CPU burner of s3d-ok-c-burner: a ticket per open device; the burner
   thread runs while any ticket is active. *)
type ticket

external c_burner_take : unit -> ticket = "s3d_burner_take"
external c_burner_drop : ticket -> unit = "s3d_burner_drop"

(* ---------------------------------------------------------- constants *)

let capacity = 4 lsl 20
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format, a text of lines:

     hostmem-image 1
     <function name> <kind> <scratch bytes>
     ...

   kind is one of nop (touches its scratch), spin (busy for argument 0
   milliseconds), fault (makes the device fault), hang (never ends),
   refuse (a submit of its launch fails). *)

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
                | None, _ -> Error (Printf.sprintf "hostmem: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "hostmem: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "hostmem: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "hostmem: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "hostmem: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "hostmem: not a hostmem image (no %S header)" header)

(* ---------------------------------------------------------------- kit *)

let binary =
  String.concat "\n" [ header; "spin spin 0"; "fault fault 0"; "hang hang 0"; "nop nop 64"; "" ]

let kit =
  {
    binary;
    refused_binary = Some "\x7fELF not a hostmem image";
    spin = Some "spin";
    fault = Some "fault";
    hang = Some "hang";
    scratch = Some (fun n -> (Printf.sprintf "%s\nwork nop %d\n" header n, "work"));
    bus_function = None;
    bus_agent = None;
  }

let kit_more =
  let scratch_functions sizes =
    let names = List.mapi (fun k _ -> Printf.sprintf "work%d" k) sizes in
    (String.concat "\n" (header :: List.map2 (Printf.sprintf "%s nop %d") names sizes) ^ "\n", names)
  in
  Rig_edge.kit_more ~refused_launch:(binary ^ "refuse refuse 0\n", "refuse") ~scratch_functions ()

(* ----------------------------------------------------------- variants *)

(* What changes from driver to driver: the blocking step of sleep's wait,
   and state a device keeps for it from its open to its stop. *)
module type VARIANT = sig
  val name : string

  type state

  (* At the device's open, inside make's masked section. *)
  val opened : cdev -> state

  (* The blocking step, run inside Prim.wait, on a device whose word read
     [seen] and with still_ms > 0.  Returns at the latest after still_ms. *)
  val step : state -> cdev -> seen:int -> still_ms:int -> unit

  (* At the device's stop, after hostmem's. *)
  val stopped : state -> unit
end

(* Whether the wait is over: the word moved, the device faulted or stopped.
   c_fault allocates only once the device has faulted. *)
let ended c seen = c_signaled c <> seen || c_stopped c || c_fault c <> None

(* The rest of [still_ms] counted from [deadline], released (hostmem's). *)
let released_until c seen deadline =
  let left = deadline - c_now_ms () in
  if left > 0 then c_wait c seen left

module Kept_first = struct
  let name = "s3d-kept-first"

  type state = unit

  let opened _ = ()
  let stopped () = ()

  let step () c ~seen ~still_ms =
    let deadline = c_now_ms () + still_ms in
    if not (c_kept_wait c seen (still_ms * 2 / 5)) then released_until c seen deadline
end

module Kept_tail = struct
  let name = "s3d-kept-tail"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  let tail_ms = 500

  let step () c ~seen ~still_ms =
    let deadline = c_now_ms () + still_ms in
    let first = still_ms - tail_ms in
    if first > 0 then c_wait c seen first;
    if not (ended c seen) then begin
      let left = deadline - c_now_ms () in
      if left > 0 then ignore (c_kept_wait c seen left)
    end
end

module Kept_middle = struct
  let name = "s3d-kept-middle"

  type state = unit

  let opened _ = ()
  let stopped () = ()

  let step () c ~seen ~still_ms =
    let deadline = c_now_ms () + still_ms in
    let quarter = still_ms / 4 in
    if quarter > 0 then c_wait c seen quarter;
    if not (ended c seen) then
      if not (c_kept_wait c seen (still_ms / 2)) then released_until c seen deadline
end

module Kept_alternate = struct
  let name = "s3d-kept-alternate"

  type state = int Atomic.t  (* the calls that reached the wait *)

  let opened _ = Atomic.make 0
  let stopped _ = ()

  let step n c ~seen ~still_ms =
    if Atomic.fetch_and_add n 1 land 1 = 0 then ignore (c_kept_wait c seen still_ms) else c_wait c seen still_ms
end

module Spin_first = struct
  let name = "s3d-spin-first"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  let step () c ~seen ~still_ms = c_spin_first c seen still_ms
end

module Slice_reentry = struct
  let name = "s3d-slice-reentry"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  let step () c ~seen ~still_ms = c_slice_reentry c seen still_ms
end

module Retake_poll = struct
  let name = "s3d-retake-poll"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  let step () c ~seen ~still_ms = c_retake_poll c seen still_ms
end

(* The helper: computes, allocating and yielding, until the device stops
   or is collected (it holds the device's C block only weakly). *)
let helper (stop : bool Atomic.t) (dev : cdev Weak.t) () =
  let acc = ref 0 and i = ref 0 in
  while (not (Atomic.get stop)) && Weak.check dev 0 do
    for _ = 1 to 16 do
      let l = List.init 256 (fun k -> k lxor !i) in
      acc := !acc + List.fold_left ( + ) 0 l;
      incr i
    done;
    Thread.yield ()
  done;
  ignore (Sys.opaque_identity !acc)

module Ok_helper_thread = struct
  let name = "s3d-ok-helper-thread"

  type state = bool Atomic.t

  let opened c =
    let stop = Atomic.make false in
    let dev = Weak.create 1 in
    Weak.set dev 0 (Some c);
    ignore (Prim.spawn (helper stop dev) : Thread.t);
    stop

  let stopped stop = Atomic.set stop true
  let step _ c ~seen ~still_ms = c_wait c seen still_ms
end

module Ok_c_burner = struct
  let name = "s3d-ok-c-burner"

  type state = ticket

  let opened _ = c_burner_take ()
  let stopped t = c_burner_drop t
  let step _ c ~seen ~still_ms = c_wait c seen still_ms
end

module Ok_short_waits = struct
  let name = "s3d-ok-short-waits"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  let step () c ~seen ~still_ms = c_short_waits c seen still_ms
end

module Ok_timer_slack = struct
  let name = "s3d-ok-timer-slack"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  (* The slack is the calling thread's (rig's): given back on both paths (a
     signal's handler may raise out of the wait). *)
  let step () c ~seen ~still_ms =
    if still_ms < 20 then c_wait c seen still_ms
    else begin
      let slack = min (still_ms / 2) 250 in
      let old = c_slack_set slack in
      match c_wait c seen (still_ms - slack) with
      | () -> c_slack_restore old
      | exception e ->
          c_slack_restore old;
          raise e
    end
end

module Ok_early_return = struct
  let name = "s3d-ok-early-return"

  type state = int Atomic.t

  let opened _ = Atomic.make 0
  let stopped _ = ()

  let step n c ~seen ~still_ms =
    let k = Atomic.fetch_and_add n 1 in
    if k mod 3 = 0 then c_wait c seen still_ms else c_wait c seen (min still_ms (1 + (k mod 4)))
end

module Ok_released_spin = struct
  let name = "s3d-ok-released-spin"

  type state = unit

  let opened _ = ()
  let stopped () = ()
  let step () c ~seen ~still_ms = c_released_spin c seen still_ms
end

(* ------------------------------------------------------------- driver *)

(* hostmem's driver and package, copied; only sleep's blocking step, the
   variant's state in the device, the names and stop's last line differ. *)
module Make (V : VARIANT) : Rig_edge.Package = struct
  module D = struct
    type t = {
      c : cdev;
      queue : queue;
      s : V.state;
      mutable word : region option;  (* set once at open *)
    }

    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;  (* guards entries *)
      entries : (string, int) Hashtbl.t;  (* f -> handle *)
    }

    exception Fault of string

    let key = V.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "hostmem: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "hostmem: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "hostmem: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "hostmem: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "hostmem: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "hostmem: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "hostmem: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "hostmem: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "hostmem: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create (V.name ^ ".image"); entries = Hashtbl.create 8 }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "hostmem: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* hostmem's entry: the slot is made before the scratch is charged and
       filled in place after, so that no allocation comes between the charge
       and its record. *)
    let entry i f =
      Prim.Lock.protect i.lock (fun () ->
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

    let prepare _ _ = ()

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          Hashtbl.iter (fun _ h -> if h <> 0 then ignore (c_free i.dev.c h)) i.entries;
          Hashtbl.reset i.entries)

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n

    (* No lock, no wait (TIME-1, LOCK-5). *)
    let signaled d = c_signaled d.c

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    (* hostmem's sleep, but for the blocking step, which is the variant's. *)
    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> V.step d.s d.c ~seen ~still_ms);
        check_fault d
      end

    let stop d ~fault:_ =
      c_stop d.c true;
      V.stopped d.s
  end

  let name = V.name

  (* hostmem's make; the device keeps no id nor name here (nothing reads
     them: the library's own functions of hostmem are not copied). *)
  let make _name () =
    Prim.check_unheld (V.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity in
        let ptr = c_ptr c in
        let queue = c_queue ~fns:(c_fns ()) ~dev:ptr ~may_block:true in
        let s = V.opened c in
        let d = { D.c; queue; s; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let openers () =
    Prim.check_unheld (V.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ V.name ^ "0"; V.name ^ "1" ])

  let kit = kit
end

let pack (module V : VARIANT) = (V.name, (module Make (V) : Rig_edge.Package))

let drivers =
  List.map pack
    [
      (module Kept_first : VARIANT);
      (module Kept_tail : VARIANT);
      (module Kept_middle : VARIANT);
      (module Kept_alternate : VARIANT);
      (module Slice_reentry : VARIANT);
      (module Spin_first : VARIANT);
      (module Retake_poll : VARIANT);
      (module Ok_helper_thread : VARIANT);
      (module Ok_c_burner : VARIANT);
      (module Ok_short_waits : VARIANT);
      (module Ok_timer_slack : VARIANT);
      (module Ok_early_return : VARIANT);
      (module Ok_released_spin : VARIANT);
    ]
