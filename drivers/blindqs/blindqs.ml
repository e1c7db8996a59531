open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------- hostmem's device (its stubs) *)

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

(* ------------------------------------ the queue layer (blindqs_stubs.c) *)

type qdev

external q_open : nativeint -> nativeint -> int -> qdev = "qs_open"
external q_ptr : qdev -> nativeint = "qs_dev_ptr"
external q_fns : unit -> nativeint = "qs_fns"
external q_grow : qdev -> cdev -> int = "qs_grow"
external q_stop : qdev -> unit = "qs_stop"
external q_release : qdev -> cdev -> unit = "qs_release"
external q_open_here : qdev -> int = "qs_open_here"
external q_commit_here : qdev -> bool = "qs_commit_here"
external q_last : qdev -> int = "qs_last" [@@noalloc]
external q_events : qdev -> int = "qs_events" [@@noalloc]
external q_inflight : qdev -> int = "qs_inflight" [@@noalloc]
external q_chunks_live : qdev -> int = "qs_chunks_live" [@@noalloc]
external q_now_ms : unit -> int = "qs_now_ms" [@@noalloc]
external q_avail : qdev -> int = "qs_avail"
external q_wait : qdev -> int -> int -> bool -> bool -> unit = "qs_wait"

(* ----------------------------------------------------------- the twists *)

type twist =
  | Grow_publishes
  | Short_drops
  | Short_orphans
  | Sleep_holds_lock
  | Commit_busy_in_sleep
  | Stop_flushes_open
  | Stop_frees_rig
  | Fence_gone
  | Grow_generous
  | Short_halves
  | Stop_lazy
  | Sleep_early

(* The layer's mode (blindqs_stubs.c) for the twists it implements. *)
let mode_of = function
  | Grow_publishes -> 1
  | Short_drops -> 2
  | Short_orphans -> 3
  | Sleep_holds_lock -> 4
  | Commit_busy_in_sleep -> 5
  | Grow_generous -> 6
  | Short_halves -> 7
  | Stop_flushes_open | Stop_frees_rig | Fence_gone | Stop_lazy | Sleep_early -> 0

let chunk_bytes = 4096
let chunk_units = 16
let initial_units = 32

(* ------------------------------------------------------------- images *)

(* hostmem's image format (hostmem.ml), so that hostmem's kit serves. *)

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
                | None, _ -> Error (Printf.sprintf "blindqs: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindqs: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindqs: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindqs: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindqs: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindqs: not a hostmem image (no %S header)" header)

let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- drivers *)

module type SPEC = sig
  val name : string
  val twist : twist
end

