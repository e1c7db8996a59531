(* blindmb: hostmem's device (its C stubs, hm_*, from hostmem's library) on a
   machine with a bus (blindmb_stubs.c), about the Memory clauses MEM-5,
   MEM-8, MEM-9, MEM-10 and MEM-11.  Every driver is the functor Make below
   with one configuration; each broken one breaks exactly one clause.

   The machine.  Each driver package has two GPUs of its own ("hostmem0",
   "hostmem1", at PCI 0000:BB:00.0 with BB its own), so that one package's
   claims never touch another's.  A GPU's Device memory is an arena of
   VRAM (16 MiB of host memory, kept for the whole process); its BAR shows
   the first 2 MiB of it to the bus (all of it on mb-ok-fullbar), at bus
   address bar+offset, through an HDP cache: a bus function's writes are
   posted until the driver flushes the HDP, its reads are cached until the
   driver invalidates it.  Other functions: 0000:41:00.0 (a NIC that
   reaches GPU BARs peer to peer: the kit's bus_function), 0000:00:1f.3 (an
   audio function, no peer-to-peer DMA).  The kit's bus_agent is the NIC
   (or any function) reading and writing through the BAR/HDP path, only
   within what a dma of that function answered.

   Device memory: a budget token charged to hostmem's budget (one budget for
   regions, queues and entries, as hostmem) plus a range of the arena,
   first fit, bottom up, mapped into hostmem's table (hm_map) so that work
   reaches it.  Mapped/Pinned memory is hostmem's own, uncharged.

   driver             | what it does                                             | clause broken | the document's sentence it breaks / that allows it
   -------------------+----------------------------------------------------------+---------------+----------------------------------------------------
   mb-peer-shared     | map_peer caches one import per (d, r): a second          | MEM-5         | "map_peer d d' r maps for d the memory of r ... d's GPU
                      | map_peer of r returns a region over the same import,     |               | may already map r's memory, through r or another region.
                      | and the free of either unmaps it (no refcount)           |               | Each region must keep the memory mapped until rig frees it."
   mb-peer-lru        | the importer has two peer-import slots (a tiny GART      | MEM-5         | "Each region must keep the memory mapped until rig frees it."
                      | aperture): a third live map_peer evicts the oldest       |               |
                      | mapping, which rig still holds                           |               |
   mb-peer-stop-unmap | the exporter revokes every mapping other devices made    | MEM-5         | "Each region must keep the memory mapped until rig frees it."
                      | of its memory when it stops (dma-buf style revoke)       |               | (rig may free after stop: "may free it after stop")
   mb-dma-errmsg      | dma's "no such function" path answers a generic text     | MEM-8         | "It is Error why, why naming fn, if fn is not a bus address
                      | that does not name fn (the parse path does)              |               | or names no function of the machine."
   mb-dma-nocheck     | dma parses fn but never looks it up: any well-formed     | MEM-8         | same sentence: an absent function must be Error naming fn
                      | address that names no function answers Ok                |               |
   mb-dma-migrate     | a region beyond the BAR is moved into the BAR (new       | MEM-9         | "The driver decides whether fn reaches the memory where it
                      | placement, new handle) instead of Error                  |               | lies, and must return Error rather than move the memory
                      |                                                          |               | where fn reaches it."
   mb-dma-pin         | every first dma of a region moves it into a P2P pool at  | MEM-9         | same sentence
                      | the top of the BAR (TTM-style pin-for-export), new handle|               |
   mb-dma-noinval     | never invalidates the HDP read cache after work: a bus   | MEM-10        | "It must make the memory visible to fn after each value's
                      | function that read r before the work reads stale bytes   |               | work that wrote it"
   mb-dma-nowflush    | never flushes the HDP's posted writes at submit: work    | MEM-10        | "... and visible to the device's later work after fn wrote
                      | does not see what fn wrote (the CPU path still flushes)  |               | it and a call of rig's submits that work."
   mb-bus-free-reuse  | free of a Bus region gives its range and budget back     | MEM-11        | "For Bus, the driver must keep the memory where it is, out
                      | like any region: a later alloc lands on fn's window      |               | of any other allocation, ... whatever rig frees"
   mb-bus-reopen      | the claim on d's function lives in the device and is     | MEM-11        | "... and keep d's function from any other open, until the
                      | dropped at stop: a new open of the name succeeds and its |               | process exits, whatever rig frees or stops meanwhile."
                      | fresh VRAM heap hands out the Bus memory again           |               |
   mb-bus-trim        | freed Bus ranges are parked, but when the budget runs    | MEM-11        | "keep the memory where it is, out of any other allocation
                      | out alloc reclaims them (a shrinker) and reuses them     |               | ... until the process exits"
   mb-ok-refcount     | peer imports shared per (d, r) and refcounted: unmapped  | conforming    | "d's GPU may already map r's memory, through r or another
                      | when the last region over them is freed, never at stop   |               | region" allows sharing; the memory stays mapped until freed
   mb-ok-strict       | dma answers Ok only for the NIC; every other function,   | conforming    | "The driver decides whether fn reaches the memory where it
                      | GPUs included, Error naming fn and the cause             |               | lies": Error is always a valid answer for a real function
   mb-ok-arena        | one VRAM heap per GPU for the whole process (not per     | conforming    | MEM-11: "out of any other allocation ... until the process
                      | open); Bus ranges are retired from it for good           |               | exits"; STOP-8: frees after a reopen touch only own ranges
   mb-ok-fullbar      | a resizable BAR: the whole VRAM is on the bus, so no dma | conforming    | "Error why if it cannot [reach], ... such as a memory BAR
                      | of the NIC is ever refused for lying beyond the BAR      |               | smaller than the GPU's memory": here it never is smaller

   Common to every driver but the one that breaks it: dma checks that fn is
   a bus address (DDDD:BB:DD.F, hex, device <= 1f, function <= 7) and a
   function of the machine, Error naming fn otherwise; answers Error naming
   the cause for host memory, for the audio function and for a region
   beyond the BAR; keeps a Bus region's range and budget for the process
   and refuses every later open of a GPU that answered a Bus (Failure from
   the opener's make); flushes the HDP at submit and invalidates it at the
   end of every submission; the CPU's Place function flushes the HDP before
   it reads or writes and drops the read cache after it writes.

   Ambiguities met, and how I decided each:
   1. "keep d's function from any other open": "d's function" read as the
      PCI function that is d (its GPU), not fn: another open of the same
      hardware would reset it and reuse its memory.  Decided: after a dma
      answered Ok on d, every later make of d's name raises Failure, for the
      rest of the process.  (A certifier that reopens a name after its
      MEM-11 probe sees that Failure on every conforming mb-* driver.)
   2. What "visible" means without a real bus: an HDP cache on the BAR path
      (posted writes, cached reads), as on real GPUs; visibility to fn after
      work = the queue invalidates the read cache after the work, before its
      signal; visibility to later work = the posted writes are flushed at
      the submit of that work.  The CPU's Place function sees through the
      same flush, so host reads never disagree with the bus because of the
      cache (a certifier comparing reach and agent is not misled).
   3. Whether Bus memory stays charged after rig frees it: decided yes (the
      budget is the GPU's VRAM, and that VRAM stays used).  A certifier that
      frees everything and expects the whole budget back after a dma sees
      less.
   4. Whether a region that dma moves is caught by anything but its handle:
      MEM-9's drivers change locate's handle (a new placement), as TTM
      does; a move that kept the handle would be observable through nothing
      the contract offers, so it is not in the set.
   5. mb-peer-stop-unmap: stop d' releases mappings d made (regions rig
      made through d, not through d').  STOP-5 says stop "must release
      nothing rig made"; I read STOP-5 as about the stopped device's own
      regions and class this driver under MEM-5 only, whose sentence names
      the mapping's lifetime.  If the certifier also blames STOP-5 here, that
      is the reason.
   6. dma of Mapped/Pinned memory: the kit only promises a small Device
      region; every driver answers Error naming the cause for host memory
      (allowed: "The driver decides whether fn reaches the memory").
   7. Bus addresses in another case ("0000:41:00.0" vs upper case hex):
      accepted in either case, answered and recorded under fn as given.
   8. Limit of the model: a dma called while work that writes r is already
      running: the invalidate at that work's end covers it (it drops the
      whole read cache), so no special case is needed. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------- hostmem's C side *)

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

(* ------------------------------------------------- the machine's C side *)

external bm_arena : int -> nativeint = "bm_arena"
external bm_copy : nativeint -> nativeint -> int -> unit = "bm_copy"
external bm_hdp_new : nativeint -> int -> nativeint = "bm_hdp_new"
external bm_hdp_reg : nativeint -> nativeint = "bm_hdp_reg"
external bm_hdp_read : nativeint -> int -> int -> string = "bm_hdp_read"
external bm_hdp_write : nativeint -> int -> string -> unit = "bm_hdp_write"
external bm_hdp_flush : nativeint -> unit = "bm_hdp_flush"
external bm_hdp_inval : nativeint -> unit = "bm_hdp_inval"
external bm_q_fns : unit -> nativeint = "bm_q_fns"
external bm_q_new : nativeint -> nativeint -> nativeint -> int -> int -> nativeint = "bm_q_new"

let q_wflush = 1
let q_rinval = 2

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let vram_size = 16 lsl 20
let small_bar = 2 lsl 20
let page = 4096
let align = 64
let round_up x k = (x + k - 1) / k * k
let nic = "0000:41:00.0"
let audio = "0000:00:1f.3"

(* ------------------------------------------------------ VRAM heaps *)

(* Free ranges of a heap, sorted by offset, first fit. *)
type heap = { mutable free : (int * int) list }

let heap () = { free = [ (0, vram_size) ] }

(* [take h n ~lo ~hi ~top]: n bytes within [lo, hi), the lowest (or the
   highest with top) place that fits. *)
let take h n ~lo ~hi ~top =
  let fits (o, l) =
    let s = max o lo and e = min (o + l) hi in
    if e - s >= n then Some (if top then (e - n) / align * align else s) else None
  in
  let cands = List.filter_map (fun r -> Option.map (fun s -> (r, s)) (fits r)) h.free in
  let pick = match (cands, top) with [], _ -> None | c :: _, false -> Some c | l, true -> Some (List.nth l (List.length l - 1)) in
  match pick with
  | None -> None
  | Some ((o, l), s) ->
      let before = if s > o then [ (o, s - o) ] else [] in
      let after = if s + n < o + l then [ (s + n, o + l - (s + n)) ] else [] in
      h.free <- List.concat_map (fun r -> if r = (o, l) then before @ after else [ r ]) h.free;
      Some s

let give h off n =
  let rec ins = function
    | [] -> [ (off, n) ]
    | (o, l) :: rest when o > off -> (off, n) :: (o, l) :: rest
    | r :: rest -> r :: ins rest
  in
  let rec merge = function
    | (o1, l1) :: (o2, l2) :: rest when o1 + l1 = o2 -> merge ((o1, l1 + l2) :: rest)
    | r :: rest -> r :: merge rest
    | [] -> []
  in
  h.free <- merge (ins h.free)

(* ------------------------------------------------------- the machine *)

type hw = {
  hw_name : string;          (* the opener's name *)
  fn : string;               (* the GPU's own PCI function *)
  bar : int64;               (* bus address of VRAM offset 0 *)
  bar_size : int;
  vram : nativeint;
  hdp : nativeint;
  reg : nativeint;           (* the HDP invalidate register *)
  mutable claimed : bool;    (* kept from any other open (MEM-11) *)
  process_heap : heap;       (* mb-ok-arena's heap, for the whole process *)
}

let gpus : hw list Atomic.t = Atomic.make []
let windows : (string * int64 * int) list Atomic.t = Atomic.make []
let n_gpus = Atomic.make 0

let rec push a x =
  let l = Atomic.get a in
  if not (Atomic.compare_and_set a l (x :: l)) then push a x

let new_hw hw_name ~bar_size =
  let k = Atomic.fetch_and_add n_gpus 1 in
  let vram = bm_arena vram_size in
  let hdp = bm_hdp_new vram bar_size in
  let hw =
    {
      hw_name;
      fn = Printf.sprintf "0000:%02x:00.0" (0x10 + k);
      bar = Int64.add 0x40_0000_0000L (Int64.shift_left (Int64.of_int k) 32);
      bar_size;
      vram;
      hdp;
      reg = bm_hdp_reg hdp;
      claimed = false;
      process_heap = heap ();
    }
  in
  push gpus hw;
  hw

let is_hex c = match c with '0' .. '9' | 'a' .. 'f' | 'A' .. 'F' -> true | _ -> false

(* DDDD:BB:DD.F *)
let bus_address fn =
  String.length fn = 12
  && fn.[4] = ':' && fn.[7] = ':' && fn.[10] = '.'
  && List.for_all (fun i -> is_hex fn.[i]) [ 0; 1; 2; 3; 5; 6; 8; 9 ]
  && (match fn.[11] with '0' .. '7' -> true | _ -> false)
  && int_of_string ("0x" ^ String.sub fn 8 2) <= 0x1f

type fn_kind = Nic | Audio | Gpu of hw

let lookup fn =
  let f = String.lowercase_ascii fn in
  if f = nic then Some Nic
  else if f = audio then Some Audio
  else Option.map (fun h -> Gpu h) (List.find_opt (fun h -> h.fn = f) (Atomic.get gpus))

(* The PCI function at fn, through the BAR and its HDP, within what a dma of
   fn answered.  No lock of the driver's, no Driver function. *)
let through ~fn (Bus a) n =
  if n < 0 then invalid_arg "blindmb bus: negative length";
  let a_end = Int64.add a (Int64.of_int n) in
  let inside (f, b, l) = f = fn && Int64.compare a b >= 0 && Int64.compare a_end (Int64.add b (Int64.of_int l)) <= 0 in
  if not (List.exists inside (Atomic.get windows)) then
    invalid_arg (Printf.sprintf "blindmb bus: 0x%Lx+%d is not within memory a dma of %s answered" a n fn);
  match
    List.find_opt
      (fun h -> Int64.compare a h.bar >= 0 && Int64.compare a_end (Int64.add h.bar (Int64.of_int h.bar_size)) <= 0)
      (Atomic.get gpus)
  with
  | None -> invalid_arg (Printf.sprintf "blindmb bus: 0x%Lx is in no BAR" a)
  | Some h -> (h, Int64.to_int (Int64.sub a h.bar))

let agent =
  {
    read = (fun ~fn b n -> let h, off = through ~fn b n in bm_hdp_read h.hdp off n);
    write = (fun ~fn b s -> let h, off = through ~fn b (String.length s) in bm_hdp_write h.hdp off s);
  }

(* ------------------------------------------------------------ images *)

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
                | None, _ -> Error (Printf.sprintf "blindmb: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindmb: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindmb: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindmb: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindmb: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindmb: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------ configurations *)

type peer_mode = Own | Shared | Refcount

type cfg = {
  peer : peer_mode;          (* how map_peer makes imports *)
  peer_slots : int option;   (* mb-peer-lru: live imports per importer *)
  revoke_at_stop : bool;     (* mb-peer-stop-unmap *)
  name_absent : bool;        (* false: mb-dma-errmsg *)
  check_absent : bool;       (* false: mb-dma-nocheck *)
  nic_only : bool;           (* mb-ok-strict *)
  move_far : bool;           (* mb-dma-migrate *)
  move_always : bool;        (* mb-dma-pin *)
  qflags : int;              (* q_wflush lor q_rinval; less: MEM-10's *)
  keep_bus : [ `Keep | `Reuse | `Trim ];  (* MEM-11's memory *)
  claim_for_good : bool;     (* false: mb-bus-reopen *)
  process_heap : bool;       (* mb-ok-arena *)
  full_bar : bool;           (* mb-ok-fullbar *)
}

let conforming =
  {
    peer = Own;
    peer_slots = None;
    revoke_at_stop = false;
    name_absent = true;
    check_absent = true;
    nic_only = false;
    move_far = false;
    move_always = false;
    qflags = q_wflush lor q_rinval;
    keep_bus = `Keep;
    claim_for_good = true;
    process_heap = false;
    full_bar = false;
  }

(* ------------------------------------------------------------ drivers *)

module Make (X : sig
  val name : string
  val cfg : cfg
end) : Rig_edge.Package = struct
  let cfg = X.cfg
  let bar_size = if cfg.full_bar then vram_size else small_bar
  let hws = List.map (fun n -> (n, new_hw n ~bar_size)) [ "hostmem0"; "hostmem1" ]
  let lock = Prim.Lock.create ("blindmb." ^ X.name)
  let sp = Printf.sprintf

  module D = struct
    type t = {
      c : cdev;
      id : int;
      hw : hw;
      queue : queue;
      reg_h : int;
      heap : heap;  (* this open's VRAM heap *)
      mutable word : region option;
      imports : (int * int, import) Hashtbl.t;  (* (exporter id, its handle) *)
      mutable live_maps : region list;  (* newest first (peer_slots) *)
      mutable exports : region list;    (* mappings others made of mine *)
      mutable parked : region list;     (* freed Bus regions (`Trim) *)
    }

    and region = {
      owner : t;
      mutable h : int;
      size : int;
      kind : rkind;
      mutable off : int;      (* VRAM offset (Vram) *)
      mutable token : int;    (* budget charge (Vram) *)
      mutable bus : bool;     (* a dma answered Ok for it *)
      mutable freed : bool;
      mutable revoked : bool; (* a mapping the driver unmapped itself *)
      mutable imp : import option;
    }

    and import = { ih : int; key : int * int; mutable refs : int; mutable gone : bool }
    and rkind = Vram | Host | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      ilock : Prim.Lock.t;
      entries : (string, int) Hashtbl.t;
    }

    exception Fault of string

    let key = X.name
    let facts d = { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }
    let in_bar r = r.kind = Vram && r.off + r.size <= r.owner.hw.bar_size

    (* The CPU's access: the HDP flushed first, so that the host sees what
       the bus wrote; its read cache dropped after a write. *)
    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindmb: read out of the region";
          if in_bar r then bm_hdp_flush r.owner.hw.hdp;
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindmb: read of an unmapped region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindmb: write out of the region";
          if in_bar r then bm_hdp_flush r.owner.hw.hdp;
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindmb: write of an unmapped region");
          if in_bar r then bm_hdp_inval r.owner.hw.hdp

    (* No lock, no wait, no fault (LOCK-5, LOCK-6). *)
    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true
    let heap_of d = if cfg.process_heap then d.hw.process_heap else d.heap
    let region owner h size kind = { owner; h; size; kind; off = -1; token = 0; bus = false; freed = false; revoked = false; imp = None }

    (* Bus regions parked by `Trim, given back when the budget runs out. *)
    let unpark d =
      List.iter
        (fun r ->
          give (heap_of d) r.off (round_up r.size align);
          ignore (c_free d.c r.token);
          r.token <- 0)
        d.parked;
      d.parked <- []

    let vram_alloc d n =
      let n' = round_up n align in
      let token =
        match c_alloc d.c true n' with
        | 0 when cfg.keep_bus = `Trim && d.parked <> [] -> unpark d; c_alloc d.c true n'
        | t -> t
      in
      if token = 0 then None
      else
        match take (heap_of d) n' ~lo:0 ~hi:vram_size ~top:false with
        | None -> ignore (c_free d.c token); None
        | Some off ->
            let h = c_map d.c (Nativeint.add d.hw.vram (Nativeint.of_int off)) n in
            if h = 0 then begin
              give (heap_of d) off n';
              ignore (c_free d.c token);
              raise (Fault "blindmb: no host memory for the region's table entry")
            end;
            let r = region d h n Vram in
            r.off <- off;
            r.token <- token;
            Some r

    let alloc d m n =
      if n <= 0 then invalid_arg "blindmb: alloc of a non-positive size";
      match m with
      | Device -> Prim.Lock.protect lock (fun () -> vram_alloc d n)
      | Mapped | Pinned ->
          let h = c_alloc d.c false n in
          if h = 0 then None else Some (region d h n Host)

    let forget_map d m = d.live_maps <- List.filter (fun x -> x != m) d.live_maps

    let free _ r =
      Prim.Lock.protect lock (fun () ->
          if r.freed then invalid_arg "blindmb: free of a region that is not live";
          let d = r.owner in
          match r.kind with
          | Word -> ()
          | Host ->
              if not (c_free d.c r.h) then invalid_arg "blindmb: free of a region that is not live";
              r.freed <- true
          | Mapping ->
              r.freed <- true;
              forget_map d r;
              (match r.imp with
              | Some imp ->
                  imp.refs <- imp.refs - 1;
                  let last = match cfg.peer with Refcount -> imp.refs = 0 | _ -> true in
                  if last && not imp.gone then begin
                    imp.gone <- true;
                    Hashtbl.remove d.imports imp.key;
                    ignore (c_free d.c imp.ih)
                  end
              | None -> if not r.revoked then ignore (c_free d.c r.h))
          | Vram ->
              if not (c_free d.c r.h) then invalid_arg "blindmb: free of a region that is not live";
              r.freed <- true;
              if r.bus then (
                match cfg.keep_bus with
                | `Keep -> () (* its range and its budget stay out of every allocation *)
                | `Trim -> d.parked <- r :: d.parked
                | `Reuse ->
                    give (heap_of d) r.off (round_up r.size align);
                    ignore (c_free d.c r.token))
              else begin
                give (heap_of d) r.off (round_up r.size align);
                ignore (c_free d.c r.token)
              end)

    let new_map d h size =
      let m = region d h size Mapping in
      (match cfg.peer_slots with
      | Some k when List.length d.live_maps >= k ->
          (* evict the oldest import: its slot goes to the new one *)
          let rec split = function [ x ] -> ([], x) | x :: rest -> let l, y = split rest in (x :: l, y) | [] -> assert false in
          let keep, old = split d.live_maps in
          d.live_maps <- keep;
          ignore (c_free d.c old.h);
          old.revoked <- true
      | _ -> ());
      d.live_maps <- m :: d.live_maps;
      m

    let map_peer d _ r =
      Prim.Lock.protect lock (fun () ->
          let fresh () =
            let h = c_map_peer d.c r.owner.c r.h in
            if h = 0 then raise (Fault "blindmb: map_peer of a region that is not live");
            h
          in
          let m =
            match cfg.peer with
            | Own -> new_map d (fresh ()) r.size
            | Shared | Refcount ->
                let k = (r.owner.id, r.h) in
                let imp =
                  match Hashtbl.find_opt d.imports k with
                  | Some imp -> imp.refs <- imp.refs + 1; imp
                  | None ->
                      let imp = { ih = fresh (); key = k; refs = 1; gone = false } in
                      Hashtbl.replace d.imports k imp;
                      imp
                in
                let m = region d imp.ih r.size Mapping in
                m.imp <- Some imp;
                m
          in
          if cfg.revoke_at_stop then r.owner.exports <- m :: r.owner.exports;
          m)

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindmb: no host memory for the mapping");
      region d h n Mapping

    let map_host d p n = map d p (round_up n page)

    (* Move r to VRAM offset off' (MEM-9's drivers): a new placement, a new
       handle, the bytes copied, the old range given back. *)
    let move d r off' =
      let a' = Nativeint.add d.hw.vram (Nativeint.of_int off') in
      let h' = c_map d.c a' r.size in
      if h' = 0 then raise (Fault "blindmb: no host memory for the moved region");
      bm_copy a' (Nativeint.add d.hw.vram (Nativeint.of_int r.off)) r.size;
      ignore (c_free d.c r.h);
      give (heap_of d) r.off (round_up r.size align);
      r.h <- h';
      r.off <- off'

    let dma d r ~fn =
      Prim.Lock.protect lock (fun () ->
          let bar = d.hw.bar_size in
          if not (bus_address fn) then Error (sp "%s: dma: %S is not a PCI bus address (DDDD:BB:DD.F)" X.name fn)
          else
            let kind =
              match lookup fn with
              | Some k -> Ok k
              | None when not cfg.check_absent -> Ok Nic (* the address is well formed: program the IOMMU *)
              | None when not cfg.name_absent -> Error (sp "%s: dma: no such PCI device on this machine" X.name)
              | None -> Error (sp "%s: dma: no PCI function at %S on this machine" X.name fn)
            in
            match kind with
            | Error e -> Error e
            | Ok Audio -> Error (sp "%s: dma: %s (audio) does no peer-to-peer DMA: it cannot reach GPU memory" X.name fn)
            | Ok (Gpu _) when cfg.nic_only ->
                Error (sp "%s: dma: %s is a GPU: GPU-to-GPU traffic goes through the host bridge, not directly" X.name fn)
            | Ok _ when r.kind <> Vram ->
                Error (sp "%s: dma: %s cannot reach the region: it is host memory, not exported for peer DMA" X.name fn)
            | Ok _ -> (
                let placed =
                  if cfg.move_always && not r.bus then
                    match take (heap_of d) (round_up r.size align) ~lo:0 ~hi:bar ~top:true with
                    | Some o -> move d r o; true
                    | None -> false
                  else if r.off + r.size > bar && cfg.move_far then
                    match take (heap_of d) (round_up r.size align) ~lo:0 ~hi:bar ~top:false with
                    | Some o -> move d r o; true
                    | None -> false
                  else r.off + r.size <= bar
                in
                if not placed then
                  Error
                    (sp "%s: dma: %s cannot reach the region: it lies at VRAM offset 0x%x, beyond the GPU's %d KiB BAR \
                         (the BAR is smaller than the GPU's memory)"
                       X.name fn r.off (bar / 1024))
                else
                  let a = Int64.add d.hw.bar (Int64.of_int r.off) in
                  r.bus <- true;
                  d.hw.claimed <- true;
                  push windows (fn, a, r.size);
                  Ok (Bus a)))

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; ilock = Prim.Lock.create "blindmb.image"; entries = Hashtbl.create 8 }

    let fits f n =
      if n > capacity then
        invalid_arg (sp "blindmb: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    let entry i f =
      Prim.Lock.protect i.ilock (fun () ->
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
      Prim.Lock.protect i.ilock (fun () ->
          Hashtbl.iter (fun _ h -> if h <> 0 then ignore (c_free i.dev.c h)) i.entries;
          Hashtbl.reset i.entries)

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n
    let signaled d = c_signaled d.c
    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        Prim.wait (fun () -> c_wait d.c seen still_ms);
        check_fault d
      end

    let stop d ~fault:_ =
      c_stop d.c true;
      if cfg.revoke_at_stop || not cfg.claim_for_good then
        Prim.Lock.protect lock (fun () ->
            if cfg.revoke_at_stop then begin
              (* the exporter is going away: revoke what others imported *)
              List.iter
                (fun m ->
                  if not (m.freed || m.revoked) then begin
                    ignore (c_free m.owner.c m.h);
                    m.revoked <- true
                  end)
                d.exports;
              d.exports <- []
            end;
            if not cfg.claim_for_good then d.hw.claimed <- false)
  end

  let name = X.name
  let next_id = Atomic.make 0

  let make hw () =
    Prim.check_unheld (X.name ^ ".make");
    Prim.masked (fun () ->
        if hw.claimed then
          failwith
            (Printf.sprintf "%s: %s (PCI %s) holds memory a bus function reaches: it is kept from any other open until the process exits"
               X.name hw.hw_name hw.fn);
        let c = c_open capacity in
        let reg_h = c_map c hw.reg 64 in
        if reg_h = 0 then failwith (X.name ^ ": no host memory for the device's tables");
        let q = bm_q_new (c_ptr c) (c_fns ()) hw.hdp reg_h cfg.qflags in
        let queue = c_queue ~fns:(bm_q_fns ()) ~dev:q ~may_block:true in
        let d =
          {
            D.c;
            id = Atomic.fetch_and_add next_id 1;
            hw;
            queue;
            reg_h;
            heap = heap ();
            word = None;
            imports = Hashtbl.create 8;
            live_maps = [];
            exports = [];
            parked = [];
          }
        in
        d.word <- Some (D.region d 0 8 D.Word);
        d)

  let openers () =
    Prim.check_unheld (X.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun (n, hw) -> { name = n; make = make hw }) hws)

  let kit = { Hostmem.kit with bus_function = Some nic; bus_agent = Some agent }
end

(* ------------------------------------------------------------ the set *)

let drivers : (string * string * cfg) list =
  let c = conforming in
  [
    ("mb-peer-shared", "MEM-5", { c with peer = Shared });
    ("mb-peer-lru", "MEM-5", { c with peer_slots = Some 2 });
    ("mb-peer-stop-unmap", "MEM-5", { c with revoke_at_stop = true });
    ("mb-dma-errmsg", "MEM-8", { c with name_absent = false });
    ("mb-dma-nocheck", "MEM-8", { c with check_absent = false });
    ("mb-dma-migrate", "MEM-9", { c with move_far = true });
    ("mb-dma-pin", "MEM-9", { c with move_always = true });
    ("mb-dma-noinval", "MEM-10", { c with qflags = q_wflush });
    ("mb-dma-nowflush", "MEM-10", { c with qflags = q_rinval });
    ("mb-bus-free-reuse", "MEM-11", { c with keep_bus = `Reuse });
    ("mb-bus-reopen", "MEM-11", { c with claim_for_good = false });
    ("mb-bus-trim", "MEM-11", { c with keep_bus = `Trim });
    ("mb-ok-refcount", "conforming", { c with peer = Refcount });
    ("mb-ok-strict", "conforming", { c with nic_only = true });
    ("mb-ok-arena", "conforming", { c with process_heap = true });
    ("mb-ok-fullbar", "conforming", { c with full_bar = true });
  ]

(* (name, clause broken or "conforming", package) *)
let packages : (string * string * (module Rig_edge.Package)) list =
  List.map
    (fun (name, clause, cfg) ->
      let module P = Make (struct
        let name = name
        let cfg = cfg
      end) in
      (name, clause, (module P : Rig_edge.Package)))
    drivers
