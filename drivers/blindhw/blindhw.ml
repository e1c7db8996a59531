(* blindhw: hostmem with a host-visible timeline word ("hw").  Every driver
   of this set keeps its OWN word (facts.own_word) in host memory that
   blindhw_stubs.c owns, which locate answers with a working reach (Read /
   Write copies), except hw-ok-unreachable.  The word is kept up to date
   from hostmem's real word (Hostmem.D.signaled, which reads hostmem's
   internal atomic with acquire order) by three writers, all through
   hw_copy (C, release order, tickets taken before the read so that a value
   read earlier never lands after one read later):
     - a helper thread per device (Prim.spawn: signals blocked for its
       life), polling hostmem's word every 250 us while it moves, every 2 ms
       when idle, with naps that release the runtime; it ends once rig frees
       the word;
     - sleep, after its wait (the driver's completion path);
     - stop, after Hostmem.D.stop, with a forced write: when no work ran,
       hostmem wrote the last value into its word inside its stop, so ours
       holds it before stop returns (STOP-3); when work ran, hostmem's
       worker writes it once that work runs no more and the helper copies
       it.  A copy writes only when the value differs from the last one it
       wrote (or stop forces it): once hostmem's word shows its last value
       it never moves again, so nothing of ours writes after that (STOP-6),
       whatever the host wrote into the word with reach meanwhile.
   The word's memory lives as long as the OCaml value that owns it (the
   device, its region, the helper): it stays after stop until rig frees it
   and beyond (STOP-5); free of the word only stops the writers.

   Everything else is hostmem's: each driver wraps Hostmem.D (regions other
   than the word, images, grow, stop, the queue).  sleep checks the fault
   as hostmem does, returns at once if OUR word differs from seen (TIME-3),
   else waits with hostmem's wait (on hostmem's word) and then, while our
   word still lags hostmem's, in 200 us waits that release the runtime,
   never past still_ms from its entry (TIME-4), and raises the fault after
   (TIME-5).

   The table below was written BEFORE any driver was certified.  "doc:" is
   the sentence of spec/rig_edge_driver.txt relied on.

   ==== Broken: each breaks TIME-1 only.  The word's memory is always right
   (written as in hw-ok-plain); only signaled's answer lags behind it ====

   | driver              | what signaled answers                                   | clause |
   |---------------------|---------------------------------------------------------|--------|
   | hw-t1-every-nth     | a per-device cached copy, re-read from the word only    | TIME-1 |
   |                     | on every 8th call ("the word is in host memory, but     |        |
   |                     | reads are uncached and slow: sample it")                |        |
   | hw-t1-timer         | a per-device cached copy, re-read only once 4 ms have   | TIME-1 |
   |                     | passed since the last re-read ("rate-limit the poll")   |        |
   | hw-t1-per-thread    | a per-thread cached copy (a slot per Thread.id),        | TIME-1 |
   |                     | invalidated only by the driver's own writes (a          |        |
   |                     | generation bumped by each write of helper/sleep/stop):  |        |
   |                     | a write of the host through reach is never seen         |        |
   | hw-t1-sleep-submit  | a per-device cached copy refreshed only by the sleep    | TIME-1 |
   |                     | path (at its entry and exit) and the submit path (the   |        |
   |                     | queue's submit, wrapped in OCaml); after stop it reads  |        |
   |                     | the word (so that rig's frees still come)               |        |
   | hw-t1-monotonic     | the highest value it ever read from the word ("the      | TIME-1 |
   |                     | timeline never goes back"): max(cache, word)            |        |
   |   doc (all five): "signaled d is the value in d's word, read with acquire order."        |
   |   Each answers a copy taken earlier, not the value the word holds at the call.          |

   ==== Conforming: signaled is one acquire load of the word's memory,      |
   decoded by the word's layout; every verdict must be hostmem's ====

   | driver             | what differs                                          | doc relied on |
   |--------------------|-------------------------------------------------------|---------------|
   | hw-ok-plain        | the design above: 8-byte little-endian word, reach,   | "signaled d is the value in d's word, read with acquire order" (a C atomic_load_explicit acquire, noalloc stub) |
   |                    | signaled a C atomic acquire load                      |               |
   | hw-ok-lagging      | the helper copies a value of hostmem's word only 3 ms | the word is d's own (facts own_word): the document ties signaled to d's word, not to when work ended; sleep "may return earlier" / rig "reads the word again after every return"; STOP-3's write is stop's own (not lagged) or the helper's once hostmem's work ran no more |
   |                    | after it saw it, and sleep does not copy: the word    |               |
   |                    | lags the work by ~3 ms; signaled reads that word      |               |
   | hw-ok-wide         | the word region is 64 bytes (value in the first 8,    | nothing in the document sizes the driver's own word: "own_word : 'region option" is a region, locate gives its size |
   |                    | the rest zero); locate's size is 64, reach covers it  |               |
   | hw-ok-bigendian    | the value is stored big-endian 64-bit; signaled       | "the value in d's word": the layout of the driver's own word is the driver's |
   |                    | decodes it (bswap after the acquire load)             |               |
   | hw-ok-halves       | the value is stored as two 32-bit halves in swapped   | as hw-ok-bigendian (one 64-bit atomic store/load still) |
   |                    | order (high half first); signaled decodes it          |               |
   | hw-ok-unreachable  | locate of the word answers reach = None (the memory   | place.reach: "None when the host cannot reach the region"; hostmem itself answers None for its word |
   |                    | is host memory all the same)                          |               |

   Notes (changes after certification): none.  No driver was changed after
   any verdict: no fix of my own was needed, no tuning.

   What the certifier said (--seeds 3 -j 2 for broken, --seeds 1 -j 2 for
   conforming, twice each, the same both times):
   - hw-t1-every-nth, hw-t1-timer, hw-t1-sleep-submit: exactly TIME-1
     (probe.TIME-1.signaled-reads-word: the work of value 2 done, the word's
     bytes held 2, signaled answered 1 (every-nth, timer) / 0 (sleep-submit));
   - hw-t1-per-thread, hw-t1-monotonic: MISSED, hostmem's verdicts (68 pass,
     6 n/a).  Both answer the word right whenever only the driver (or its
     work) wrote it; they lag only after a write of the host through the
     word's reach, which the certifier does not make.  Checked outside the
     certifier (a small program loading blindhw.cmxs: reach Write 5 then 3
     on an idle device): per-thread answered 0 and 0, monotonic 5 and 5,
     hw-ok-plain 5 and 3;
   - every hw-ok-* driver: hostmem's verdicts (68 pass, 6 n/a).
*)

open Rig_edge
module Prim = Rig_edge_primitives
module B = Hostmem.D

type word

external word_new : int -> int -> word = "hw_word_new"
external word_load : word -> int = "hw_load" [@@noalloc]
external word_copy : word -> int -> int -> bool -> bool = "hw_copy"
external word_free : word -> unit = "hw_free"
external word_freed : word -> bool = "hw_freed" [@@noalloc]

external word_access : word -> int -> bytes -> int -> int -> bool -> unit
  = "hw_access_byte" "hw_access"

external now_us : unit -> int = "hw_now_us" [@@noalloc]
external nap_us : int -> unit = "hw_nap_us"

type signal_mode =
  | Exact  (** one acquire load of the word *)
  | Every_nth of int
  | Timer of int  (** us *)
  | Per_thread
  | Sleep_submit
  | Monotonic

type variant = {
  vname : string;
  size : int;  (** the word region's bytes *)
  layout : int;  (** 0 LE, 1 BE, 2 swapped halves (blindhw_stubs.c) *)
  reachable : bool;
  lag_us : int;  (** 0: helper copies at once, and sleep copies too *)
  mode : signal_mode;
}

let plain =
  { vname = "hw-ok-plain"; size = 8; layout = 0; reachable = true; lag_us = 0; mode = Exact }

let variants =
  [
    { plain with vname = "hw-t1-every-nth"; mode = Every_nth 8 };
    { plain with vname = "hw-t1-timer"; mode = Timer 4000 };
    { plain with vname = "hw-t1-per-thread"; mode = Per_thread };
    { plain with vname = "hw-t1-sleep-submit"; mode = Sleep_submit };
    { plain with vname = "hw-t1-monotonic"; mode = Monotonic };
    plain;
    { plain with vname = "hw-ok-lagging"; lag_us = 3000 };
    { plain with vname = "hw-ok-wide"; size = 64 };
    { plain with vname = "hw-ok-bigendian"; layout = 1 };
    { plain with vname = "hw-ok-halves"; layout = 2 };
    { plain with vname = "hw-ok-unreachable"; reachable = false };
  ]

let slots = 256

module Make (V : sig
  val v : variant
end) : Rig_edge.Package = struct
  let v = V.v

  module D = struct
    type own = { w : word; wsize : int }

    type t = {
      base : B.t;
      own : own;
      word_region : region option;  (* Some (Own own), made once at open *)
      queue : queue;
      ticket : int Atomic.t;
      gen : int Atomic.t;  (* bumped by each write of ours (Per_thread) *)
      cache : int Atomic.t;  (* Every_nth, Timer, Sleep_submit, Monotonic *)
      calls : int Atomic.t;  (* Every_nth *)
      refreshed : int Atomic.t;  (* Timer: when, in us *)
      per_thread : (int * int * int) array;  (* Per_thread: (thread id, gen, value) *)
      stopped : bool Atomic.t;
    }

    and region = Base of B.region | Own of own

    type image = B.image

    exception Fault = B.Fault

    let key = "blindhw." ^ v.vname

    let facts d =
      let f = B.facts d.base in
      { f with own_word = d.word_region; queue = d.queue }

    (* -------------------------------------------------- the word *)

    (* A copy of hostmem's word into ours: the ticket before the read. *)
    let copy ?(force = false) d =
      let k = Atomic.fetch_and_add d.ticket 1 in
      let x = B.signaled d.base in
      if word_copy d.own.w k x force then Atomic.incr d.gen

    let load d = word_load d.own.w

    let refresh d = Atomic.set d.cache (load d)

    let signaled d =
      match v.mode with
      | Exact -> load d
      | Every_nth n ->
          if Atomic.fetch_and_add d.calls 1 mod n = 0 then begin
            let x = load d in
            Atomic.set d.cache x;
            x
          end
          else Atomic.get d.cache
      | Timer us ->
          let now = now_us () in
          if now - Atomic.get d.refreshed >= us then begin
            let x = load d in
            Atomic.set d.cache x;
            Atomic.set d.refreshed now;
            x
          end
          else Atomic.get d.cache
      | Per_thread ->
          let id = Thread.id (Thread.self ()) in
          let g = Atomic.get d.gen in
          let i = id land (slots - 1) in
          let tid, g', x = d.per_thread.(i) in
          if tid = id && g' = g then x
          else begin
            let x = load d in
            d.per_thread.(i) <- (id, g, x);
            x
          end
      | Sleep_submit -> if Atomic.get d.stopped then load d else Atomic.get d.cache
      | Monotonic ->
          let x = load d and c = Atomic.get d.cache in
          if x >= c then begin
            if x > c then Atomic.set d.cache x;
            x
          end
          else c

    let access o = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > o.wsize then invalid_arg "blindhw: read out of the word";
          word_access o.w off into 0 len false
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > o.wsize then invalid_arg "blindhw: write out of the word";
          word_access o.w off (Bytes.unsafe_of_string from) 0 len true

    (* The helper: copies hostmem's word into ours while rig has not freed
       it.  With a lag, a value is copied lag_us after the helper first saw
       it (its ticket taken when it read it). *)
    let helper d () =
      let rec loop pending last_seen last_move =
        if not (word_freed d.own.w) then begin
          let now = now_us () in
          let pending, last_seen, last_move =
            if v.lag_us = 0 then begin
              let k = Atomic.fetch_and_add d.ticket 1 in
              let x = B.signaled d.base in
              if word_copy d.own.w k x false then Atomic.incr d.gen;
              (None, x, if x <> last_seen then now else last_move)
            end
            else begin
              let pending =
                match pending with
                | Some (k, x, seen_at) when now - seen_at >= v.lag_us ->
                    if word_copy d.own.w k x false then Atomic.incr d.gen;
                    None
                | p -> p
              in
              let k = Atomic.fetch_and_add d.ticket 1 in
              let x = B.signaled d.base in
              if x <> last_seen && pending = None then (Some (k, x, now), x, now)
              else (pending, last_seen, last_move)
            end
          in
          nap_us (if now - last_move < 20_000 || pending <> None then 250 else 2000);
          loop pending last_seen last_move
        end
      in
      try loop None 0 (now_us ()) with _ -> ()

    (* ------------------------------------------------ hostmem's *)

    let locate d = function
      | Base r -> B.locate d.base r
      | Own o -> { handle = 0L; size = o.wsize; reach = (if v.reachable then Some (access o) else None) }

    let peer d d' = B.peer d.base d'.base

    let alloc d m n = Option.map (fun r -> Base r) (B.alloc d.base m n)

    let free d = function Base r -> B.free d.base r | Own o -> word_free o.w

    let map_peer d d' = function
      | Base r -> Base (B.map_peer d.base d'.base r)
      | Own _ -> raise (Fault "blindhw: map_peer of the driver's word")

    let map_host d p n = Base (B.map_host d.base p n)

    let dma d r ~fn =
      match r with
      | Base r -> B.dma d.base r ~fn
      | Own _ -> Error (Printf.sprintf "blindhw: no PCI function reaches the driver's word (fn %S)" fn)

    let image d b = B.image d.base b
    let entry = B.entry
    let prepare = B.prepare
    let unload = B.unload
    let grow d = B.grow d.base

    let check_fault d = B.sleep d.base ~seen:(B.signaled d.base) ~still_ms:0

    let sleep d ~seen ~still_ms =
      if v.mode = Sleep_submit then refresh d;
      check_fault d;
      if load d = seen && still_ms > 0 then begin
        let deadline = now_us () + (still_ms * 1000) in
        B.sleep d.base ~seen ~still_ms;
        if v.lag_us = 0 then copy d;
        while
          load d = seen
          && B.signaled d.base <> seen
          && now_us () < deadline
          && not (word_freed d.own.w)
        do
          check_fault d;
          Prim.wait (fun () -> nap_us (min 200 (max 1 (deadline - now_us ()))))
        done;
        check_fault d
      end;
      if v.mode = Sleep_submit then refresh d

    let stop d ~fault =
      B.stop d.base ~fault;
      copy ~force:true d;
      Atomic.set d.stopped true
  end

  let name = v.vname

  let make (o : B.t opener) () =
    Prim.check_unheld "Blindhw.make";
    Prim.masked (fun () ->
        let base = o.make () in
        let own = { D.w = word_new v.size v.layout; wsize = v.size } in
        let bq = (B.facts base).queue in
        let cache = Atomic.make 0 in
        let queue =
          match v.mode with
          | Sleep_submit ->
              (* the submit path refreshes signaled's copy *)
              {
                bq with
                submit =
                  (fun s ~value ->
                    Atomic.set cache (word_load own.D.w);
                    bq.submit s ~value);
              }
          | _ -> bq
        in
        let d =
          {
            D.base;
            own;
            word_region = Some (D.Own own);
            queue;
            ticket = Atomic.make 0;
            gen = Atomic.make 0;
            cache;
            calls = Atomic.make 0;
            refreshed = Atomic.make (min_int / 2);
            per_thread = Array.make slots (-1, -1, 0);
            stopped = Atomic.make false;
          }
        in
        ignore (Prim.spawn (D.helper d));
        d)

  let openers () =
    Prim.check_unheld "Blindhw.openers";
    Prim.masked (fun () ->
        List.map (fun (o : B.t opener) -> { name = o.name; make = make o }) (Hostmem.openers ()))

  let kit = Hostmem.kit
end

let packages =
  List.map
    (fun v ->
      (module Make (struct
        let v = v
      end) : Rig_edge.Package))
    variants