(** A qs-* driver: a Package, and what the check reads of its devices. *)
module type QS = sig
  include Rig_edge.Package

  val twist : twist

  (** Chunks the queue layer made and has not given back. *)
  val chunks_live : D.t -> int

  (** The layer's free units, as a new room of another thread sees them. *)
  val avail : D.t -> int

  (** The last value given to submit. *)
  val last_value : D.t -> int
end

let next_id = Atomic.make 0

module Make (S : SPEC) : QS = struct
  let twist = S.twist

  module D = struct
    type t = {
      c : cdev;
      q : qdev;
      id : int;
      name : string;
      queue : queue;
      mutable word : region option;  (* set once at open *)
      tlock : Prim.Lock.t;  (* guards tracked (qs-stop-frees-rig only) *)
      tracked : (int, region) Hashtbl.t;  (* the regions alloc made, by handle *)
      stopped : bool Atomic.t;
      fence_gone : bool Atomic.t;  (* qs-fence-gone only *)
    }

    and region = { owner : t; h : int; size : int; kind : rkind; mutable exported : bool }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;  (* guards entries *)
      entries : (string, int) Hashtbl.t;  (* f -> handle *)
    }

    exception Fault of string

    let key = S.name

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindqs: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindqs: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindqs: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindqs: write of a freed region")

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let tracks = S.twist = Stop_frees_rig

    let alloc d m n =
      if n <= 0 then invalid_arg "blindqs: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None
      else begin
        let r = { owner = d; h; size = n; kind = Mem; exported = false } in
        if tracks then Prim.Lock.protect d.tlock (fun () -> Hashtbl.replace d.tracked h r);
        Some r
      end

    let free _ r =
      match r.kind with
      | Word -> () (* the word lives in hostmem's device, as long as it is reachable *)
      | Mem | Mapping ->
          if tracks && r.kind = Mem then
            Prim.Lock.protect r.owner.tlock (fun () -> Hashtbl.remove r.owner.tracked r.h);
          if not (c_free r.owner.c r.h) then invalid_arg "blindqs: free of a region that is not live"

    let map_peer d _ r =
      r.exported <- true;
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindqs: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping; exported = false }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindqs: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping; exported = false }

    (* The whole pages that hold the n bytes (MEM-7). *)
    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindqs: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create "blindqs.image"; entries = Hashtbl.create 8 }

    let fits f n =
      if n > Hostmem.capacity then
        invalid_arg
          (Printf.sprintf "blindqs: %s needs %d bytes of scratch, the device has %d in all" f n Hostmem.capacity)

    (* As hostmem's entry: the slot is made before the scratch is charged and
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

    (* The layer's growth (twisted per driver in blindqs_stubs.c), then
       hostmem's (nothing when its room answered RIG_ROOM). *)
    let grow d =
      let a = q_grow d.q d.c in
      let b = c_grow d.c in
      if a + b = 0 then Grown else Short (a + b)

    let signaled d =
      match S.twist with
      | Fence_gone when Atomic.get d.stopped ->
          (* the twist: the fence page is unmapped once it has shown the
             last value after stop *)
          if Atomic.get d.fence_gone then raise (Fault "blindqs: the fence page was unmapped after stop");
          let v = c_signaled d.c in
          if v = q_last d.q then Atomic.set d.fence_gone true;
          v
      | _ -> c_signaled d.c

    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    (* qs-sleep-early: waits in slices of at most 2 ms and returns early once
       a room, submit or commit ran or runs on the device (an event of other
       work) or the device faulted. *)
    let sleep_early d ~seen ~still_ms =
      let t0 = q_now_ms () and ev0 = q_events d.q in
      let rec go () =
        let left = still_ms - (q_now_ms () - t0) in
        if left > 0 && c_signaled d.c = seen && q_events d.q = ev0 && q_inflight d.q = 0 then begin
          Prim.wait (fun () -> c_wait d.c seen (min left 2));
          check_fault d;
          go ()
        end
      in
      go ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        (match S.twist with
        | Sleep_holds_lock -> Prim.wait (fun () -> q_wait d.q seen still_ms true false)
        | Commit_busy_in_sleep -> Prim.wait (fun () -> q_wait d.q seen still_ms false true)
        | Sleep_early -> sleep_early d ~seen ~still_ms
        | _ -> Prim.wait (fun () -> c_wait d.c seen still_ms));
        check_fault d
      end

    (* Waits (at most ms) until the word shows v. *)
    let wait_word d v ms =
      let t0 = q_now_ms () in
      let rec go () =
        let now = c_signaled d.c in
        let left = ms - (q_now_ms () - t0) in
        if now <> v && left > 0 then begin
          Prim.wait (fun () -> c_wait d.c now (min left 5));
          go ()
        end
      in
      go ()

    (* hostmem's stop: drops what was encoded and not committed, writes the
       last value now or once the running part ends; the layer drops its
       staging and reservations. *)
    let base_stop d =
      q_stop d.q;
      c_stop d.c true;
      Atomic.set d.stopped true

    (* qs-stop-lazy: the layer's chunks are given back by a thread of the
       driver once the word shows the last value (no work runs), and a
       little later. *)
    let reaper d () =
      let last = q_last d.q and t0 = q_now_ms () in
      while c_signaled d.c <> last && q_now_ms () - t0 < 2000 do
        Thread.delay 0.001
      done;
      Thread.delay 0.03;
      q_release d.q d.c

    let stop d ~fault:_ =
      match S.twist with
      | Stop_flushes_open ->
          (* the twist: on an idle device, the calling thread's open command
             buffer is committed ("flushed") instead of dropped, and stop
             lets it drain so that the last value is in the word before it
             returns *)
          let last = q_last d.q in
          let flushed = (not (c_busy d.c)) && q_open_here d.q > 0 && q_commit_here d.q in
          if flushed then wait_word d last 20;
          base_stop d;
          q_release d.q d.c;
          if flushed then wait_word d last 1000
      | Stop_frees_rig ->
          (* the twist: on an idle device, stop also frees the memory rig
             allocated and no other device maps ("the device's memory dies
             with it") *)
          let idle = not (c_busy d.c) in
          base_stop d;
          q_release d.q d.c;
          if idle then begin
            let victims =
              Prim.Lock.protect d.tlock (fun () ->
                  let l = Hashtbl.fold (fun _ r acc -> if r.exported then acc else r :: acc) d.tracked [] in
                  Hashtbl.reset d.tracked;
                  l)
            in
            List.iter (fun r -> ignore (c_free d.c r.h)) victims
          end
      | Stop_lazy ->
          base_stop d;
          ignore (Prim.spawn (reaper d))
      | _ ->
          base_stop d;
          q_release d.q d.c
  end

  let name = S.name

  let make name () =
    Prim.check_unheld "Blindqs.make";
    Prim.masked (fun () ->
        let c = c_open Hostmem.capacity in
        let q = q_open (c_fns ()) (c_ptr c) (mode_of S.twist) in
        let queue = c_queue ~fns:(q_fns ()) ~dev:(q_ptr q) ~may_block:true in
        let d =
          {
            D.c;
            q;
            id = Atomic.fetch_and_add next_id 1;
            name;
            queue;
            word = None;
            tlock = Prim.Lock.create (S.name ^ ".tracked");
            tracked = Hashtbl.create 16;
            stopped = Atomic.make false;
            fence_gone = Atomic.make false;
          }
        in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word; exported = false };
        d)

  let device_names = [ S.name ^ "-0"; S.name ^ "-1" ]

  let openers () =
    Prim.check_unheld "Blindqs.openers";
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) device_names)

  let kit = Hostmem.kit
  let chunks_live (d : D.t) = q_chunks_live d.q
  let avail (d : D.t) = q_avail d.q
  let last_value (d : D.t) = q_last d.q
end

let spec name twist = (module struct let name = name let twist = twist end : SPEC)

let drivers : (module QS) list =
  List.map
    (fun (n, t) ->
      let module S = (val spec n t) in
      (module Make (S) : QS))
    [
      ("qs-grow-publishes", Grow_publishes);
      ("qs-short-drops", Short_drops);
      ("qs-short-orphans", Short_orphans);
      ("qs-sleep-holds-lock", Sleep_holds_lock);
      ("qs-commit-busy-in-sleep", Commit_busy_in_sleep);
      ("qs-stop-flushes-open", Stop_flushes_open);
      ("qs-stop-frees-rig", Stop_frees_rig);
      ("qs-fence-gone", Fence_gone);
      ("qs-grow-generous", Grow_generous);
      ("qs-short-halves", Short_halves);
      ("qs-stop-lazy", Stop_lazy);
      ("qs-sleep-early", Sleep_early);
    ]

(* What the plugin registers beyond each kit: hostmem's. *)
let kit_more = Hostmem.kit_more
