(* blinds3c: drivers about SIG-3, written from the contract document alone.

   SIG-3 (clauses.tsv): "A wait's blocking step releases the OCaml runtime
   while it blocks, as a blocking stub does."  From the document's Drivers
   section: "... inside its waits, each of which calls rig_unblock right
   before its blocking step and rig_block right after it, whether the step
   returns or raises, and whose step releases the OCaml runtime while it
   blocks, as a blocking stub does."

   Every driver is hostmem (its device, hm_* in hostmem_stubs.c, and a copy
   of its OCaml driver below) with sleep changed, and for some a helper
   thread of the driver added.  Every other function is hostmem's.  Every
   wait goes through Rig_edge_primitives (wait, Lock.await), so SIG-2 holds
   for all; helper threads are started with Prim.spawn (SIG-8) and block
   only in stubs that leave the thread's mask alone; their locks are
   Prim.Lock (LOCK-3, SIG-9).  Sleeps keep hostmem's checks: immediate return
   when the word differs (TIME-3), the deadline still_ms (TIME-4), Fault
   before and after the wait (TIME-5).

   driver                 | what its sleep does                                           | breaks     | sentence broken / why it conforms
   -----------------------+---------------------------------------------------------------+------------+-----------------------------------
   s3c-keep-all           | its C wait blocks on the device's condition variable          | SIG-3      | "whose step releases the OCaml runtime while it blocks, as a
                          | without caml_enter_blocking_section: whole wait, every call   |            |  blocking stub does": the step blocks holding the runtime
   s3c-keep-spin-short    | spins in C on the word for up to 20 ms (runtime kept), then   | SIG-3      | same sentence: the first <= 20 ms of each wait's step block
                          | blocks releasing the runtime (spin-then-block)                |            |  without releasing it
   s3c-keep-branch        | C wait with two branches; the "short" one (< 100 ms to the    | SIG-3      | same sentence, on one branch of the step: sleeps with
                          | deadline) forgets caml_enter_blocking_section                 |            |  still_ms < 100 block holding the runtime
   s3c-keep-every-3rd     | every third sleep of a device waits with the non-releasing    | SIG-3      | same sentence, for one call in three
                          | stub (whole wait); the others as hostmem                      |            |
   s3c-keep-tail          | releases the runtime until 30 ms before the deadline, then    | SIG-3      | same sentence, for the last 30 ms of each wait (part of a
                          | spins in C "for timer precision" keeping it                   |            |  call; all of a sleep shorter than 30 ms)
   s3c-ocaml-poll         | the wait's step is an OCaml busy loop on signaled (cpu_relax) | SIG-3      | same sentence: the step blocks in OCaml code, holding the
                          | until the word moves, a fault, a stop or the deadline         |            |  runtime but where the tick preempts it; no blocking stub
   s3c-keep-helper        | while the driver's OCaml "pump" thread exists (started by the | SIG-3      | same sentence, while a helper thread of the driver exists:
                          | first sleep, gone 2 s after the last), waits with the non-    |            |  every sleep after a device's first, while sleeps keep coming
                          | releasing stub; without it, as hostmem (and starts the pump)  |            |
   s3c-keep-cold          | while the word is 0 (no work of the device ever ended) waits  | SIG-3      | same sentence, while the device is cold: an idle new device
                          | with the non-releasing stub; afterwards as hostmem            |            |  always is
   s3c-keep-after-early   | waits at most 25 ms (timer of its own, releasing); the call   | SIG-3      | same sentence, on the path after an early return: the call
                          | after such an early return "resumes" with the non-releasing   |            |  that follows it keeps the runtime to its deadline
                          | stub to its deadline                                          |            |
   s3c-helper-busy-in-sleep | an OCaml helper thread computes (float loop, Thread.yield   | conforming | the step (one condition wait in a blocking section) releases
                          | every few us) only while a sleep is in flight and kicks the   |            |  the runtime; the helper is no wait, its OCaml work is its own
                          | device's sleepers every 20 ms; sleep waits once, returns on   |            |  ("It may return earlier, on ... a timer of the driver's
                          | the kick                                                      |            |  own"); it blocks signals for its life (Prim.spawn)
   s3c-helper-busy-always | hostmem's sleep; an OCaml helper thread computes with         | conforming | the wait is hostmem's blocking stub; the helper is not a wait,
                          | Thread.yield from open to stop                                |            |  and the document bounds no thread's OCaml work
   s3c-early-often        | each call waits at most 1 ms (releasing), then returns        | conforming | "It may return earlier, on ... a timer of the driver's own,
                          |                                                               |            |  since rig reads the word again ... and sleeps again"
   s3c-tiny-waits         | one call makes many 1-ms waits, each Prim.wait around         | conforming | each wait's step is a blocking stub (hostmem's, ours for the
                          | hostmem's blocking stub (the last < 1 ms with ours), until    |            |  last fraction); the OCaml code between waits is no blocking
                          | word/fault/deadline                                           |            |  step
   s3c-sliced-cwait       | one Prim.wait whose C step blocks in 5-ms slices, each in a   | conforming | the step releases the runtime while it blocks; it takes it
                          | blocking section of its own                                   |            |  back between slices only to release it again
   s3c-cthread-burn       | hostmem's sleep; a C thread of the driver (signals blocked)   | conforming | the thread never holds the OCaml runtime; the wait is a
                          | burns CPU from open to stop                                   |            |  blocking stub
   s3c-delay-poll         | polls the word; each pause is a Prim.wait around Thread.delay | conforming | Thread.delay is a blocking stub (Unix.sleepf) and releases
                          | of at most 2 ms                                               |            |  the runtime while it blocks
   s3c-await-helper       | waits on an OCaml Condition with Prim.Lock.await; an OCaml    | conforming | Lock.await is a wait (mli: "as a wait"), blocking in
                          | helper blocks on the device (hm_wait, 1-ms slices) and        |            |  Condition.wait, which releases the runtime; the helper's own
                          | broadcasts under the lock                                     |            |  block is a blocking stub with its signals blocked
