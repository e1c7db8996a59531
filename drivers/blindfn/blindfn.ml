(* blindfn: fn-* drivers, each hostmem (drivers/hostmem, its library
   rig_hostmem and its C stubs) wrapped with exactly one twist, about the
   driver's finalisers (Gc.finalise / Gc.finalise_last on its devices or on
   the regions alloc makes) that wait -- for a device's work to finish, for
   a helper, for a flush -- and where those waits stand relative to
   rig_shield: clause SIG-7 of spec/clauses.tsv, its "waits included".
   Written from spec/ and the public interface only.

   Every driver is hostmem's behaviour but for its twist: its functions
   call Hostmem.D's (its Fault is Hostmem.D.Fault), its make and openers
   check rig_holds () and block signals through Rig_edge_primitives as
   hostmem's do, it registers hostmem's kit and kit_more, and its key is
   its own name.  A device or region a program drops without stop or free
   is what its finaliser sees; its work may still run then.  Finalisers
   also run for devices and regions rig stopped and freed and then let go.

   SIG-7 "Its finalisers and exit handlers block them with rig_shield,
          waits included, so that no signal's exception escapes them into
          the code they interrupt or skips the exit handlers after them."

   Common to all eight, so that each breaks nothing but (at most) SIG-7:
   - every closure a finaliser runs is made when the finaliser is attached
     (in make, under Prim.masked, or in alloc, a counted call): outside its
     shield a finaliser allocates nothing (no closure, no string, no boxed
     number; the unshielded waits' step is a preallocated closure);
   - no finaliser takes a lock (counted or not): notes go to a ring of
     strings indexed by an Atomic, so no lock is ever held across a wait
     (LOCK-3, LOCK-8, ASYNC-2 untouched);
   - every wait goes through Rig_edge_primitives.wait (directly, around a
     step that releases the runtime, or inside Hostmem.D.sleep) (SIG-2,
     SIG-3, SIG-9); every mask change goes through Rig_edge_primitives;
   - a finaliser frees, stops and unloads nothing: rig's regions stay
     mapped until rig frees them (MEM-3, MEM-5, STOP-1..8), and a region rig
     freed and let go is finalised harmlessly;
   - every wait is bounded (at most 40 x 5 ms unshielded, at most a few
     tens of ms shielded, 2 s in the helper thread): no hang.

   driver               | what it does                                      | clause     | the sentence it breaks, or that allows it
   ---------------------+---------------------------------------------------+------------+-------------------------------------------
   fn-dev-log-then-wait | device finaliser (Gc.finalise_last, closures made | BREAKS     | "block them with rig_shield, waits
                        | in make): logs "device dropped, busy" inside      | SIG-7      | included": the allocation is shielded,
                        | Prim.shield, then, outside it, drains: Prim.wait  |            | the wait after it is not
                        | around a 5 ms timer step, again while the device  |            |
                        | is busy (at most 40 times)                        |            |
   fn-region-drain-     | region finaliser (each alloc region, Gc.finalise_ | BREAKS     | same sentence: the shield ends before the
   closure              | last): its shielded body logs and returns a       | SIG-7      | wait its body set up; "waits included"
                        | "drain" closure made at alloc, which the finaliser|            |
                        | then runs outside the shield: waits (as above)    |            |
                        | for the device's work that may use the region     |            |
   fn-dev-wait-first    | device finaliser (Gc.finalise on the device, a    | BREAKS     | same sentence: the wait comes before the
                        | static function and a body kept in the device):   | SIG-7      | shield begins
                        | drains first, unshielded (as above), then shields |            |
                        | the rest (the log)                                |            |
   fn-dev-nested-       | device finaliser: one Prim.shield around the log  | BREAKS     | same sentence: the wait is inside the
   unshield             | and a helper "interruptible_drain" that first     | SIG-7      | shield's scope but the helper ended the
                        | gives the thread back the mask the process had as |            | shield (nested) before it: the wait runs
                        | the plugin loaded (Prim.restore, "so that Ctrl-C  |            | with signals open
                        | can cut a stuck drain short"), then drains        |            |
   fn-dev-wait-in-      | device finaliser whose whole body is one          | conforming | "block them with rig_shield, waits
   shield               | Prim.shield: log, then one flush wait on the      |            | included": a finaliser may wait, inside
                        | device (Hostmem.D.sleep, still_ms 20)             |            | rig_shield; bounded (<= 20 ms)
   fn-dev-helper-thread | device finaliser, all shielded: if the device is  | conforming | SIG-7 for the finaliser (it waits for
                        | busy, hands the drain to a helper thread started  |            | nothing); the helper: "A thread the
                        | with Prim.spawn (closure made in make); the helper|            | driver starts blocks them for its life"
                        | waits (Hostmem.D.sleep, <= 100 x 20 ms) and notes |            | (SIG-8), which Prim.spawn does
   fn-dev-wait-if-busy  | device finaliser, all shielded: waits (Hostmem.D. | conforming | "block them with rig_shield, waits
                        | sleep, <= 4 x 10 ms) only while the device is     |            | included": its waits, when there are
                        | still busy; an idle device: no wait               |            | any, are inside the shield
   fn-region-fin-noop   | region finaliser (Gc.finalise_last of a static    | conforming | SIG-7's purpose, "so that no signal's
                        | function) that does nothing: no allocation, no    |            | exception escapes them": its body has no
                        | poll point, no wait, no shield                    |            | allocation, poll or wait where an OCaml
                        |                                                   |            | handler could run (ambiguity 2)

   Ambiguities resolved:
   1. "waits included" read as: every wait a finaliser makes, directly or
      through helpers and closures it runs, runs while rig_shield blocks
      signals -- the shield's scope in the text does not count, the mask
      during the wait does (fn-dev-nested-unshield).  A thread the
      finaliser starts is not the finaliser: its waits fall under SIG-8.
   2. A finaliser with nothing in it (fn-region-fin-noop) is taken to need
      no rig_shield: a signal's OCaml handler runs only at an allocation,
      poll point or wait, and it has none, so no exception can escape it.
      A stricter reading ("every finaliser calls rig_shield") would make it
      SIG-7; it is the one conforming driver that relies on this reading.
   3. Outside a shield, Hostmem.D.sleep allocates its step closure; the
      broken drivers' unshielded waits use instead Prim.wait around a
      preallocated 5 ms timer step (Unix.sleepf releases the runtime), "a
      timer of the driver's own", so that they break SIG-7 by their waits
      alone and allocate nothing outside the shield.
   4. The broken drains wait at least once (a do-while: "let the last
      writes land"), so that their unshielded wait shows whether or not the
      dropped device still runs work; the conforming fn-dev-wait-if-busy
      waits only while it does.
   5. fn-dev-nested-unshield's mask is the one the loading thread had as
      the plugin loaded (a Prim.mask / Prim.restore pair at load, net no
      change): the process's mask, normally nothing blocked.
   6. Finalisers attached to devices go on a wrapper record (the driver's
      t) whose finaliser closure holds Hostmem's device, not the wrapper,
      so that the wrapper can become unreachable.
   7. The conforming drivers rely on Prim.shield keeping signals blocked
      during the waits inside it wherever the finaliser runs, also inside a
      driver call (under rig_mask).  Seen with a throwaway probe
      (signal_at_wait 1, a SIGUSR2 handler reading in_wait): shield(wait)
      holds the signal until the shield ends, but masked(shield(wait))
      runs the handler inside the wait, as masked(wait) does. *)

module Prim = Rig_edge_primitives
module H = Hostmem.D

(* ------------------------------------------------------------ notes *)

(* The driver's trace: a ring of the last 64 notes.  No lock: a slot is
   claimed with an Atomic, written with one store. *)
let ring = Array.make 64 ""
let next_note = Atomic.make 0

let note s =
  let i = Atomic.fetch_and_add next_note 1 in
  ring.(i land 63) <- s

let notes () =
  let n = Atomic.get next_note in
  List.init (min n 64) (fun k -> ring.((n - 1 - k) land 63))

(* ------------------------------------------------------------ waits *)

(* A wait's step for the unshielded drains: a timer of the driver's own,
   releasing the runtime while it sleeps.  A static closure: passing it
   allocates nothing. *)
let tick () = Unix.sleepf 0.005

(* Do-while: waits once, then again while the device is busy, at most k
   times in all.  Allocates nothing. *)
let rec drain_ticks h k =
  Prim.wait tick;
  if k > 1 && Hostmem.busy h then drain_ticks h (k - 1)

(* Waits on the device's events while it is busy, at most k times
   still_ms.  Allocates (Hostmem.D.sleep's step): shielded use only. *)
let rec drain_events h k still_ms =
  if k > 0 && Hostmem.busy h then begin
    (try H.sleep h ~seen:(H.signaled h) ~still_ms with H.Fault _ -> ());
    drain_events h (k - 1) still_ms
  end

(* ------------------------------------------------- the common driver *)

type dev = {
  h : H.t;
  mutable body : unit -> unit;
      (* a finaliser's body made in make, for the drivers whose finaliser is
         a static function given the device (Gc.finalise) *)
}

let nothing () = ()

module type TWIST = sig
  val name : string

  (* in make, inside Prim.masked *)
  val on_device : dev -> unit

  (* in alloc, on each region it makes *)
  val on_region : H.t -> H.region -> unit
end

let no_device (_ : dev) = ()
let no_region (_ : H.t) (_ : H.region) = ()

module Make (X : TWIST) : Rig_edge.Package = struct
  module D = struct
    type t = dev
    type region = H.region
    type image = H.image

    exception Fault = H.Fault

    let key = X.name
    let facts d = H.facts d.h
    let locate d r = H.locate d.h r
    let peer d d' = H.peer d.h d'.h

    let alloc d m n =
      match H.alloc d.h m n with
      | None -> None
      | Some r as some ->
          X.on_region d.h r;
          some

    let free d r = H.free d.h r
    let map_peer d d' r = H.map_peer d.h d'.h r
    let map_host d p n = H.map_host d.h p n
    let dma d r ~fn = H.dma d.h r ~fn
    let image d b = H.image d.h b
    let entry = H.entry
    let prepare = H.prepare
    let grow d = H.grow d.h
    let signaled d = H.signaled d.h
    let sleep d ~seen ~still_ms = H.sleep d.h ~seen ~still_ms
    let stop d ~fault = H.stop d.h ~fault
    let unload = H.unload
  end

  let name = X.name

  let make (o : H.t Rig_edge.opener) () =
    Prim.check_unheld (X.name ^ ".make");
    Prim.masked (fun () ->
        let h = o.make () in
        let d = { h; body = nothing } in
        X.on_device d;
        d)

  let openers () =
    Prim.check_unheld (X.name ^ ".openers");
    Prim.masked (fun () ->
        List.map (fun (o : H.t Rig_edge.opener) -> { Rig_edge.name = o.name; make = make o }) (Hostmem.openers ()))

  let kit = Hostmem.kit
end

(* ---------------------------------------------------- the broken four *)

(* Logs inside the shield, then drains outside it. *)
module Dev_log_then_wait = Make (struct
  let name = "fn-dev-log-then-wait"

  let on_device d =
    let h = d.h in
    let log () =
      note (Printf.sprintf "%s: device %d (%s) dropped, busy %b" name (Hostmem.id h) (Hostmem.device_name h) (Hostmem.busy h))
    in
    let fin () =
      Prim.shield log;
      drain_ticks h 40
    in
    Gc.finalise_last fin d

  let on_region = no_region
end)

(* The shielded body returns the drain, run after the shield. *)
module Region_drain_closure = Make (struct
  let name = "fn-region-drain-closure"
  let on_device = no_device

  let on_region h r =
    let handle = Int64.to_int (H.locate h r).handle in
    let drain () = drain_ticks h 40 in
    let released () =
      note (Printf.sprintf "%s: region %#x of device %d released" name handle (Hostmem.id h));
      drain
    in
    let fin () = (Prim.shield released) () in
    Gc.finalise_last fin r
end)

(* Drains first, unshielded, then shields the log. *)
module Dev_wait_first = Make (struct
  let name = "fn-dev-wait-first"

  let finalise d =
    drain_ticks d.h 40;
    Prim.shield d.body

  let on_device d =
    let h = d.h in
    (d.body <- fun () -> note (Printf.sprintf "%s: device %d drained and dropped" name (Hostmem.id h)));
    Gc.finalise finalise d

  let on_region = no_region
end)

(* The mask the loading thread had as the plugin loaded. *)
let process_mask =
  let m = Prim.mask () in
  Prim.restore m;
  m

(* "Lets a Ctrl-C cut a stuck drain short": gives the thread the process's
   mask back, then drains -- ending, nested, the caller's shield. *)
let interruptible_drain h =
  Prim.restore process_mask;
  drain_ticks h 40

module Dev_nested_unshield = Make (struct
  let name = "fn-dev-nested-unshield"

  let on_device d =
    let h = d.h in
    let body () =
      note (Printf.sprintf "%s: device %d dropped, busy %b" name (Hostmem.id h) (Hostmem.busy h));
      interruptible_drain h
    in
    let fin () = Prim.shield body in
    Gc.finalise_last fin d

  let on_region = no_region
end)

(* ------------------------------------------------ the conforming four *)

(* The whole body shielded: log, then one flush wait of at most 20 ms. *)
module Dev_wait_in_shield = Make (struct
  let name = "fn-dev-wait-in-shield"
  let finalise d = Prim.shield d.body

  let on_device d =
    let h = d.h in
    (d.body <-
       fun () ->
         note (Printf.sprintf "%s: device %d dropped, flushing" name (Hostmem.id h));
         try H.sleep h ~seen:(H.signaled h) ~still_ms:20 with H.Fault _ -> ());
    Gc.finalise finalise d

  let on_region = no_region
end)

(* Waits for nothing: a busy device's drain goes to a helper thread,
   started with Prim.spawn inside the shield. *)
module Dev_helper_thread = Make (struct
  let name = "fn-dev-helper-thread"

  let on_device d =
    let h = d.h in
    let helper () =
      drain_events h 100 20;
      note "fn-dev-helper-thread: helper drained a dropped device"
    in
    let body () =
      if Hostmem.busy h then begin
        note (Printf.sprintf "%s: device %d dropped busy, drain handed over" name (Hostmem.id h));
        try ignore (Prim.spawn helper : Thread.t) with Failure _ | Sys_error _ -> ()
      end
    in
    let fin () = Prim.shield body in
    Gc.finalise_last fin d

  let on_region = no_region
end)

(* Waits, shielded, only while the device is still busy. *)
module Dev_wait_if_busy = Make (struct
  let name = "fn-dev-wait-if-busy"

  let on_device d =
    let h = d.h in
    let body () =
      if Hostmem.busy h then begin
        note (Printf.sprintf "%s: device %d dropped busy, waiting" name (Hostmem.id h));
        drain_events h 4 10
      end
    in
    let fin () = Prim.shield body in
    Gc.finalise_last fin d

  let on_region = no_region
end)

(* A region finaliser that does nothing (a release hook compiled out). *)
let release_hook_off () = ()

module Region_fin_noop = Make (struct
  let name = "fn-region-fin-noop"
  let on_device = no_device
  let on_region _ r = Gc.finalise_last release_hook_off r
end)

(* ------------------------------------------------------------ all *)

let all : (module Rig_edge.Package) list =
  [
    (module Dev_log_then_wait);
    (module Region_drain_closure);
    (module Dev_wait_first);
    (module Dev_nested_unshield);
    (module Dev_wait_in_shield);
    (module Dev_helper_thread);
    (module Dev_wait_if_busy);
    (module Region_fin_noop);
  ]

let kit_more = Hostmem.kit_more
