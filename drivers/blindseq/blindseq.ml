(* blindseq: hostmem (drivers/hostmem) with one behaviour changed per driver,
   each wrong only after a particular sequence or interleaving of otherwise
   ordinary calls: the state machines, counters and caches real drivers get
   wrong.  Every driver wraps Hostmem's public interface: its device, kit
   and openers are hostmem's, and only the functions named in its comment
   differ.  The table of bugs and their shortest sequences is in
   tests/test_blind_seq.py.

   Broken (each breaks one clause of spec/rig_edge_driver.txt, only after
   its sequence):
   bq-free-after-refusal   the first free after a refused image pushes the
                           region twice on a reuse cache: the next two allocs
                           of that memory and size share its bytes       MEM-2
   bq-stop-last-good       stop publishes the last value of a successful
                           submit when the last submit failed after two or
                           more good ones                                STOP-3
   bq-fault-polled-away    two signaled calls after a fault, before any
                           sleep, consume the fault's report             TIME-5
   bq-peer-ring            peer answers from a ring of the last three
                           opens: false once three opens came after d'   MEM-4
   bq-entry-prepare-flush  a prepare of another function between two
                           entries of f makes the second remake f        CODE-2
   bq-map-host-recount     a second map_host of the same pages, whose end
                           is a page boundary, maps one page short       MEM-7
   bq-grow-forgotten       room answers RIG_GROW again after Grown when
                           another thread's room or grow came between    QUEUE-2
   bq-prepare-after-unload a prepare of an f with an entry made before an
                           unload of another image of the device compiles
                           f again                                       CODE-7
   Conforming (history-dependent as the document allows):
   bq-ok-sleep-every-third sleep returns at once on every third call
   bq-ok-mapped-aperture   alloc of Mapped is None while 8 Mapped regions
                           are live
   bq-ok-device-pinned-by-peer  alloc of Device is None while another
                           device maps some of this one's memory *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem

external nap : int -> unit = "blindseq_nap"

let page = 4096
let round_up x k = (x + k - 1) / k * k
let no_value = min_int

(* ----------------------------------------------- lock-free list cells *)

let rec push a x =
  let l = Atomic.get a in
  if not (Atomic.compare_and_set a l (x :: l)) then push a x

(* Removes the first element that satisfies p; returns it. *)
let rec take a p =
  let l = Atomic.get a in
  match List.find_opt p l with
  | None -> None
  | Some x ->
      let rec drop = function [] -> [] | y :: t -> if y == x then t else y :: drop t in
      if Atomic.compare_and_set a l (drop l) then Some x else take a p

(* ------------------------------------------------------------- types *)

(* A region of hostmem's that the reuse cache of bq-free-after-refusal holds
   (pushed [copies] times) and that [refs] live regions stand for. *)
type cached = { cr : H.D.region; csize : int; cmem : memory; refs : int Atomic.t; copies : int Atomic.t }

type region = {
  r : H.D.region;
  size : int;
  made_by : memory option;  (* Some m: alloc of m made it *)
  alias : cached option;  (* handed out from the reuse cache *)
  aperture : bool;  (* counts against bq-ok-mapped-aperture's Mapped regions *)
  pinned : st option;  (* a map_peer of bq-ok-device-pinned-by-peer: the state of the device it maps *)
}

(* Every driver's device state; each driver reads the fields of its bug. *)
and st = {


  ord : int;  (* the open's number in this process *)
  refused : bool Atomic.t;  (* an image was refused since the last free *)
  cache : cached list Atomic.t;
  good_run : int Atomic.t;  (* successful submits since the last failed one *)
  last_good : int Atomic.t;
  last_failed : bool Atomic.t;
  published : int Atomic.t;  (* what signaled answers after stop, or no_value *)
  fault_raised : bool Atomic.t;
  fault_polls : int Atomic.t;
  fault_lost : bool Atomic.t;
  grown : int list Atomic.t;  (* threads whose grow answered Grown *)
  last_actor : int Atomic.t;  (* the last thread that called room or grow *)
  mapped_pages : (nativeint * int) list Atomic.t;
  mapped_live : int Atomic.t;
  sleeps : int Atomic.t;
  peer_maps : int Atomic.t;  (* live map_peer regions of other devices over this one's memory *)
  unloads : int Atomic.t;  (* images of the device unloaded so far *)
}

type t = { h : H.D.t; st : st; word : region; queue : queue }
type image = {
  hi : H.D.image;
  owner : st;  (* its device's *)
  last_prep : string option Atomic.t;
  entered : string list Atomic.t;
  entered_at : (string * int) list Atomic.t;  (* f, and its device's unloads when f's entry was made *)
}

let opens = Atomic.make 0

let new_st () =
  {
    ord = Atomic.fetch_and_add opens 1;
    refused = Atomic.make false;
    cache = Atomic.make [];
    good_run = Atomic.make 0;
    last_good = Atomic.make no_value;
    last_failed = Atomic.make false;
    published = Atomic.make no_value;
    fault_raised = Atomic.make false;
    fault_polls = Atomic.make 0;
    fault_lost = Atomic.make false;
    grown = Atomic.make [];
    last_actor = Atomic.make (-1);
    mapped_pages = Atomic.make [];
    mapped_live = Atomic.make 0;
    sleeps = Atomic.make 0;
    peer_maps = Atomic.make 0;
    unloads = Atomic.make 0;
  }

let plain ?made_by r size = { r; size; made_by; alias = None; aperture = false; pinned = None }

(* ---------------------------------------------- hostmem, as it is *)

module Base = struct
  type nonrec t = t
  type nonrec region = region
  type nonrec image = image

  exception Fault = H.D.Fault

  let key = "blindseq"
  let facts d = { (H.D.facts d.h) with own_word = Some d.word; queue = d.queue }
  let locate d x = H.D.locate d.h x.r
  let peer d d' = H.D.peer d.h d'.h

  let alloc d m n =
    match H.D.alloc d.h m n with None -> None | Some r -> Some (plain ~made_by:m r n)

  let free d x = H.D.free d.h x.r
  let map_peer d d' x = plain (H.D.map_peer d.h d'.h x.r) x.size
  let map_host d p n = plain (H.D.map_host d.h p n) (round_up n page)
  let dma d x ~fn = H.D.dma d.h x.r ~fn

  let image d b =
    match H.D.image d.h b with
    | Error e -> Error e
    | Ok hi ->
        Ok { hi; owner = d.st; last_prep = Atomic.make None; entered = Atomic.make []; entered_at = Atomic.make [] }

  let entry i f = H.D.entry i.hi f
  let prepare i f = H.D.prepare i.hi f
  let grow d = H.D.grow d.h
  let signaled d = H.D.signaled d.h
  let sleep d ~seen ~still_ms = H.D.sleep d.h ~seen ~still_ms
  let stop d ~fault = H.D.stop d.h ~fault
  let unload i = H.D.unload i.hi
end

(* Openers of hostmem's devices, each wrapped with its state; [wrap] makes
   the device's queue from hostmem's. *)
let openers ~wrap () =
  Prim.check_unheld "Blindseq.openers";
  Prim.masked (fun () ->
      List.map
        (fun (o : H.D.t opener) ->
          let make () =
            Prim.check_unheld "Blindseq.make";
            Prim.masked (fun () ->
                let h = o.make () in
                let st = new_st () in
                let f = H.D.facts h in
                let word =
                  match f.own_word with Some w -> plain w 8 | None -> failwith "blindseq: hostmem has no word"
                in
                { h; st; word; queue = wrap st f.queue })
          in
          { name = o.name; make })
        (H.openers ()))

let same_queue _ q = q

(* ------------------------------------------------------------ broken *)

(* MEM-2.  A refused image leaves the driver's "last error" path holding the
   next freed region: that free pushes it on the reuse cache twice (once for
   the error path's cleanup, once for the free), without giving it back to
   hostmem.  The next two allocs of the same memory and size both pop it. *)
module Free_after_refusal = struct
  include Base

  let image d b =
    match Base.image d b with
    | Error _ as e ->
        Atomic.set d.st.refused true;
        e
    | ok -> ok

  let release d c =
    let left = Atomic.fetch_and_add c.refs (-1) - 1 in
    if left = 0 && Atomic.get c.copies = 0 then H.D.free d.h c.cr

  let free d x =
    match (x.alias, x.made_by) with
    | Some c, _ -> release d c
    | None, Some m when Atomic.exchange d.st.refused false ->
        let c = { cr = x.r; csize = x.size; cmem = m; refs = Atomic.make 0; copies = Atomic.make 2 } in
        push d.st.cache c;
        push d.st.cache c
    | None, _ -> Base.free d x

  let alloc d m n =
    match take d.st.cache (fun c -> c.cmem = m && c.csize = n) with
    | Some c ->
        Atomic.decr c.copies;
        Atomic.incr c.refs;
        Some { r = c.cr; size = n; made_by = Some m; alias = Some c; aperture = false; pinned = None }
    | None -> Base.alloc d m n
end

(* STOP-3.  The driver remembers the value of its last successful submit as
   the "final" value; after a failed submit that followed two or more good
   ones, stop's publication is that value instead of the failed submit's.
   (After a failed first or second submit it is right.) *)
let stop_queue st (q : queue) =
  {
    q with
    submit =
      (fun s ~value ->
        let ok = q.submit s ~value in
        if ok then begin
          if Atomic.exchange st.last_failed false then Atomic.set st.good_run 0;
          Atomic.incr st.good_run;
          Atomic.set st.last_good value
        end
        else Atomic.set st.last_failed true;
        ok);
  }

module Stop_last_good = struct
  include Base

  let stop d ~fault =
    if Atomic.get d.st.last_failed && Atomic.get d.st.good_run >= 2 then
      Atomic.set d.st.published (Atomic.get d.st.last_good);
    Base.stop d ~fault

  let signaled d =
    let p = Atomic.get d.st.published in
    if p <> no_value then p else H.D.signaled d.h
end

(* TIME-5.  signaled drains the device's event ring to refresh its view; the
   second drain after a fault drops the fault's report without recording it,
   so a sleep after two such signaled calls never raises. *)
module Fault_polled_away = struct
  include Base

  let faulted d = try H.D.sleep d.h ~seen:0 ~still_ms:0; false with H.D.Fault _ -> true

  let signaled d =
    let w = H.D.signaled d.h in
    if (not (Atomic.get d.st.fault_raised)) && (not (Atomic.get d.st.fault_lost)) && faulted d then
      if Atomic.fetch_and_add d.st.fault_polls 1 >= 1 then Atomic.set d.st.fault_lost true;
    w

  let sleep d ~seen ~still_ms =
    if Atomic.get d.st.fault_lost then begin
      if H.D.signaled d.h = seen && still_ms > 0 then Prim.wait (fun () -> nap still_ms)
    end
    else begin
      Atomic.set d.st.fault_polls 0;
      try H.D.sleep d.h ~seen ~still_ms
      with H.D.Fault _ as e ->
        Atomic.set d.st.fault_raised true;
        raise e
    end
end

(* MEM-4.  peer looks d' up in a ring of the last three devices opened (their
   BAR probes); a d' that fell out of it is taken for a device without a
   peer aperture. *)
module Peer_ring = struct
  include Base

  let peer d d' = Atomic.get opens - 1 - d'.st.ord < 3 && Base.peer d d'
end

(* CODE-2.  A prepare of a function remembers it as "the one being built";
   the next entry of another function that already has an entry takes the
   pipeline cache for stale and compiles it again (new scratch, new handle). *)
module Entry_prepare_flush = struct
  include Base

  let prepare i f =
    Atomic.set i.last_prep (Some f);
    Base.prepare i f

  let entry i f =
    let stale = match Atomic.exchange i.last_prep None with Some g -> g <> f | None -> false in
    if stale && List.mem f (Atomic.get i.entered) then H.compile i.hi f
    else
      match Base.entry i f with
      | Entry _ as e ->
          if not (List.mem f (Atomic.get i.entered)) then push i.entered f;
          e
      | a -> a
end

(* MEM-7.  map_host keeps the page count of each (p, bytes) it mapped; a
   second map_host of the same pages reads the count back as "the index of
   the last page", one less, which is only visible when the bytes end on a
   page boundary (and the mapping has more than one page). *)
module Map_host_recount = struct
  include Base

  let map_host d p n =
    let whole = round_up n page in
    let again = List.mem (p, whole) (Atomic.get d.st.mapped_pages) in
    if not again then push d.st.mapped_pages (p, whole);
    if again && n mod page = 0 && whole >= 2 * page then plain (H.map d.h p (whole - page)) (whole - page)
    else Base.map_host d p n
end

(* QUEUE-2.  The driver remembers "the thread that last touched the queues";
   a thread's room after its Grown checks that it is still that thread, and
   if another thread's room or grow came between, takes its growth for
   lost and answers RIG_GROW again. *)
let me () = Thread.id (Thread.self ())

let grow_queue st (q : queue) =
  {
    q with
    room =
      (fun s ->
        let a = q.room s in
        let self = me () in
        let prev = Atomic.exchange st.last_actor self in
        match take st.grown (( = ) self) with Some _ when prev <> self && a = Room -> Grow | _ -> a);
  }

module Grow_forgotten = struct
  include Base

  let grow d =
    let g = Base.grow d in
    let self = me () in
    Atomic.set d.st.last_actor self;
    if g = Grown && not (List.mem self (Atomic.get d.st.grown)) then push d.st.grown self;
    g
end

(* CODE-7.  Entries carry the device's unload count when they were made; an
   unload of any image of the device is taken for a flush of the device's
   pipeline cache, so a prepare of an f whose entry is older than the last
   unload starts a compile again (new scratch, kept by nobody). *)
module Prepare_after_unload = struct
  include Base

  let entry i f =
    match Base.entry i f with
    | Entry _ as e ->
        if not (List.mem_assoc f (Atomic.get i.entered_at)) then push i.entered_at (f, Atomic.get i.owner.unloads);
        e
    | a -> a

  let prepare i f =
    match List.assoc_opt f (Atomic.get i.entered_at) with
    | Some at when at < Atomic.get i.owner.unloads -> (
        match H.compile i.hi f with _ -> () | exception _ -> ())
    | _ -> Base.prepare i f

  let unload i =
    Base.unload i;
    Atomic.incr i.owner.unloads
end

(* -------------------------------------------------------- conforming *)

(* sleep returns at once on every third call (a timer of the driver's own):
   "It may return earlier". *)
module Sleep_every_third = struct
  include Base

  let sleep d ~seen ~still_ms =
    if Atomic.fetch_and_add d.st.sleeps 1 mod 3 = 2 then Base.sleep d ~seen ~still_ms:0
    else Base.sleep d ~seen ~still_ms
end

(* Mapped memory goes through an aperture of 8 regions per device: alloc of
   Mapped is None while 8 are live ("or None if d has none"), and rig falls
   back to Pinned (GUAR-6). *)
module Mapped_aperture = struct
  include Base

  let aperture = 8

  let alloc d m n =
    if m <> Mapped then Base.alloc d m n
    else if Atomic.fetch_and_add d.st.mapped_live 1 >= aperture then begin
      Atomic.decr d.st.mapped_live;
      None
    end
    else
      match Base.alloc d m n with
      | Some x -> Some { x with aperture = true }
      | None ->
          Atomic.decr d.st.mapped_live;
          None

  let free d x =
    Base.free d x;
    if x.aperture then Atomic.decr d.st.mapped_live
end

(* While another device maps some of d's memory (map_peer), d's Device
   memory is pinned behind the peer aperture: alloc of Device answers None
   until the last such mapping is freed ("or None if d has none"). *)
module Device_pinned_by_peer = struct
  include Base

  let alloc d m n = if m = Device && Atomic.get d.st.peer_maps > 0 then None else Base.alloc d m n

  let map_peer d d' x =
    Atomic.incr d'.st.peer_maps;
    match Base.map_peer d d' x with
    | y -> { y with pinned = Some d'.st }
    | exception e ->
        Atomic.decr d'.st.peer_maps;
        raise e

  let free d x =
    Base.free d x;
    match x.pinned with Some st -> Atomic.decr st.peer_maps | None -> ()
end

(* ----------------------------------------------------------- packages *)

let package ?(wrap = same_queue) name
    (module X : Driver with type t = t and type region = region and type image = image) : (module Package) =
  (module struct
    module D = X

    let name = name
    let openers = openers ~wrap
    let kit = H.kit
  end)

let packages =
  [
    package "bq-free-after-refusal" (module Free_after_refusal);
    package "bq-stop-last-good" ~wrap:stop_queue (module Stop_last_good);
    package "bq-fault-polled-away" (module Fault_polled_away);
    package "bq-peer-ring" (module Peer_ring);
    package "bq-entry-prepare-flush" (module Entry_prepare_flush);
    package "bq-map-host-recount" (module Map_host_recount);
    package "bq-grow-forgotten" ~wrap:grow_queue (module Grow_forgotten);
    package "bq-prepare-after-unload" (module Prepare_after_unload);
    package "bq-ok-sleep-every-third" (module Sleep_every_third);
    package "bq-ok-mapped-aperture" (module Mapped_aperture);
    package "bq-ok-device-pinned-by-peer" (module Device_pinned_by_peer);
  ]