*)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------ hostmem's C side *)

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

(* ------------------------------------------------------- our C side *)

external mirror_ok : cdev -> int -> bool = "s3c_mirror_ok"
external now_ns : unit -> int = "s3c_now_ns" [@@noalloc]
external wait_rel : cdev -> int -> int -> unit = "s3c_wait_rel"
external wait_keep : cdev -> int -> int -> unit = "s3c_wait_keep"
external wait_branch : cdev -> int -> int -> unit = "s3c_wait_branch"
external spin_keep : cdev -> int -> int -> unit = "s3c_spin_keep"
external wait_once : cdev -> int -> int -> unit = "s3c_wait_once"
external wait_sliced : cdev -> int -> int -> int -> unit = "s3c_wait_sliced"
external kick : cdev -> unit = "s3c_kick"

type ev

external ev_new : unit -> ev = "s3c_ev_new"
external ev_set : ev -> unit = "s3c_ev_set"
external ev_wait : ev -> int -> bool = "s3c_ev_wait"

type burner

external burner_start : unit -> burner = "s3c_burner_start"
external burner_stop : burner -> unit = "s3c_burner_stop"

let ms = 1_000_000

(* Whether a sleeper on [seen] has still to wait: the word unmoved, no
   fault, no stop (what hm_wait waits for, read from OCaml). *)
let unmoved c seen = c_signaled c = seen && c_fault c = None && not (c_stopped c)

