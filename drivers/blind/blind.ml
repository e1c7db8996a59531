(* blind: hostmem (drivers/hostmem) with one behaviour changed per driver,
   each about a call that does not return or returns slowly.  Every driver
   wraps Hostmem's public interface: its device, kit and openers are
   hostmem's, and only the function named in its comment differs.

   Broken (each breaks one clause of spec/rig_edge_driver.txt):
   blind-sleep-forever     sleep ignores still_ms while the word stays    TIME-4
   blind-stop-forever      stop with work running waits on a condition
                           nobody signals                                 STOP-2
   blind-signaled-blocks   signaled waits for the word to change          TIME-1
   blind-locate-sleeps     locate sleeps for ever                         LOCK-6
   blind-stop-drains       stop waits (up to 2 s) for running work        STOP-2
   Conforming (nothing in the document bounds how long they take):
   blind-make-slow         an opener's make takes 3 s (and prints)
   blind-image-slow        image takes 4 s to load a binary (and prints)
   blind-sleep-spurious    sleep returns after 1 ms whenever still_ms > 1
   blind-stop-cleanup      stop takes 1 s of its own cleanup, after the stop
   blind-alloc-slow        alloc takes 200 ms a call *)

open Rig_edge
module Prim = Rig_edge_primitives
module H = Hostmem

external nap : int -> unit = "blind_nap"
external now_ms : unit -> int = "blind_now_ms" [@@noalloc]
external block_forever : unit -> unit = "blind_block_forever"

(* A wait of ms milliseconds, as the document asks of a driver's waits:
   signals unblocked around a step that releases the runtime. *)
let wait_ms ms = Prim.wait (fun () -> nap ms)

module Sleep_forever = struct
  include H.D

  (* Blocks until the word differs from seen, whatever still_ms says; a
     fault still raises. *)
  let sleep d ~seen ~still_ms:_ =
    while H.D.signaled d = seen do
      H.D.sleep d ~seen ~still_ms:100;
      (* hostmem's sleep returns at once on a stopped device *)
      if H.stopped d then wait_ms 10
    done
end

module Stop_forever = struct
  include H.D

  (* "Drain" first: with work running, waits for the worker's all-idle
     signal, which the device never sends. *)
  let stop d ~fault =
    if H.busy d then Prim.wait block_forever;
    H.D.stop d ~fault
end

module Signaled_blocks = struct
  include H.D

  (* Answers only once the word has moved from what it read first. *)
  let signaled d =
    let w = H.D.signaled d in
    while H.D.signaled d = w do
      nap 1
    done;
    H.D.signaled d
end

module Locate_sleeps = struct
  include H.D

  (* Never answers. *)
  let locate d r =
    while true do
      nap 1000
    done;
    H.D.locate d r
end

(* stop that lets the running work finish first, for at most bound_ms. *)
module Stop_drains (B : sig
  val bound_ms : int
end) =
struct
  include H.D

  let stop d ~fault =
    let deadline = now_ms () + B.bound_ms in
    while H.busy d && now_ms () < deadline do
      wait_ms 5
    done;
    H.D.stop d ~fault
end

(* An opener's make: hostmem's, after 3 s of device initialisation. *)
let slow_make (make : unit -> H.D.t) () =
  Prim.check_unheld "Blind.make";
  Prim.masked (fun () ->
      print_endline "blind-make-slow: initialising the device (3 s)";
      wait_ms 3000;
      make ())

let slow_openers () =
  Prim.check_unheld "Blind.openers";
  Prim.masked (fun () -> List.map (fun (o : H.D.t opener) -> { o with make = slow_make o.make }) (H.openers ()))

module Image_slow = struct
  include H.D

  let image d b =
    prerr_endline "blind-image-slow: loading a binary (4 s)";
    wait_ms 4000;
    H.D.image d b
end

module Sleep_spurious = struct
  include H.D

  (* A timer of the driver's own wakes it after 1 ms. *)
  let sleep d ~seen ~still_ms = H.D.sleep d ~seen ~still_ms:(min still_ms 1)
end

module Stop_cleanup = struct
  include H.D

  (* hostmem's stop, which waits for nothing, then 1 s of the driver's
     own cleanup. *)
  let stop d ~fault =
    H.D.stop d ~fault;
    wait_ms 1000
end

module Alloc_slow = struct
  include H.D

  let alloc d m n =
    wait_ms 200;
    H.D.alloc d m n
end


(* A package of hostmem's devices and kit for the driver X. *)
let package ?(openers = H.openers) name (module X : Driver with type t = H.D.t) : (module Package) =
  (module struct
    module D = X

    let name = name
    let openers = openers
    let kit = H.kit
  end)

let packages =
  [
    package "blind-sleep-forever" (module Sleep_forever);
    package "blind-stop-forever" (module Stop_forever);
    package "blind-signaled-blocks" (module Signaled_blocks);
    package "blind-locate-sleeps" (module Locate_sleeps);
    package "blind-stop-drains" (module Stop_drains (struct let bound_ms = 2000 end));
    package "blind-stop-drains-briefly" (module Stop_drains (struct let bound_ms = 1000 end));
    package "blind-make-slow" ~openers:slow_openers (module H.D);
    package "blind-image-slow" (module Image_slow);
    package "blind-sleep-spurious" (module Sleep_spurious);
    package "blind-stop-cleanup" (module Stop_cleanup);
    package "blind-alloc-slow" (module Alloc_slow);
  ]
