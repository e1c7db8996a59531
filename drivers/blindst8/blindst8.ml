(* blindst8: hostmem's device (Hostmem.D, its C stubs unchanged) wrapped by
   ten drivers about STOP-8:

     "free and unload after stop may come after an open of the same hardware
      has made a new device of this driver, and must touch nothing of the
      new device."

   The hardware is the opener's name (STOP-1: an open of a name stops the
   old device of that name).  Everything but the twist of each driver is
   hostmem's: memory, queues, word, images, sleep, stop.  Hostmem's handles
   are (generation << 32 | index) in a table of each device's own, filled
   from index 1 in creation order, so the k-th object of an old device and
   the k-th of a new one have the same handle: the "slot" numbers of this
   file (a counter of each device's own, from 1) collide the same way.

   Notation of the sequences: old = the first device of name N, new = the
   device a second open of N made (after stop old).  A, M: old's Device
   region (its 1st object, slot 1) and a map_peer mapping (2nd object, slot
   2); X, Y: new's first two Device regions (slots 1, 2, same handles as A,
   M); img: an image of old with entries (image slot 1); eimg: an image of
   old without entries (Hostmem.empty_image, image slot 2); img2: new's
   image (image slot 1) and e2 its entry "nop".

 driver                | what it does                                            | clause     | where the bug shows
 ----------------------+---------------------------------------------------------+------------+----------------------------------------------
 st8-slot-free         | free looks the region up in a per-hardware slot table   | STOP-8     | open N; alloc A; ...; stop old; open N; alloc X;
                       | (table keyed by name and slot, slots counted per device |            | free old A  => X freed at once: reach of X
                       | from 1) and frees what the slot holds: at once, the new |            | raises Fault, new's Device budget grows by X's
                       | device's region of the same slot                        |            | bytes (alloc beyond capacity)
 st8-map-reaper        | free of a mapping hands its handle to a reaper thread   | STOP-8     | ...; stop old; open N; alloc X, Y; free old M;
                       | which, 50 ms later, looks up the hardware's current     |            | wait 50 ms => Y freed: reach of Y raises Fault,
                       | device by name and frees the object with that handle    |            | new's budget grows
 st8-scrub-next        | free of a Device region after stop is deferred to the   | STOP-8     | ...; stop old; open N; alloc X (pattern); free
                       | hardware's next call (any device of N), which scrubs    |            | old A; alloc on new => X's bytes all zero
                       | (zeroes) the region of that slot *on the calling device*|            |
                       | before freeing the old region                           |            |
 st8-entry-slot        | unload of an image frees the entries of the image that  | STOP-8     | ...; stop old; open N; image img2; entry e2;
                       | a per-hardware image-slot table holds (image slots      |            | unload old img => launch of e2 on new faults
                       | counted per device from 1): at once, the new device's   |            | ("Launch of no entry"): sleep raises Fault
                       | image of the same slot                                  |            |
 st8-ctx-reaper        | unload, after stop, of an image without entries hands   | STOP-8     | old's last value 2; stop old; open N; work to
                       | a "retire fence" to a reaper thread which, 50 ms later, |            | 11 on new; unload old eimg; wait => signaled new
                       | posts the old device's last value on the queue of the   |            | reads 2 (and new's last value given to submit
                       | hardware's current device (looked up by name)           |            | is now 2)
 st8-map-next          | free of a mapping after stop is deferred to the         | STOP-8     | ...; stop old; open N; alloc X, Y; free old M;
                       | hardware's next call, which frees the object of that    |            | alloc on new => Y freed: reach raises Fault,
                       | handle *on the calling device*                          |            | new's budget grows
 st8-gen-table         | st8-slot-free's per-hardware table, keyed by (device    | conforming | -
                       | generation, slot): free finds its own region            |            |
 st8-deferred-right    | st8-scrub-next's deferral (next call on the hardware,   | conforming | -
                       | any device of N), but the scrub and the free act on the |            |
                       | deferred region itself, on its own (old) device         |            |
 st8-reaper-obj        | unload after stop hands the image to a reaper thread    | conforming | -
                       | keyed by the image's device object: it unloads on that  |            |
                       | device and posts the retire fence there (a stopped      |            |
                       | device's room refuses it: nothing lands)                |            |
 st8-shared-pool       | one pool of freed small Device regions per hardware,    | conforming | -
                       | shared by the devices of N; each region stays charged   |            |
                       | to, and is reused only by, its own device; a free after |            |
                       | stop gives the region back to its own device at once;  |            |
                       | a stopped device's pooled regions go back to it         |            |

   Outside the twist, all ten keep hostmem's behaviour, and with one device
   per name at a time (no second open) the broken six behave as their
   conforming twins: their slot, handle and name look-ups then always find
   the device's own objects. *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem.D

type variant =
  | Slot_free
  | Map_reaper
  | Scrub_next
  | Entry_slot
  | Ctx_reaper
  | Map_next
  | Gen_table
  | Deferred_right
  | Reaper_obj
  | Shared_pool

module type V = sig
  val name : string
  val variant : variant
end

let reaper_delay = 0.05
let pool_region_max = 64 * 1024
let pool_max = 256 * 1024
let gens = Atomic.make 1

module Make (V : V) : Package = struct
  module D = struct
    type t = {
      hd : H.t;
      name : string;  (* the hardware: the opener's name *)
      gen : int;  (* this device among all of this driver's *)
      mutable next_slot : int;  (* per device, from 1 *)
      mutable next_image : int;  (* per device, from 1 *)
      slots : (int, region) Hashtbl.t;
      by_handle : (int64, region) Hashtbl.t;
      mutable word : region option;
    }

    and region = { hr : H.region; owner : t; slot : int; rkind : rkind; size : int; handle : int64 }
    and rkind = Mem of bool (* Device memory *) | Map | Word

    type image = { hi : H.image; idev : t; islot : int; has_entries : bool Atomic.t }

    exception Fault = H.Fault

    (* What the driver keeps per hardware (per opener name). *)
    type pend = Pfree of region | Pmap of int64

    type hw = {
      mutable current : t option;  (* the device the last open of the name made *)
      table : (int * int, region) Hashtbl.t;  (* (key, slot): Slot_free, Gen_table *)
      images : (int, image) Hashtbl.t;  (* image slot: Entry_slot *)
      mutable pending : pend list;  (* Scrub_next, Deferred_right, Map_next *)
      mutable pool : region list;  (* Shared_pool *)
    }

    let hws : (string, hw) Hashtbl.t = Hashtbl.create 4
    let lock = Prim.Lock.create ("st8." ^ V.name)
    let locked f = Prim.Lock.protect lock f

    (* Under the lock. *)
    let hw_of name =
      match Hashtbl.find_opt hws name with
      | Some h -> h
      | None ->
          let h = { current = None; table = Hashtbl.create 16; images = Hashtbl.create 4; pending = []; pool = [] } in
          Hashtbl.add hws name h;
          h

    let table_key d slot = match V.variant with Gen_table -> (d.gen, slot) | _ -> (0, slot)
    let has_table = match V.variant with Slot_free | Gen_table -> true | _ -> false

    (* Under the lock. *)
    let register d hr rkind =
      let p = H.locate d.hd hr in
      let slot = d.next_slot in
      d.next_slot <- slot + 1;
      let r = { hr; owner = d; slot; rkind; size = p.size; handle = p.handle } in
      Hashtbl.replace d.slots slot r;
      Hashtbl.replace d.by_handle r.handle r;
      if has_table then Hashtbl.replace (hw_of d.name).table (table_key d slot) r;
      r

    (* Under the lock. *)
    let unregister r =
      let d = r.owner in
      (match Hashtbl.find_opt d.slots r.slot with Some x when x == r -> Hashtbl.remove d.slots r.slot | _ -> ());
      (match Hashtbl.find_opt d.by_handle r.handle with
      | Some x when x == r -> Hashtbl.remove d.by_handle r.handle
      | _ -> ());
      if has_table then begin
        let t = (hw_of d.name).table and k = table_key d r.slot in
        match Hashtbl.find_opt t k with Some x when x == r -> Hashtbl.remove t k | _ -> ()
      end

    let key = V.name

    let facts d =
      let f = H.facts d.hd in
      { f with own_word = d.word }

    let locate d r = H.locate d.hd r.hr
    let peer _ _ = true
    let stopped d = Hostmem.stopped d.hd

    let scrub r =
      match (H.locate r.owner.hd r.hr).reach with
      | Some f -> ( try f (Write { off = 0; from = String.make r.size '\000' }) with _ -> ())
      | None -> ()

    (* The deferred frees of the hardware, at the next call of a device of
       it (Scrub_next, Deferred_right, Map_next). *)
    let drain caller =
      match V.variant with
      | Scrub_next | Deferred_right | Map_next ->
          let items =
            locked (fun () ->
                let hw = hw_of caller.name in
                let l = hw.pending in
                hw.pending <- [];
                List.rev l)
          in
          List.iter
            (function
              | Pfree p ->
                  let target =
                    match V.variant with
                    | Scrub_next ->
                        (* the bug: the slot is looked up on the device that
                           makes the call, the hardware's current one *)
                        locked (fun () -> Hashtbl.find_opt caller.slots p.slot)
                    | _ -> Some p
                  in
                  (match target with Some t when t.rkind = Mem true -> scrub t | _ -> ());
                  (try H.free p.owner.hd p.hr with _ -> ())
              | Pmap h -> (
                  (* the bug: the handle is looked up on the calling device *)
                  let v =
                    locked (fun () ->
                        match Hashtbl.find_opt caller.by_handle h with
                        | Some v ->
                            unregister v;
                            Some v
                        | None -> None)
                  in
                  match v with Some v -> ( try H.free v.owner.hd v.hr with _ -> ()) | None -> ()))
            items
      | _ -> ()

    (* ---- Shared_pool *)

    (* Gives back, each on its own device, d's pooled regions (or, with d
       None, those of stopped devices) of the hardware [name]. *)
    let pool_purge name (d : t option) =
      let out =
        locked (fun () ->
            let hw = hw_of name in
            let out, keep =
              List.partition
                (fun r -> match d with Some d -> r.owner == d | None -> stopped r.owner)
                hw.pool
            in
            hw.pool <- keep;
            out)
      in
      List.iter (fun r -> H.free r.owner.hd r.hr) out;
      List.length out

    let pool_take d n =
      ignore (pool_purge d.name None);
      locked (fun () ->
          let hw = hw_of d.name in
          match List.find_opt (fun r -> r.owner == d && r.size = n) hw.pool with
          | Some r ->
              hw.pool <- List.filter (fun x -> x != r) hw.pool;
              Some r
          | None -> None)

    let pool_put r =
      locked (fun () ->
          let hw = hw_of r.owner.name in
          let total = List.fold_left (fun a x -> a + x.size) 0 hw.pool in
          if r.size <= pool_region_max && total + r.size <= pool_max then begin
            hw.pool <- r :: hw.pool;
            true
          end
          else false)

    (* ---- memory *)

    let plain_alloc d m n =
      match H.alloc d.hd m n with None -> None | Some hr -> Some (locked (fun () -> register d hr (Mem (m = Device))))

    let alloc d m n =
      drain d;
      match V.variant with
      | Shared_pool when m = Device -> (
          match pool_take d n with
          | Some r -> Some r
          | None -> (
              match plain_alloc d m n with
              | Some r -> Some r
              | None -> if pool_purge d.name (Some d) > 0 then plain_alloc d m n else None))
      | _ -> plain_alloc d m n

    let plain_free d r =
      locked (fun () -> unregister r);
      H.free d.hd r.hr

    let spawn_later f =
      ignore
        (Prim.spawn (fun () ->
             Thread.delay reaper_delay;
             try f () with _ -> ()))

    let free d r =
      drain d;
      match r.rkind with
      | Word -> H.free d.hd r.hr
      | _ -> (
          match V.variant with
          | Slot_free | Gen_table ->
              (* free what the hardware's table holds at the region's slot *)
              let victim =
                locked (fun () ->
                    let t = (hw_of d.name).table and k = table_key d r.slot in
                    let v = match Hashtbl.find_opt t k with Some v -> v | None -> r in
                    unregister v;
                    Hashtbl.remove t k;
                    v)
              in
              H.free victim.owner.hd victim.hr
          | Map_reaper when r.rkind = Map ->
              (* the unmap is the reaper's, which finds the device by name *)
              let name = d.name and h = r.handle in
              spawn_later (fun () ->
                  let v =
                    locked (fun () ->
                        match (hw_of name).current with
                        | None -> None
                        | Some cur -> (
                            match Hashtbl.find_opt cur.by_handle h with
                            | Some v ->
                                unregister v;
                                Some v
                            | None -> None))
                  in
                  match v with Some v -> H.free v.owner.hd v.hr | None -> ())
          | (Scrub_next | Deferred_right) when stopped d && r.rkind = Mem true ->
              locked (fun () ->
                  unregister r;
                  let hw = hw_of d.name in
                  hw.pending <- Pfree r :: hw.pending)
          | Map_next when stopped d && r.rkind = Map ->
              locked (fun () ->
                  let hw = hw_of d.name in
                  hw.pending <- Pmap r.handle :: hw.pending)
          | Shared_pool when r.rkind = Mem true ->
              if stopped d then begin
                plain_free d r;
                ignore (pool_purge d.name (Some d))
              end
              else if not (pool_put r) then plain_free d r
          | _ -> plain_free d r)

    let map_peer d d' r =
      drain d;
      let hr = H.map_peer d.hd d'.hd r.hr in
      locked (fun () -> register d hr Map)

    let map_host d p n =
      drain d;
      let hr = H.map_host d.hd p n in
      locked (fun () -> register d hr Map)

    let dma d r ~fn = H.dma d.hd r.hr ~fn

    (* ---- code *)

    let image d b =
      drain d;
      match H.image d.hd b with
      | Error e -> Error e
      | Ok hi ->
          Ok
            (locked (fun () ->
                 let islot = d.next_image in
                 d.next_image <- islot + 1;
                 let i = { hi; idev = d; islot; has_entries = Atomic.make false } in
                 if V.variant = Entry_slot then Hashtbl.replace (hw_of d.name).images islot i;
                 i))

    let entry i f =
      drain i.idev;
      let a =
        match H.entry i.hi f with
        | No_memory _ when V.variant = Shared_pool && pool_purge i.idev.name (Some i.idev) > 0 -> H.entry i.hi f
        | a -> a
      in
      (match a with Entry _ -> Atomic.set i.has_entries true | _ -> ());
      a

    let prepare i f = H.prepare i.hi f

    (* Posts a signal of [value] on [d]'s queue: the "retire fence". *)
    let post d value =
      let q = (H.facts d.hd).queue in
      let s = Rig_edge.encode [] in
      if q.room s = Room && q.submit s ~value then ignore (q.commit ())

    let unload i =
      let d = i.idev in
      drain d;
      match V.variant with
      | Entry_slot ->
          (* tear down what the hardware's image slot holds *)
          let victim =
            locked (fun () ->
                let t = (hw_of d.name).images in
                let v = match Hashtbl.find_opt t i.islot with Some v -> v | None -> i in
                Hashtbl.remove t i.islot;
                v)
          in
          H.unload victim.hi
      | Ctx_reaper when stopped d && not (Atomic.get i.has_entries) ->
          H.unload i.hi;
          let last = H.signaled d.hd and name = d.name in
          spawn_later (fun () ->
              match locked (fun () -> (hw_of name).current) with Some cur -> post cur last | None -> ())
      | Reaper_obj when stopped d ->
          spawn_later (fun () ->
              H.unload i.hi;
              post d (H.signaled d.hd))
      | _ -> H.unload i.hi

    let grow d =
      match H.grow d.hd with
      | Short _ when V.variant = Shared_pool && pool_purge d.name (Some d) > 0 -> H.grow d.hd
      | a -> a

    let signaled d = H.signaled d.hd
    let sleep d ~seen ~still_ms = H.sleep d.hd ~seen ~still_ms
    let stop d ~fault = H.stop d.hd ~fault
  end

  let name = V.name

  let make oname hmake () =
    Prim.check_unheld (V.name ^ ".make");
    Prim.masked (fun () ->
        let hd = hmake () in
        let d =
          {
            D.hd;
            name = oname;
            gen = Atomic.fetch_and_add gens 1;
            next_slot = 1;
            next_image = 1;
            slots = Hashtbl.create 16;
            by_handle = Hashtbl.create 16;
            word = None;
          }
        in
        (match (H.facts hd).own_word with
        | Some w ->
            d.word <-
              Some { D.hr = w; owner = d; slot = 0; rkind = D.Word; size = 8; handle = (H.locate hd w).handle }
        | None -> ());
        D.locked (fun () -> (D.hw_of oname).current <- Some d);
        d)

  let openers () =
    Prim.check_unheld (V.name ^ ".openers");
    Prim.masked (fun () ->
        List.map
          (fun (o : H.t opener) ->
            let n = V.name ^ ":" ^ o.name in
            { name = n; make = make n o.make })
          (Hostmem.openers ()))

  let kit = Hostmem.kit
end

let mk name variant =
  (module Make (struct
    let name = name
    let variant = variant
  end) : Package)

let drivers =
  [
    ("STOP-8", mk "st8-slot-free" Slot_free);
    ("STOP-8", mk "st8-map-reaper" Map_reaper);
    ("STOP-8", mk "st8-scrub-next" Scrub_next);
    ("STOP-8", mk "st8-entry-slot" Entry_slot);
    ("STOP-8", mk "st8-ctx-reaper" Ctx_reaper);
    ("STOP-8", mk "st8-map-next" Map_next);
    ("conforming", mk "st8-gen-table" Gen_table);
    ("conforming", mk "st8-deferred-right" Deferred_right);
    ("conforming", mk "st8-reaper-obj" Reaper_obj);
    ("conforming", mk "st8-shared-pool" Shared_pool);
  ]