(* ---------------------------------------------------------- hostmem *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

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

(* What varies: the wait of sleep, and what a device of the driver starts
   at open and ends at stop. *)
module type VARIANT = sig
  val name : string
  val breaks : string

  type ext

  (* At open, inside make's masked run; may start threads of the driver. *)
  val ext_open : cdev -> ext

  (* At stop: ends what ext_open started, waiting for nothing. *)
  val ext_stop : ext -> unit

  (* sleep's wait, once hostmem's checks found the word at [seen] and
     still_ms > 0; [deadline] is now + still_ms (CLOCK_MONOTONIC ns). *)
  val wait : cdev -> ext -> seen:int -> deadline:int -> unit
end

module Make (V : VARIANT) : Rig_edge.Package = struct
  module D = struct
    type t = { c : cdev; name : string; queue : queue; ext : V.ext; mutable word : region option }
    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;
      entries : (string, int) Hashtbl.t;
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
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "blinds3c.image"; entries = Hashtbl.create 8 }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "hostmem: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

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

    (* hostmem's sleep, its wait the variant's. *)
    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        let deadline = now_ns () + (still_ms * ms) in
        V.wait d.c d.ext ~seen ~deadline;
        check_fault d
      end

    let stop d ~fault:_ =
      c_stop d.c true;
      V.ext_stop d.ext
  end

  let name = V.name

  let make dname () =
    Prim.check_unheld (V.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity in
        if not (mirror_ok c capacity) then begin
          c_stop c false;
          failwith "blinds3c: hostmem's device is not laid out as blinds3c_stubs.c's mirror says"
        end;
        let ext = try V.ext_open c with e -> c_stop c false; raise e in
        let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
        let d = { D.c; name = dname; queue; ext; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let openers () =
    Prim.check_unheld (V.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ V.name ^ "0"; V.name ^ "1" ])

  let kit = Hostmem.kit
end

(* ------------------------------------------------------- the variants *)

module No_ext = struct
  type ext = unit

  let ext_open _ = ()
  let ext_stop () = ()
end

(* ---- broken: each keeps the runtime in some wait's blocking step ---- *)

module Keep_all = struct
  let name = "s3c-keep-all"
  let breaks = "SIG-3"

  include No_ext

  let wait c () ~seen ~deadline = Prim.wait (fun () -> wait_keep c seen deadline)
end

module Keep_spin_short = struct
  let name = "s3c-keep-spin-short"
  let breaks = "SIG-3"

  include No_ext

  (* Spin first for latency, then block: the spin forgot the runtime. *)
  let wait c () ~seen ~deadline =
    Prim.wait (fun () ->
        spin_keep c seen (min deadline (now_ns () + (20 * ms)));
        wait_rel c seen deadline)
end

module Keep_branch = struct
  let name = "s3c-keep-branch"
  let breaks = "SIG-3"

  include No_ext

  let wait c () ~seen ~deadline = Prim.wait (fun () -> wait_branch c seen deadline)
end

module Keep_every_3rd = struct
  let name = "s3c-keep-every-3rd"
  let breaks = "SIG-3"

  type ext = int Atomic.t

  let ext_open _ = Atomic.make 0
  let ext_stop _ = ()

  let wait c calls ~seen ~deadline =
    if (Atomic.fetch_and_add calls 1 + 1) mod 3 = 0 then Prim.wait (fun () -> wait_keep c seen deadline)
    else Prim.wait (fun () -> wait_rel c seen deadline)
end

module Keep_tail = struct
  let name = "s3c-keep-tail"
  let breaks = "SIG-3"

  include No_ext

  let wait c () ~seen ~deadline =
    Prim.wait (fun () ->
        wait_rel c seen (deadline - (30 * ms));
        spin_keep c seen deadline)
end

module Ocaml_poll = struct
  let name = "s3c-ocaml-poll"
  let breaks = "SIG-3"

  include No_ext

  let wait c () ~seen ~deadline =
    Prim.wait (fun () ->
        while unmoved c seen && now_ns () < deadline do
          Domain.cpu_relax ()
        done)
end

module Keep_helper = struct
  let name = "s3c-keep-helper"
  let breaks = "SIG-3"

  type ext = { alive : bool Atomic.t; last : int Atomic.t; ev : ev; stop : bool Atomic.t }

  let ext_open _ = { alive = Atomic.make false; last = Atomic.make 0; ev = ev_new (); stop = Atomic.make false }

  let ext_stop e =
    Atomic.set e.stop true;
    ev_set e.ev

  (* The pump: kicks the device's sleepers every 100 ms (a heartbeat), ends
     at stop or 2 s after the last sleep. *)
  let pump c e () =
    Fun.protect
      ~finally:(fun () -> Atomic.set e.alive false)
      (fun () ->
        let rec loop () =
          if Atomic.get e.stop then ()
          else if ev_wait e.ev 100 then loop ()
          else if now_ns () - Atomic.get e.last > 2000 * ms then ()
          else begin
            kick c;
            loop ()
          end
        in
        loop ())

  let wait c e ~seen ~deadline =
    Atomic.set e.last (now_ns ());
    if Atomic.get e.alive then
      (* "the pump keeps things moving": BUG, the runtime is kept *)
      Prim.wait (fun () -> wait_keep c seen deadline)
    else begin
      Prim.wait (fun () -> wait_rel c seen deadline);
      if Atomic.compare_and_set e.alive false true then
        try ignore (Prim.spawn (pump c e)) with Failure _ | Sys_error _ -> Atomic.set e.alive false
    end
end

module Keep_cold = struct
  let name = "s3c-keep-cold"
  let breaks = "SIG-3"

  include No_ext

  let wait c () ~seen ~deadline =
    if c_signaled c = 0 then Prim.wait (fun () -> wait_keep c seen deadline)
    else Prim.wait (fun () -> wait_rel c seen deadline)
end

module Keep_after_early = struct
  let name = "s3c-keep-after-early"
  let breaks = "SIG-3"

  (* whether the device's last sleep returned early on the driver's timer *)
  type ext = bool Atomic.t

  let ext_open _ = Atomic.make false
  let ext_stop _ = ()

  let wait c early ~seen ~deadline =
    if Atomic.exchange early false then Prim.wait (fun () -> wait_keep c seen deadline)
    else begin
      let t = now_ns () + (25 * ms) in
      Prim.wait (fun () -> wait_rel c seen (min t deadline));
      if t < deadline && c_signaled c = seen then Atomic.set early true
    end
end

(* ---- conforming ---- *)

(* Some OCaml work: n turns of a float loop. *)
let compute n =
  let acc = ref 1.0 in
  for i = 1 to n do
    acc := (!acc *. 1.0000001) +. float_of_int (i land 7)
  done;
  ignore (Sys.opaque_identity !acc)

module Helper_busy_in_sleep = struct
  let name = "s3c-helper-busy-in-sleep"
  let breaks = "conforming"

  type ext = { inflight : int Atomic.t; ev : ev; stop : bool Atomic.t }

  let helper c e () =
    while not (Atomic.get e.stop) do
      if Atomic.get e.inflight > 0 then begin
        let t0 = now_ns () in
        while Atomic.get e.inflight > 0 && now_ns () - t0 < 20 * ms do
          compute 2000;
          Thread.yield ()
        done;
        kick c
      end
      else ignore (ev_wait e.ev 1000)
    done

  let ext_open c =
    let e = { inflight = Atomic.make 0; ev = ev_new (); stop = Atomic.make false } in
    ignore (Prim.spawn (helper c e));
    e

  let ext_stop e =
    Atomic.set e.stop true;
    ev_set e.ev

  let wait c e ~seen ~deadline =
    let fin () = Atomic.decr e.inflight and body () = Prim.wait (fun () -> wait_once c seen deadline) in
    Atomic.incr e.inflight;
    ev_set e.ev;
    Fun.protect ~finally:fin body
end

module Helper_busy_always = struct
  let name = "s3c-helper-busy-always"
  let breaks = "conforming"

  type ext = bool Atomic.t

  let ext_open _ =
    let stop = Atomic.make false in
    ignore
      (Prim.spawn (fun () ->
           while not (Atomic.get stop) do
             compute 20000;
             Thread.yield ()
           done));
    stop

  let ext_stop stop = Atomic.set stop true
  let wait c _ ~seen ~deadline = Prim.wait (fun () -> wait_rel c seen deadline)
end

module Early_often = struct
  let name = "s3c-early-often"
  let breaks = "conforming"

  include No_ext

  let wait c () ~seen ~deadline = Prim.wait (fun () -> wait_rel c seen (min deadline (now_ns () + ms)))
end

module Tiny_waits = struct
  let name = "s3c-tiny-waits"
  let breaks = "conforming"

  include No_ext

  (* Whole milliseconds with hostmem's own stub, the last fraction with
     ours: a call with still_ms = 1 still blocks (TIME-4's "blocks until"). *)
  let wait c () ~seen ~deadline =
    while unmoved c seen && now_ns () < deadline do
      if deadline - now_ns () >= ms then Prim.wait (fun () -> c_wait c seen 1)
      else Prim.wait (fun () -> wait_rel c seen deadline)
    done
end

module Sliced_cwait = struct
  let name = "s3c-sliced-cwait"
  let breaks = "conforming"

  include No_ext

  let wait c () ~seen ~deadline = Prim.wait (fun () -> wait_sliced c seen deadline (5 * ms))
end

module Cthread_burn = struct
  let name = "s3c-cthread-burn"
  let breaks = "conforming"

  type ext = burner

  let ext_open _ = burner_start ()
  let ext_stop b = burner_stop b
  let wait c _ ~seen ~deadline = Prim.wait (fun () -> wait_rel c seen deadline)
end

module Delay_poll = struct
  let name = "s3c-delay-poll"
  let breaks = "conforming"

  include No_ext

  let wait c () ~seen ~deadline =
    let rec go () =
      let rem = deadline - now_ns () in
      if rem > 0 && unmoved c seen then begin
        Prim.wait (fun () -> Thread.delay (float_of_int (min rem (2 * ms)) /. 1e9));
        go ()
      end
    in
    go ()
end

module Await_helper = struct
  let name = "s3c-await-helper"
  let breaks = "conforming"

  type ext = { l : Prim.Lock.t; cv : Condition.t; sleepers : int Atomic.t; ev : ev; stop : bool Atomic.t }

  let helper c e () =
    while not (Atomic.get e.stop) do
      if Atomic.get e.sleepers > 0 then begin
        c_wait c (c_signaled c) 1;
        Prim.Lock.protect e.l (fun () -> Condition.broadcast e.cv)
      end
      else ignore (ev_wait e.ev 1000)
    done

  let ext_open c =
    let e =
      {
        l = Prim.Lock.create "blinds3c.await";
        cv = Condition.create ();
        sleepers = Atomic.make 0;
        ev = ev_new ();
        stop = Atomic.make false;
      }
    in
    ignore (Prim.spawn (helper c e));
    e

  let ext_stop e =
    Atomic.set e.stop true;
    ev_set e.ev

  let wait c e ~seen ~deadline =
    let fin () = Atomic.decr e.sleepers
    and body () =
      Prim.Lock.protect e.l (fun () ->
          while unmoved c seen && now_ns () < deadline do
            Prim.Lock.await e.l e.cv
          done)
    in
    Atomic.incr e.sleepers;
    ev_set e.ev;
    Fun.protect ~finally:fin body
end

let pack (module V : VARIANT) = (V.breaks, (module Make (V) : Rig_edge.Package))

let drivers =
  List.map pack
    [
      (module Keep_all : VARIANT);
      (module Keep_spin_short);
      (module Keep_branch);
      (module Keep_every_3rd);
      (module Keep_tail);
      (module Ocaml_poll);
      (module Keep_helper);
      (module Keep_cold);
      (module Keep_after_early);
      (module Helper_busy_in_sleep);
      (module Helper_busy_always);
      (module Early_often);
      (module Tiny_waits);
      (module Sliced_cwait);
      (module Cthread_burn);
      (module Delay_poll);
      (module Await_helper);
    ]

let kit_more = Hostmem.kit_more
