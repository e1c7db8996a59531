(* blinds3b ("blind set s3b"): ten drivers on hostmem's device that differ
   only in sleep and what sleep uses, about SIG-3:

     "A wait's blocking step releases the OCaml runtime while it blocks, as a
      blocking stub does."  (Drivers: "... inside its waits, each of which
      calls rig_unblock right before its blocking step and rig_block right
      after it, ... and whose step releases the OCaml runtime while it
      blocks, as a blocking stub does.")

   Every sleep here checks the fault first, returns at once when the word
   already differs or still_ms is 0, runs its blocking step inside
   Rig_edge_primitives.wait (rig_unblock / rig_block around it, SIG-2),
   returns by still_ms, early on a word that moved, a stop or a fault, and
   raises Fault after the step once the device faulted (TIME-3..TIME-5).

   What "another OCaml thread" experiences below: a thread of the same
   program that wakes every millisecond (Thread.delay 0.001) while the
   driver's sleeps block on an idle device (no work, the word never moves).

   driver          | what its sleep's blocking step does                          | expected   | how the bug shows
   ----------------+--------------------------------------------------------------+------------+-----------------------------------------------
   s3b-every3rd    | every 3rd call of sleep (per driver): a C poll of the word   | SIG-3      | the other thread gets no turn for the whole
                   | every 1 ms, nanosleep between polls, runtime HELD; the other |            | still_ms of every 3rd sleep (gap = still_ms),
                   | calls: hostmem's hm_wait (released)                          |            | turns freely in the others
   s3b-shortheld   | still_ms < 25 (rig's last bit of the hang bound, or a short  | SIG-3      | no turn during the short sleeps (gap ~ still_ms
                   | ask): "cheap" spin-wait in C, 200-us nanosleeps, runtime     |            | of each short one), normal otherwise
                   | HELD; still_ms >= 25: hm_wait (released)                     |            |
   s3b-retake      | C stub: hm_wait up to 3 ms (released), then, runtime taken   | SIG-3      | ~3 ms of turns at the start of each sleep, then
                   | back to look at the device, blocks on a driver condition     |            | none for the rest of still_ms
                   | (2-ms timed waits) WITHOUT releasing it again                |            |
   s3b-slices      | OCaml loop inside one Prim.wait: C nanosleep of 3 ms with    | SIG-3      | a turn only when the runtime's 50-ms tick
                   | the runtime HELD, then a look at the word, again             |            | forces a yield at a poll point between slices:
                   |                                                              |            | gaps of ~50 ms, few turns
   s3b-halfrel     | C stub: hm_wait for still_ms/2 (released: the release spans  | SIG-3      | turns in the first half of each sleep, none in
                   | only the first half), then 1-ms nanosleeps runtime HELD      |            | the second (gap ~ still_ms/2)
   s3b-ok-short    | hm_wait for at most 2 ms, then returns (early: rig reads the | conforming | none: turns every ms; the sleeping thread holds
                   | word and sleeps again)                                       |            | the runtime only between calls
   s3b-ok-burner   | hm_wait (released), while a C pthread of the driver's own,   | conforming | none: the burner never holds the runtime (it is
                   | signals blocked, burns a CPU for as long as a sleep blocks   |            | no OCaml thread); one core busier
   s3b-ok-tiny     | C loop of 200-us nanosleeps, each inside its own blocking    | conforming | none: held only to look at the word between
                   | section (runtime released for every slice)                   |            | slices (microseconds)
   s3b-ok-eventfd  | C loop: poll(2) on the driver's eventfd (kicked at stop),     | conforming | none
                   | timeouts of <= 5 ms, inside a blocking section               |            |
   s3b-ok-sometimes| every 2nd call returns at once without blocking (no wait at  | conforming | none: the calls that do not block hold the
                   | all, allowed: "may return earlier"); the others hm_wait      |            | runtime for microseconds, like any OCaml code

   Ambiguities met in the document:
   - "releases the OCaml runtime while it blocks" does not say "for the whole
     block" or bound how long a step may hold it between sub-blocks; read
     here as: every blocking sub-step (a sleep, poll, futex or condition
     wait) runs without the runtime; holding it for microseconds between
     them to look at the device is a blocking stub's normal shape
     (s3b-ok-tiny, s3b-ok-eventfd).  A step that holds it across a
     nanosleep of 3 ms, even in a loop that lets the tick preempt it between
     slices (s3b-slices), is broken.
   - An OCaml busy loop with Thread.yield in the step: it never blocks, so by
     the letter it holds the runtime for its whole "block" but for the
     yields; in OCaml 5 Thread.yield hands the runtime to a waiting thread,
     so another thread is not starved (only a core is burnt).  No driver
     here takes that shape: the document does not say whether a yield
     counts as "releasing ... as a blocking stub does".
   - A sleep that does not block at all has no blocking step: nothing in
     SIG-3 applies, TIME-4 allows early returns ("may return earlier").
   - "the OCaml runtime": in OCaml 5 the lock is per domain; read as the
     calling domain's runtime lock (caml_enter_blocking_section).
   - A driver's own C thread that never runs OCaml (s3b-ok-burner) is not
     a wait and holds no runtime: read as outside SIG-3 (SIG-8 still asks
     that it block signals, which it does). *)

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
external c_stopped : cdev -> bool = "hm_stopped"

