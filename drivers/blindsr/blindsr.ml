(* blindsr: sr-* drivers, each hostmem (drivers/hostmem, its library
   rig_hostmem and its C stubs, the hm_ ones) wrapped with exactly one twist about
   what stop may and may not release: clause STOP-5 of spec/clauses.tsv and
   its neighbours in the document's "Stopping" part.  Written from spec/
   and the public interface only.

   STOP-5 (the document's "Stopping" part):
     "stop must release nothing rig made. rig frees each region and unloads
      each image itself, also after stop."
     "stop must release what the driver made to run work, such as its
      queues, and must not wait for that work. A word of the driver's own,
      and what signaled needs to read it, must stay until rig frees the
      word."

   The common base (every driver, conforming or not):
   - The memory of a region alloc makes is raw memory of the driver's own
     (sr_stubs.c: malloc'd behind a "live" header, or whole mmap'd pages),
     put under one of hostmem's mappings (Hostmem.map), so that hostmem's
     queues, worker, word, sleep and faults run as they are, and work and
     the host's copies (locate's reach) reach that raw memory.  Device
     memory is charged to hostmem's Device budget by a "shadow" allocation
     of the same size (Hostmem.D.alloc Device), freed with the region, so
     that alloc answers None, entry No_memory and grow Short exactly as
     hostmem does (MEM-2, CODE-3, QUEUE-3).
   - A map_peer of such a region maps the same raw memory (hostmem's
     map_peer of the mapping); a map_host region and the word are hostmem's
     own regions, wrapped.
   - An image is hostmem's, plus a malloc'd copy of its binary (a "code
     blob", behind a live header) released by unload.
   - Every function is hostmem's but for the twist; make and openers check
     rig_holds () and block signals through Rig_edge_primitives as
     hostmem's do; each device keeps its tables (live regions, its peer
     mappings, its host mappings, its images) under one counted lock
     (Prim.Lock.protect), never nested and never held across a C call of
     hostmem's, a wait or a driver call; locate, peer and signaled take no
     lock; the key is the driver's own name; the kit is hostmem's.
   - stop is hostmem's stop (drops what was encoded, writes the last value,
     its worker releases the queues) followed by the twist.

   driver                  | what it does                                       | clause     | the sentence it breaks, or that allows it
   ------------------------+----------------------------------------------------+------------+-------------------------------------------
   sr-stop-frees-regions   | stop releases (free) the malloc'd memory of every  | BREAKS     | "stop must release nothing rig made. rig
                           | region rig still holds, marking its header dead;   | STOP-5     | frees each region ... itself, also after
                           | rig's later free releases it again: a C assert on  |            | stop."
                           | the header aborts the process (free after stop)    |            |
   sr-stop-unmaps-regions  | regions are whole mmap'd pages; stop munmaps those | BREAKS     | same sentence
                           | of every region rig still holds; rig's later free  | STOP-5     |
                           | scrubs the region before unmapping it: a SIGSEGV   |            |
                           | in free after stop (and work stop did not wait for |            |
                           | faults the worker thread)                          |            |
   sr-stop-unmaps-peer-    | regions are mmap'd pages; stop of an importer      | BREAKS     | same sentence (the exporter's region is
   backing                 | "tears down its peer mappings" by munmapping the   | STOP-5     | rig's); decisions.md reads a mapping taken
                           | pages under each map_peer mapping it made: the     |            | away by a stop as STOP-5's
                           | exporter, still open, now has unmapped regions: a  |            |
                           | SIGSEGV at the next copy in or out (reach) or work |            |
   sr-stop-revokes-exports | regions are mmap'd pages; stop of an exporter      | BREAKS     | same sentence ("Each region must keep the
                           | munmaps its regions that another device maps       | STOP-5     | memory mapped until rig frees it" is
                           | (map_peer), "so no peer reaches a dead device":    |            | MEM-5's, but decisions.md puts a mapping
                           | the importer's mapping, a region rig made, now     |            | a stop takes away under STOP-5)
                           | maps nothing: SIGSEGV at its next reach or work    |            |
   sr-stop-unmaps-host-    | stop munmaps the host pages under each map_host    | BREAKS     | same sentence: the mapping is a region rig
   pages                   | region rig still holds ("unpin the host memory"):  | STOP-5     | made, and its pages are rig's memory
                           | the program's own buffer loses its pages           |            |
   sr-stop-frees-status-   | signaled records each value it reads into a status | BREAKS     | "A word of the driver's own, and what
   page                    | page of the device's own (mmap'd at open); stop    | STOP-5     | signaled needs to read it, must stay until
                           | munmaps that page: rig's signaled after stop, as   |            | rig frees the word."
                           | it waits for the last value, faults (SIGSEGV)      |            |
   sr-stop-frees-images    | stop releases the code blob of every image rig     | BREAKS     | "stop must release nothing rig made. rig
                           | still holds (header marked dead, memory freed);    | STOP-5     | ... unloads each image itself, also after
                           | rig's later unload releases it again: a C assert   |            | stop."
                           | aborts the process (unload after stop)             |            |
   sr-retire-at-last-free  | stop releases nothing of rig's: it counts what rig | conforming | "rig frees each region and unloads each
                           | still holds (regions, peer/host mappings, images,  |            | image itself, also after stop"; the driver
                           | the word) and the driver's own journal page is     |            | may keep its own things longer
                           | torn down by the last of rig's frees/unloads after |            |
                           | stop, whichever it is                              |            |
   sr-refcount             | region memory is reference counted: rig's region,  | conforming | "stop must release nothing rig made": stop
                           | each map_peer mapping over it, and the device's    |            | drops only the device's own references
                           | table while it is open; stop drops the device's    |            |
                           | references; memory goes when the last goes (rig's  |            |
                           | free or a mapping's), scrubbed first               |            |
   sr-stop-frees-own-      | keeps a journal page of its own (alloc/free/image/ | conforming | "stop must release what the driver made to
   journal                 | unload append to it); stop munmaps it at once, and |            | run work": releasing its own things is
                           | the frees and unloads after stop journal nothing   |            | allowed; it touches nothing of rig's
   sr-stop-poisons-own     | the same journal; stop fills it with 0xDE and      | conforming | same; the poison touches only the driver's
                           | makes it PROT_NONE (any late use faults loudly);   |            | own page, and nothing after stop uses it
                           | the page is unmapped when rig frees the word       |            |
   sr-lazy-reaper          | free hands a region's raw memory to a reaper       | conforming | "rig frees each region ... itself, also
                           | thread (Prim.spawn, signals blocked for life) that |            | after stop": stop releases nothing; rig's
                           | scrubs and releases it ~20 ms later; hostmem's     |            | free gives the budget back at once (the
                           | mapping and the Device budget go back at once      |            | memory later, off rig's thread)
   sr-status-page-kept     | the status page of sr-stop-frees-status-page, but  | conforming | "A word of the driver's own, and what
                           | stop leaves it; it is unmapped when rig frees the  |            | signaled needs to read it, must stay until
                           | word (signaled is never called after that)         |            | rig frees the word."

   Ambiguities met:
   1. "stop must release nothing rig made": the memory under a region is the
      driver's (it allocated it), the region is rig's.  Read as: whatever a
      region rig holds stands for (its memory, its mapping, its pages) is
      rig's until rig frees the region.  So the broken drivers' "it is my
      memory, I allocated it" does not save them.
   2. A peer mapping over a region of another device: whose is it?  The
      mapping is a region rig made on the importer; the memory it maps is a
      region rig made on the exporter.  A stop of either that takes the
      memory away releases something rig made (decisions.md puts a mapping
      taken away by a stop under STOP-5, not MEM-5); sr-stop-unmaps-peer-
      backing (importer side) and sr-stop-revokes-exports (exporter side)
      rely on that reading.  A stricter reading would call the exporter-
      side case MEM-5's ("Each region must keep the memory mapped until rig
      frees it").
   3. The host pages under a map_host region are the program's, not rig's
      and not the driver's: "nothing rig made" is read as covering them
      (the region is rig's, and MEM-7 says the pages "must stay mapped
      until the region is freed").  sr-stop-unmaps-host-pages could also be
      read as MEM-7's; it is classed STOP-5 because the unmapping is done by
      stop.
   4. "what the driver made to run work": whether a driver may release, at
      stop, things of its own that are not for running work (a journal
      page) is not said; read as allowed (nothing forbids it) as long as
      nothing rig calls later (free, unload, signaled) uses them
      (sr-stop-frees-own-journal, sr-stop-poisons-own).  Whether it may
      instead keep them past stop (sr-retire-at-last-free keeps its journal
      until rig's last free) is not said either: "must release what the
      driver made to run work" names queues; the journal is not for work.
   5. "what signaled needs to read it" is read as covering anything
      signaled dereferences, here a status page it records into, not only
      the word's own memory (sr-stop-frees-status-page).  Whether a crash
      in signaled after stop is then TIME-1's ("signaled d is the value in
      d's word") or STOP-5's: STOP-5's, the cause is stop's release.
   6. "rig frees it after stop" and the order of frees after stop: the
      document does not say the word is freed last; decisions.md does
      ("frees it last").  sr-status-page-kept and sr-stop-poisons-own
      release their own pages at the word's free; sr-retire-at-last-free
      does not rely on the order (it counts).
   7. An entry's scratch memory (made by entry, on rig's call) is not
      clearly "made by rig": no driver here releases it at stop (hostmem's
      unload does).
   8. A crash that comes of a violation (a SIGSEGV, an abort) is part of
      that violation, not a second one: the broken drivers break STOP-5 and
      whatever crash follows is STOP-5's consequence.
   9. "rig ... calls Driver.stop once" (CNT-1): sr-stop-poisons-own relies
      on it (a second stop would fill its page, PROT_NONE since the first,
      and fault); hostmem's stop happens to tolerate a second call.  The
      document asks nothing of a second stop, so the driver is left so.
  10. LOCK-9, "A function that takes no lock may be called from a callback
      at any point": read as also asking progress of a function re-entered
      at every allocation.  sr-lazy-reaper's first version consed inside a
      CAS retry loop, and a free re-entered at each of those allocations
      made the outer CAS fail for ever; its loop now allocates nothing.

   drivers/blindsr/check/ (sr_check.exe blindsr.cmxs) plays three
   situations the document allows in a child each (a peer mapping still
   held at the importer's stop, then a read of the exporter's region; the
   exporter stopped, then a read through the importer's mapping; frees
   after stop) and prints how the child ended.  It judges nothing. *)

module Prim = Rig_edge_primitives
module H = Hostmem.D

(* ---------------------------------------------------------------- C *)

external sr_mmap : int -> nativeint = "sr_mmap"
external sr_munmap : nativeint -> int -> unit = "sr_munmap"
external sr_protect_none : nativeint -> int -> unit = "sr_protect_none"
external sr_hmalloc : int -> nativeint = "sr_hmalloc"
external sr_hfree : nativeint -> unit = "sr_hfree"
external sr_fill : nativeint -> int -> int -> unit = "sr_fill"
external sr_blit_in : nativeint -> string -> unit = "sr_blit_in"
external sr_note : nativeint -> int -> unit = "sr_note" [@@noalloc]
external sr_journal : nativeint -> int -> int -> unit = "sr_journal" [@@noalloc]

let page = 4096
let round_pages n = (n + page - 1) / page * page

(* -------------------------------------------------------- raw memory *)

type how = Pages | Heap

type block = {
  bid : int;
  addr : nativeint;
  len : int;  (* bytes asked for *)
  how : how;
  refs : int Atomic.t;  (* used by the refcounting driver only *)
  exported : int Atomic.t;  (* map_peer mappings over it, live *)
}

let next_id = Atomic.make 1

let raw_alloc how n =
  let addr, how =
    match how with
    | Pages ->
        let a = sr_mmap n in
        if a <> 0n then (a, Pages) else (sr_hmalloc n, Heap)
    | Heap -> (sr_hmalloc n, Heap)
  in
  if addr = 0n then None
  else Some { bid = Atomic.fetch_and_add next_id 1; addr; len = n; how; refs = Atomic.make 1; exported = Atomic.make 0 }

let raw_release b = match b.how with Pages -> sr_munmap b.addr b.len | Heap -> sr_hfree b.addr

(* --------------------------------------------------------- the driver *)

type region =
  | Own of { blk : block; hmap : H.region; shadow : H.region option; owner : dev }
  | Peer of { pid : int; hmap : H.region; backing : block option }
  | Host of { hid : int; hmap : H.region; p : nativeint; n : int }
  | Word of H.region

and dev = {
  h : H.t;
  lock : Prim.Lock.t;
  regions : (int, block) Hashtbl.t;  (* Own regions rig holds, by block id *)
  peers : (int, block option) Hashtbl.t;  (* map_peer mappings made on this device *)
  hosts : (int, nativeint * int) Hashtbl.t;  (* map_host mappings: pages, bytes *)
  images : (int, nativeint) Hashtbl.t;  (* code blobs *)
  mutable word : region;
  mutable stopped : bool;
  status : nativeint;  (* the status page signaled records into, or 0n *)
  mutable status_live : bool;
  journal : nativeint;  (* the driver's own journal page, or 0n *)
  mutable journal_live : bool;
  pending : int Atomic.t;  (* sr-retire-at-last-free: what rig still holds after stop *)
}

type image = { hi : H.image; blob : nativeint; iid : int; idev : dev }

let locked d f = Prim.Lock.protect d.lock f

let journal d code arg = if d.journal_live then sr_journal d.journal code arg

module type TWIST = sig
  val name : string
  val how : how  (* raw memory of regions *)
  val status_page : bool
  val journal : bool
  val refcount : bool

  (* releases a block whose last reference went *)
  val release : block -> unit

  (* after hostmem's stop *)
  val on_stop : dev -> unit

  (* after a free or an unload of rig's, after stop *)
  val after_stop_release : dev -> unit

  (* at rig's free of the word *)
  val on_word_free : dev -> unit
end

(* The conforming defaults. *)
module Base = struct
  let how = Heap
  let status_page = false
  let journal = false
  let refcount = false
  let release = raw_release
  let on_stop (_ : dev) = ()
  let after_stop_release (_ : dev) = ()
  let on_word_free (_ : dev) = ()
end

module Make (X : TWIST) : Rig_edge.Package = struct
  let drop b = if Atomic.fetch_and_add b.refs (-1) = 1 then X.release b

  module D = struct
    type t = dev
    type nonrec region = region
    type nonrec image = image

    exception Fault = H.Fault

    let key = X.name

    let facts d =
      let f = H.facts d.h in
      { f with own_word = Some d.word }

    let hreg = function Own { hmap; _ } | Peer { hmap; _ } | Host { hmap; _ } -> hmap | Word w -> w

    (* No lock, no wait (LOCK-5, LOCK-6). *)
    let locate d r = H.locate d.h (hreg r)
    let peer d d' = H.peer d.h d'.h

    let alloc d m n =
      let shadow = if m = Rig_edge.Device then H.alloc d.h Rig_edge.Device n else None in
      if m = Rig_edge.Device && shadow = None then None
      else
        match raw_alloc X.how n with
        | None ->
            Option.iter (H.free d.h) shadow;
            None
        | Some blk -> (
            match Hostmem.map d.h blk.addr n with
            | exception e ->
                Option.iter (H.free d.h) shadow;
                raw_release blk;
                raise e
            | hmap ->
                if X.refcount then Atomic.incr blk.refs (* the device's table *);
                locked d (fun () -> Hashtbl.replace d.regions blk.bid blk);
                journal d 1 n;
                Some (Own { blk; hmap; shadow; owner = d }))

    let after_stop d = if d.stopped then X.after_stop_release d

    let free d r =
      (match r with
      | Own { blk; hmap; shadow; owner } ->
          let held = locked owner (fun () ->
              let held = Hashtbl.mem owner.regions blk.bid in
              Hashtbl.remove owner.regions blk.bid;
              held)
          in
          H.free d.h hmap;
          Option.iter (H.free d.h) shadow;
          journal d 2 blk.len;
          if X.refcount && held then drop blk (* the device's table *);
          drop blk (* rig's region *)
      | Peer { pid; hmap; backing } ->
          locked d (fun () -> Hashtbl.remove d.peers pid);
          H.free d.h hmap;
          Option.iter
            (fun b ->
              Atomic.decr b.exported;
              if X.refcount then drop b)
            backing
      | Host { hid; hmap; _ } ->
          locked d (fun () -> Hashtbl.remove d.hosts hid);
          H.free d.h hmap
      | Word w ->
          H.free d.h w;
          X.on_word_free d);
      after_stop d

    let map_peer d d' r =
      let backing = match r with Own { blk; _ } -> Some blk | Peer { backing; _ } -> backing | _ -> None in
      let hmap = H.map_peer d.h d'.h (hreg r) in
      Option.iter
        (fun b ->
          Atomic.incr b.exported;
          if X.refcount then Atomic.incr b.refs)
        backing;
      let pid = Atomic.fetch_and_add next_id 1 in
      locked d (fun () -> Hashtbl.replace d.peers pid backing);
      Peer { pid; hmap; backing }

    let map_host d p n =
      let hmap = H.map_host d.h p n in
      let hid = Atomic.fetch_and_add next_id 1 in
      locked d (fun () -> Hashtbl.replace d.hosts hid (p, round_pages n));
      Host { hid; hmap; p; n }

    let dma d r ~fn = H.dma d.h (hreg r) ~fn

    let image d b =
      match H.image d.h b with
      | Error e -> Error e
      | Ok hi ->
          let blob = sr_hmalloc (max 1 (String.length b)) in
          if blob = 0n then begin
            H.unload hi;
            Error "sr: no host memory for the image's code"
          end
          else begin
            sr_blit_in blob b;
            let iid = Atomic.fetch_and_add next_id 1 in
            locked d (fun () -> Hashtbl.replace d.images iid blob);
            journal d 3 (String.length b);
            Ok { hi; blob; iid; idev = d }
          end

    let entry i f = H.entry i.hi f
    let prepare i f = H.prepare i.hi f

    let unload i =
      let d = i.idev in
      locked d (fun () -> Hashtbl.remove d.images i.iid);
      H.unload i.hi;
      sr_hfree i.blob;
      journal d 4 0;
      after_stop d

    let grow d = H.grow d.h

    (* No lock, no wait, no allocation (TIME-1, LOCK-5). *)
    let signaled d =
      let v = H.signaled d.h in
      if d.status_live then sr_note d.status v;
      v

    let sleep d ~seen ~still_ms = H.sleep d.h ~seen ~still_ms

    let stop d ~fault =
      H.stop d.h ~fault;
      d.stopped <- true;
      X.on_stop d
  end

  let name = X.name

  let make (o : H.t Rig_edge.opener) () =
    Prim.check_unheld (X.name ^ ".make");
    Prim.masked (fun () ->
        let status = if X.status_page then sr_mmap page else 0n in
        let jpage = if X.journal then sr_mmap page else 0n in
        if (X.status_page && status = 0n) || (X.journal && jpage = 0n) then begin
          if status <> 0n then sr_munmap status page;
          if jpage <> 0n then sr_munmap jpage page;
          failwith (X.name ^ ": no memory for the device's own pages")
        end;
        let h = o.make () in
        let hw = match (H.facts h).own_word with Some w -> w | None -> failwith "hostmem without a word" in
        {
          h;
          lock = Prim.Lock.create (X.name ^ ".tables");
          regions = Hashtbl.create 16;
          peers = Hashtbl.create 4;
          hosts = Hashtbl.create 4;
          images = Hashtbl.create 4;
          word = Word hw;
          stopped = false;
          status;
          status_live = status <> 0n;
          journal = jpage;
          journal_live = jpage <> 0n;
          pending = Atomic.make 0;
        })

  let openers () =
    Prim.check_unheld (X.name ^ ".openers");
    Prim.masked (fun () ->
        List.map (fun (o : H.t Rig_edge.opener) -> { Rig_edge.name = o.name; make = make o }) (Hostmem.openers ()))

  let kit = Hostmem.kit
end

(* What a table holds, taken under the device's lock. *)
let blocks d = locked d (fun () -> Hashtbl.fold (fun _ b acc -> b :: acc) d.regions [])
let peer_backings d = locked d (fun () -> Hashtbl.fold (fun _ b acc -> match b with Some b -> b :: acc | None -> acc) d.peers [])
let host_pages d = locked d (fun () -> Hashtbl.fold (fun _ pn acc -> pn :: acc) d.hosts [])
let blobs d = locked d (fun () -> Hashtbl.fold (fun _ b acc -> b :: acc) d.images [])

(* ------------------------------------------------------- the broken *)

(* stop frees every region rig still holds; rig's later free asserts. *)
module Stop_frees_regions = Make (struct
  include Base

  let name = "sr-stop-frees-regions"

  (* "the device is gone: give its memory back to the host now" *)
  let on_stop d = List.iter raw_release (blocks d)
end)

(* whole pages; stop unmaps them; free scrubs before unmapping. *)
module Stop_unmaps_regions = Make (struct
  include Base

  let name = "sr-stop-unmaps-regions"
  let how = Pages

  (* scrub on free: no data of one program left for the next *)
  let release b =
    sr_fill b.addr b.len 0;
    raw_release b

  let on_stop d = List.iter (fun b -> match b.how with Pages -> sr_munmap b.addr b.len | Heap -> ()) (blocks d)
end)

(* the importer's stop unmaps the pages under its peer mappings. *)
module Stop_unmaps_peer_backing = Make (struct
  include Base

  let name = "sr-stop-unmaps-peer-backing"
  let how = Pages

  (* "tear down the peer mappings of the stopped device" *)
  let on_stop d = List.iter (fun b -> match b.how with Pages -> sr_munmap b.addr b.len | Heap -> ()) (peer_backings d)
end)

(* the exporter's stop unmaps its regions that another device maps. *)
module Stop_revokes_exports = Make (struct
  include Base

  let name = "sr-stop-revokes-exports"
  let how = Pages

  (* "no peer may reach a dead device's memory" *)
  let on_stop d =
    List.iter
      (fun b -> if Atomic.get b.exported > 0 then match b.how with Pages -> sr_munmap b.addr b.len | Heap -> ())
      (blocks d)
end)

(* stop unmaps the host pages under rig's map_host regions. *)
module Stop_unmaps_host_pages = Make (struct
  include Base

  let name = "sr-stop-unmaps-host-pages"

  (* "unpin the host memory the device mapped" *)
  let on_stop d = List.iter (fun (p, n) -> sr_munmap p n) (host_pages d)
end)

(* stop unmaps the status page signaled records into. *)
module Stop_frees_status_page = Make (struct
  include Base

  let name = "sr-stop-frees-status-page"
  let status_page = true

  (* "the device's status page is the device's: it goes with it" *)
  let on_stop d = sr_munmap d.status page
end)

(* stop frees every image's code blob; rig's later unload asserts. *)
module Stop_frees_images = Make (struct
  include Base

  let name = "sr-stop-frees-images"

  (* "unload the device's code with it" *)
  let on_stop d = List.iter sr_hfree (blobs d)
end)

(* ---------------------------------------------------- the conforming *)

(* stop counts what rig holds; the last of rig's frees/unloads after stop
   tears down the driver's own journal page. *)
module Retire_at_last_free = Make (struct
  include Base

  let name = "sr-retire-at-last-free"
  let journal = true

  let on_stop d =
    let n =
      locked d (fun () ->
          Hashtbl.length d.regions + Hashtbl.length d.peers + Hashtbl.length d.hosts + Hashtbl.length d.images + 1)
    in
    Atomic.set d.pending n

  let after_stop_release d =
    if Atomic.fetch_and_add d.pending (-1) = 1 then begin
      d.journal_live <- false;
      sr_munmap d.journal page
    end
end)

(* reference counted memory; stop drops only the device's references. *)
module Refcount = Make (struct
  include Base

  let name = "sr-refcount"
  let how = Pages
  let refcount = true

  let release b =
    sr_fill b.addr b.len 0xdd;
    raw_release b

  let on_stop d =
    let bs =
      locked d (fun () ->
          let bs = Hashtbl.fold (fun _ b acc -> b :: acc) d.regions [] in
          Hashtbl.reset d.regions;
          bs)
    in
    List.iter (fun b -> if Atomic.fetch_and_add b.refs (-1) = 1 then release b) bs
end)

(* stop releases its own journal page at once. *)
module Stop_frees_own_journal = Make (struct
  include Base

  let name = "sr-stop-frees-own-journal"
  let journal = true

  let on_stop d =
    d.journal_live <- false;
    sr_munmap d.journal page
end)

(* stop poisons its own journal page; rig's free of the word unmaps it. *)
module Stop_poisons_own = Make (struct
  include Base

  let name = "sr-stop-poisons-own"
  let journal = true

  let on_stop d =
    d.journal_live <- false;
    sr_fill d.journal page 0xde;
    sr_protect_none d.journal page

  let on_word_free d = if d.stopped then sr_munmap d.journal page
end)

(* rig's free hands the raw memory to a reaper thread, through a
   lock-free stack of nodes.  The node is made once, before the CAS loop:
   the loop itself allocates nothing, so that a free made from a callback
   at an allocation inside it (LOCK-9: "may be called from a callback at
   any point") cannot make its CAS fail for ever.  (First version consed
   inside the loop; the certifier's LOCK-3 probe, which frees again at each
   allocation, made it retry for ever.) *)
type node = Nil | Node of { nb : block; mutable next : node }

let reaped : node Atomic.t = Atomic.make Nil
let reaper_started = Atomic.make false

let rec release_all = function
  | Nil -> ()
  | Node { nb; next } ->
      sr_fill nb.addr nb.len 0xdd;
      raw_release nb;
      release_all next

let rec reap () =
  Thread.delay 0.02;
  release_all (Atomic.exchange reaped Nil);
  reap ()

let push b =
  let n = Node { nb = b; next = Nil } in
  let rec go () =
    let l = Atomic.get reaped in
    (match n with Node r -> r.next <- l | Nil -> ());
    if not (Atomic.compare_and_set reaped l n) then go ()
  in
  go ()

module Lazy_reaper = Make (struct
  include Base

  let name = "sr-lazy-reaper"
  let how = Pages

  let release b =
    push b;
    if Atomic.compare_and_set reaper_started false true then
      match Prim.spawn reap with
      | (_ : Thread.t) -> ()
      | exception (Failure _ | Sys_error _) ->
          (* no thread: release here *)
          Atomic.set reaper_started false;
          release_all (Atomic.exchange reaped Nil)
end)

(* the status page stays until rig frees the word. *)
module Status_page_kept = Make (struct
  include Base

  let name = "sr-status-page-kept"
  let status_page = true
  let on_word_free d =
    if d.status_live then begin
      d.status_live <- false;
      sr_munmap d.status page
    end
end)

(* ------------------------------------------------------------ all *)

let all : (module Rig_edge.Package) list =
  [
    (module Stop_frees_regions);
    (module Stop_unmaps_regions);
    (module Stop_unmaps_peer_backing);
    (module Stop_revokes_exports);
    (module Stop_unmaps_host_pages);
    (module Stop_frees_status_page);
    (module Stop_frees_images);
    (module Retire_at_last_free);
    (module Refcount);
    (module Stop_frees_own_journal);
    (module Stop_poisons_own);
    (module Lazy_reaper);
    (module Status_page_kept);
  ]

let kit_more = Hostmem.kit_more