(* blinds3b_stubs.c *)
external s3b_held_wait : cdev -> int -> int -> int -> unit = "s3b_held_wait"
external s3b_held_nap : int -> unit = "s3b_held_nap"
external s3b_retake_wait : cdev -> int -> int -> unit = "s3b_retake_wait"
external s3b_half_wait : cdev -> int -> int -> unit = "s3b_half_wait"
external s3b_tiny_wait : cdev -> int -> int -> unit = "s3b_tiny_wait"
external s3b_efd_wait : cdev -> int -> int -> unit = "s3b_efd_wait"
external s3b_efd_kick : unit -> unit = "s3b_efd_kick"
external s3b_burn_enter : unit -> unit = "s3b_burn_enter"
external s3b_burn_leave : unit -> unit = "s3b_burn_leave"

let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

(* hostmem's image format (hostmem.ml), copied: hostmem's D is abstract. *)
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
                | None, _ -> Error (Printf.sprintf "s3b: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "s3b: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "s3b: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "s3b: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "s3b: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "s3b: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------- the waits *)

(* A blocking step: what sleep runs once it knows the word is [seen] and
   still_ms > 0.  Each calls Prim.wait around its blocking step itself (one
   of them blocks on some calls only).  [calls] counts the driver's sleeps. *)
module type STEP = sig
  val name : string
  val expected : string
  val step : cdev -> seen:int -> still_ms:int -> unit
  val at_stop : unit -> unit
end

let released c ~seen ~still_ms = Prim.wait (fun () -> c_wait c seen still_ms)

module Every3rd = struct
  let name = "s3b-every3rd"
  let expected = "SIG-3"
  let calls = Atomic.make 0

  let step c ~seen ~still_ms =
    if Atomic.fetch_and_add calls 1 mod 3 = 2 then
      (* "poll the device register": kept in C for latency; the runtime stays held *)
      Prim.wait (fun () -> s3b_held_wait c seen still_ms 1000)
    else released c ~seen ~still_ms

  let at_stop () = ()
end

module Shortheld = struct
  let name = "s3b-shortheld"
  let expected = "SIG-3"

  let step c ~seen ~still_ms =
    if still_ms < 25 then Prim.wait (fun () -> s3b_held_wait c seen still_ms 200)
    else released c ~seen ~still_ms

  let at_stop () = ()
end

module Retake = struct
  let name = "s3b-retake"
  let expected = "SIG-3"
  let step c ~seen ~still_ms = Prim.wait (fun () -> s3b_retake_wait c seen still_ms)
  let at_stop () = ()
end

module Slices = struct
  let name = "s3b-slices"
  let expected = "SIG-3"

  let step c ~seen ~still_ms =
    let deadline = Unix.gettimeofday () +. (float still_ms /. 1000.) in
    Prim.wait (fun () ->
        let rec go () =
          if c_signaled c = seen && (not (c_stopped c)) && c_fault c = None then begin
            let left = deadline -. Unix.gettimeofday () in
            if left > 0. then begin
              s3b_held_nap (min 3000 (int_of_float (left *. 1e6) + 1));
              go ()
            end
          end
        in
        go ())

  let at_stop () = ()
end

module Halfrel = struct
  let name = "s3b-halfrel"
  let expected = "SIG-3"
  let step c ~seen ~still_ms = Prim.wait (fun () -> s3b_half_wait c seen still_ms)
  let at_stop () = ()
end

module Ok_short = struct
  let name = "s3b-ok-short"
  let expected = "conforming"
  let step c ~seen ~still_ms = released c ~seen ~still_ms:(min 2 still_ms)
  let at_stop () = ()
end

module Ok_burner = struct
  let name = "s3b-ok-burner"
  let expected = "conforming"

  let step c ~seen ~still_ms =
    s3b_burn_enter ();
    Fun.protect ~finally:s3b_burn_leave (fun () -> released c ~seen ~still_ms)

  let at_stop () = ()
end

module Ok_tiny = struct
  let name = "s3b-ok-tiny"
  let expected = "conforming"
  let step c ~seen ~still_ms = Prim.wait (fun () -> s3b_tiny_wait c seen still_ms)
  let at_stop () = ()
end

module Ok_eventfd = struct
  let name = "s3b-ok-eventfd"
  let expected = "conforming"
  let step c ~seen ~still_ms = Prim.wait (fun () -> s3b_efd_wait c seen still_ms)
  let at_stop = s3b_efd_kick
end

module Ok_sometimes = struct
  let name = "s3b-ok-sometimes"
  let expected = "conforming"
  let calls = Atomic.make 0

  let step c ~seen ~still_ms =
    if Atomic.fetch_and_add calls 1 mod 2 = 0 then () (* an early return: rig sleeps again *)
    else released c ~seen ~still_ms

  let at_stop () = ()
end

(* ------------------------------------------------------------- driver *)

(* hostmem's driver (hostmem.ml), copied, with W's sleep. *)
module Make (W : STEP) : Rig_edge.Package = struct
  module D = struct
    type t = { c : cdev; name : string; queue : queue; mutable word : region option }
    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;
      entries : (string, int) Hashtbl.t;
    }

    exception Fault of string

    let key = W.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "s3b: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "s3b: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "s3b: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "s3b: write of a freed region")

    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "s3b: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "s3b: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "s3b: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map_host d p n =
      let h = c_map d.c p (round_up n page) in
      if h = 0 then raise (Fault "s3b: no host memory for the mapping");
      { owner = d; h; size = round_up n page; kind = Mapping }

    let dma _ _ ~fn =
      Error (Printf.sprintf "s3b: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create (W.name ^ ".image"); entries = Hashtbl.create 8 }

    let fits f n =
      if n > Hostmem.capacity then
        invalid_arg
          (Printf.sprintf "s3b: %s needs %d bytes of scratch, the device has %d in all" f n Hostmem.capacity)

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
    let signaled d = c_signaled d.c
    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    (* hostmem's sleep, with W's blocking step. *)
    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        W.step d.c ~seen ~still_ms;
        check_fault d
      end

    let stop d ~fault:_ =
      c_stop d.c true;
      W.at_stop ()
  end

  let name = W.name

  let make name () =
    Prim.check_unheld (W.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open Hostmem.capacity in
        let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
        let d = { D.c; name; queue; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let openers () =
    Prim.check_unheld (W.name ^ ".openers");
    Prim.masked (fun () ->
        List.map (fun n -> { name = n; make = make n }) [ W.name ^ "0"; W.name ^ "1" ])

  let kit = Hostmem.kit
end

let steps : (module STEP) list =
  [
    (module Every3rd);
    (module Shortheld);
    (module Retake);
    (module Slices);
    (module Halfrel);
    (module Ok_short);
    (module Ok_burner);
    (module Ok_tiny);
    (module Ok_eventfd);
    (module Ok_sometimes);
  ]

let drivers =
  List.map
    (fun (module W : STEP) -> (W.name, (module Make (W) : Rig_edge.Package)))
    steps

let expected = List.map (fun (module W : STEP) -> (W.name, W.expected)) steps
