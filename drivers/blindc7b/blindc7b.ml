(* blindc7b: ten rig drivers over hostmem's device (hostmem_stubs.c, the
   hm_* functions), each with a prepare that does real work in images of
   several functions: it "compiles" (a wait of compile_delay seconds inside
   Rig_edge_primitives.wait, as if waiting for a compiler) and then makes
   the function's program (its scratch memory, charged to the device's
   budget by hm_entry, exactly what entry makes).  A prepared program waits
   in the image, unclaimed, until the function's next entry takes it.
   Everything but prepare (and entry for two drivers) is hostmem's.

   Every prepare holds the image's lock for its whole run, the wait
   included, so that an entry of the same image waits for it (CODE-6) and
   nothing else changes the image meanwhile.  It starts nothing for an f
   that has an entry or a prepared program (CODE-7's first half) and
   reports nothing (an f the device has no memory for stays unprepared; the
   next entry answers No_memory itself).

   Where a prepare can be ended (rig calls it inside
   Rig_edge_primitives.masked): at its wait (a signal's handler raising as
   the wait ends) or at an allocation of its own OCaml code.  A broken
   driver below changes another function's state BEFORE such a point; a
   conforming one changes nothing before its last such point, or undoes it.

   driver               | what its prepare does                      | clause it breaks     | where the bug shows (what a check must do to see it)
   ---------------------+--------------------------------------------+----------------------+-----------------------------------------------------
   c7b-lru-evict-early  | LRU cache of 2 prepared programs per image:| CODE-7 ("a prepare   | an image of >= 3 functions: prepare g, prepare h
                        | when full, frees the least recently        | that raises must     | (cache full), then prepare f ended at its wait:
                        | prepared one, THEN waits for f's compile,  | have changed         | free device memory (largest Device alloc) rises by
                        | then makes f's program                     | nothing"), for g     | g's program.  Not seen with 2 functions.
   c7b-slot-reset       | one staging slot per image: empties it     | CODE-7, for the      | prepare g, then prepare f ended at its wait: free
                        | (frees whichever function's program sits   | function in the slot | memory rises by g's program; g's next entry makes
                        | there), THEN waits, then puts f's in it    |                      | it anew (the memory goes again)
   c7b-repack           | re-packs the image's code heap: frees every| CODE-7, for every    | prepare g (and h), then prepare f ended at its wait
                        | prepared program, THEN waits for f's       | prepared function    | (or at an allocation after the frees): free memory
                        | compile, then re-makes them all and f's    |                      | rises by all their programs
   c7b-deps-abandon     | f "links against" the image's other        | CODE-7, for the      | an image where some h has no entry and no prepared
                        | functions: makes the program of each that  | dependencies         | program: prepare f ended at its wait: free memory
                        | has none, THEN waits for f's own compile   |                      | DROPS by h's program (h now has a started prepare).
                        | (the dependencies stay, abandoned)         |                      | Not seen once every other function has a program.
   c7b-inflight-counter | bumps the image's "compiler busy" counter, | CODE-7, for every    | prepare g, then prepare f ended at its wait, then
                        | waits, makes f's program, drops the        | prepared function    | entry g: free memory is unchanged by the prepare;
                        | counter; entry leaves the prepared table   | (through the shared  | the change shows at g's entry, which makes g's
                        | alone while the counter is not 0 and makes | counter)             | program anew (memory drops by it, or No_memory
                        | a program of its own                       |                      | when it does not fit) where, without the prepare
                        |                                            |                      | of f, it takes the prepared one (memory unchanged)
   c7b-steal-early      | when f's program does not fit the device,  | CODE-7, for the      | prepare g; fill device memory so that f does not
                        | frees other functions' prepared programs   | functions stolen     | fit but would once g's is gone; prepare f ended at
                        | (LRU first) until it does, THEN waits,     | from                 | its wait: free memory rises by g's program.  Not
                        | then makes f's                             |                      | seen without memory pressure.
   c7b-lru-evict-late   | the LRU cache of c7b-lru-evict-early, but  | conforming           | -  (ended: nothing evicted; completed: an eviction,
                        | picks the victim before the wait and       |                      | which the document allows: g's next entry makes
                        | evicts it after it, with nothing allocated |                      | g's program itself, CODE-6)
                        | or waited from the eviction to the return  |                      |
   c7b-evict-on-entry   | an LRU cache of at most 2 prepared programs| conforming           | -
                        | that prepare never evicts (full: prepare   |                      |
                        | makes nothing); entry, when its own program|                      |
                        | does not fit, evicts other functions'      |                      |
                        | prepared programs, LRU first, if that makes|                      |
                        | room                                       |                      |
   c7b-build-aside      | c7b-repack done right: builds the new heap | conforming           | -
                        | aside (new copies of the prepared programs |                      |
                        | and f's), waits, then swaps and frees the  |                      |
                        | old ones; an exception handler frees what  |                      |
                        | was built aside                            |                      |
   c7b-solo             | prepares f (wait, then its program) only   | conforming           | -
                        | when no other function of the image has an |                      |
                        | entry or a program; else prepares nothing  |                      |

   "Ended" means: an asynchronous exception raised as the prepare's wait
   ends (a signal's handler: Rig_edge_primitives.wait), or at an
   allocation of the prepare's own OCaml code; check/c7bcheck.ml does both
   (signal_at_wait, and Gc.Memprof at the driver's own allocations).

   Each broken driver breaks only that: a prepare that completes leaves the
   image in a state its next entries answer from as CODE-6 asks (an evicted
   or re-made program is made again by its function's entry), unload frees
   every program (prepared, abandoned or claimed), and the rest is hostmem's.

   The allocation-free stretches.  Hashtbl.replace of a key the table
   holds, Hashtbl.find of one, array reads and writes, int arithmetic and
   the hm_* calls (which allocate no OCaml value) allocate nothing; the
   image's tables get a slot for every function when the image is made, so
   that later replaces never add a key.  A conforming prepare's changes
   all lie in such a stretch, after its wait, up to the end of its own
   code (what Rig_edge_primitives.Lock.protect allocates as it gives the
   lock back is rig's code, not the prepare's own). *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------ the C side (hostmem's) *)

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

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* The compile a prepare waits for. *)
let compile_delay = 0.003

(* Prepared programs an LRU cache keeps per image. *)
let slots = 2

(* ------------------------------------------------- images (hostmem's) *)

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
                | None, _ -> Error (Printf.sprintf "c7b: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "c7b: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "c7b: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "c7b: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "c7b: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "c7b: not a hostmem image (no %S header)" header)

(* ------------------------------------------- the device (hostmem's) *)

module Dev = struct
  type t = { c : cdev; name : string; queue : queue; mutable word : region option }
  and region = { owner : t; h : int; size : int; kind : rkind }
  and rkind = Mem | Mapping | Word

  exception Fault of string

  let facts d =
    { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

  let access r = function
    | Read { off; into } ->
        let len = Bytes.length into in
        if off < 0 || off + len > r.size then invalid_arg "c7b: read out of the region";
        if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "c7b: read of a freed region")
    | Write { off; from } ->
        let len = String.length from in
        if off < 0 || off + len > r.size then invalid_arg "c7b: write out of the region";
        if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
          raise (Fault "c7b: write of a freed region")

  let locate _ r =
    { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

  let peer _ _ = true

  let alloc d m n =
    if n <= 0 then invalid_arg "c7b: alloc of a non-positive size";
    let h = c_alloc d.c (m = Device) n in
    if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

  let free _ r =
    match r.kind with
    | Word -> ()
    | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "c7b: free of a region that is not live"

  let map_peer d _ r =
    let h = c_map_peer d.c r.owner.c r.h in
    if h = 0 then raise (Fault "c7b: map_peer of a region that is not live");
    { owner = d; h; size = r.size; kind = Mapping }

  let map_host d p n =
    let h = c_map d.c p (round_up n page) in
    if h = 0 then raise (Fault "c7b: no host memory for the mapping");
    { owner = d; h; size = round_up n page; kind = Mapping }

  let dma _ _ ~fn = Error (Printf.sprintf "c7b: the host has no bus: no PCI function reaches its memory (fn %S)" fn)
  let grow d = match c_grow d.c with 0 -> Grown | n -> Short n
  let signaled d = c_signaled d.c
  let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

  let sleep d ~seen ~still_ms =
    check_fault d;
    if c_signaled d.c = seen && still_ms > 0 then begin
      Prim.wait (fun () -> c_wait d.c seen still_ms);
      check_fault d
    end

  let stop d ~fault:_ = c_stop d.c true
end

(* ------------------------------------------------------ the image *)

type image = {
  dev : Dev.t;
  names : string array;  (* its functions, in the binary's order *)
  fns : (string, kind * int) Hashtbl.t;
  lock : Prim.Lock.t;  (* guards what follows; a prepare holds it throughout *)
  entries : (string, int) Hashtbl.t;  (* f -> the handle entry answered; 0: none *)
  prepared : (string, int) Hashtbl.t;  (* f -> its prepared, unclaimed program; 0: none *)
  stamp : (string, int) Hashtbl.t;  (* f -> when its program was prepared (LRU) *)
  mutable clock : int;
  mutable in_flight : int;  (* c7b-inflight-counter: compiles under way *)
}

let make_image d b =
  match parse b with
  | Error e -> Error e
  | Ok fns ->
      let names = Array.of_list (List.map fst fns) in
      (* a slot for every function now, so that no later replace adds one *)
      let table () =
        let t = Hashtbl.create 16 in
        Array.iter (fun f -> Hashtbl.replace t f 0) names;
        t
      in
      let ft = Hashtbl.create 16 in
      List.iter (fun (f, kn) -> Hashtbl.replace ft f kn) fns;
      Ok
        {
          dev = d;
          names;
          fns = ft;
          lock = Prim.Lock.create "c7b.image";
          entries = table ();
          prepared = table ();
          stamp = table ();
          clock = 0;
          in_flight = 0;
        }

let unload i =
  Prim.Lock.protect i.lock (fun () ->
      Array.iter
        (fun f ->
          let e = Hashtbl.find i.entries f and p = Hashtbl.find i.prepared f in
          if e <> 0 then ignore (c_free i.dev.c e);
          if p <> 0 then ignore (c_free i.dev.c p);
          Hashtbl.replace i.entries f 0;
          Hashtbl.replace i.prepared f 0)
        i.names)

(* ----------------------------------- programs (nothing here allocates) *)

(* f's program: its scratch, charged to the device, as entry makes it; 0
   when the device lacks the memory. *)
let charge i k n = c_entry i.dev.c (kind_code k) (round_up n word)

let has_program i f = Hashtbl.find i.entries f <> 0 || Hashtbl.find i.prepared f <> 0

let touch i f =
  i.clock <- i.clock + 1;
  Hashtbl.replace i.stamp f i.clock

let count_prepared i =
  let c = ref 0 in
  for j = 0 to Array.length i.names - 1 do
    if Hashtbl.find i.prepared i.names.(j) <> 0 then incr c
  done;
  !c

(* The index of the least recently prepared program of a function other
   than f, or -1. *)
let lru_victim i f =
  let best = ref (-1) and best_t = ref max_int in
  for j = 0 to Array.length i.names - 1 do
    let g = i.names.(j) in
    if (not (String.equal g f)) && Hashtbl.find i.prepared g <> 0 then begin
      let t = Hashtbl.find i.stamp g in
      if t < !best_t then begin
        best := j;
        best_t := t
      end
    end
  done;
  !best

(* Frees the prepared program of names.(j). *)
let evict i j =
  let g = i.names.(j) in
  let h = Hashtbl.find i.prepared g in
  Hashtbl.replace i.prepared g 0;
  if h <> 0 then ignore (c_free i.dev.c h)

(* Whether n bytes fit the device now (a probe, given back at once). *)
let fits_now i n =
  let h = c_entry i.dev.c 0 (round_up (max n word) word) in
  h <> 0 && c_free i.dev.c h

(* The compile: as if waiting for a compiler.  Thread.delay releases the
   runtime while it blocks (SIG-3). *)
let compile_wait () = Prim.wait (fun () -> Thread.delay compile_delay)

(* [with_fn i f body]: body k n under the image's lock, for a function f of
   i that has no program yet and fits the device at all; nothing otherwise
   (prepare reports nothing, and starts nothing for an f that has an entry
   or a prepared program: CODE-7's first half). *)
let with_fn i f body =
  match Hashtbl.find_opt i.fns f with
  | Some (k, n) when n <= capacity -> Prim.Lock.protect i.lock (fun () -> if not (has_program i f) then body k n)
  | _ -> ()

(* --------------------------------------------------------- entry *)

(* CODE-5: more scratch than the device has in all. *)
let fits f n =
  if n > capacity then invalid_arg (Printf.sprintf "c7b: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

(* entry i f: the entry made before; else f's prepared program, claimed;
   else a program made now.  A prepare holds the lock, so an entry waits
   for the prepare it follows (CODE-6). *)
let entry_with ~claimable ~on_no_memory i f =
  match Hashtbl.find_opt i.fns f with
  | None -> Absent
  | Some (k, n) ->
      fits f n;
      Prim.Lock.protect i.lock (fun () ->
          let e = Hashtbl.find i.entries f in
          if e <> 0 then Entry (Int64.of_int e)
          else
            let p = Hashtbl.find i.prepared f in
            if p <> 0 && claimable i then begin
              Hashtbl.replace i.entries f p;
              Hashtbl.replace i.prepared f 0;
              Entry (Int64.of_int p)
            end
            else
              let h = charge i k n in
              Hashtbl.replace i.entries f h;
              if h <> 0 then Entry (Int64.of_int h) else on_no_memory i f k n)

let no_memory _ _ _ n = No_memory (max n word)
let entry = entry_with ~claimable:(fun _ -> true) ~on_no_memory:no_memory

(* ------------------------------------------------------- the drivers *)

module type POLICY = sig
  val name : string
  val prepare : image -> string -> unit
  val entry : image -> string -> entry_answer
end

(* ---- broken *)

module Lru_evict_early = struct
  let name = "c7b-lru-evict-early"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        (* make room in the cache for f first ... *)
        if count_prepared i >= slots then begin
          let v = lru_victim i f in
          if v >= 0 then evict i v
        end;
        (* ... then compile: an exception here leaves the victim evicted *)
        compile_wait ();
        Hashtbl.replace i.prepared f (charge i k n);
        touch i f)
end

module Slot_reset = struct
  let name = "c7b-slot-reset"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        (* the staging slot holds one program: empty it for f's ... *)
        for j = 0 to Array.length i.names - 1 do
          evict i j
        done;
        (* ... then compile: an exception here leaves the slot empty *)
        compile_wait ();
        Hashtbl.replace i.prepared f (charge i k n))
end

module Repack = struct
  let name = "c7b-repack"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        (* take every prepared program out of the code heap ... *)
        let moved = List.filter (fun g -> Hashtbl.find i.prepared g <> 0) (Array.to_list i.names) in
        List.iter
          (fun g ->
            ignore (c_free i.dev.c (Hashtbl.find i.prepared g));
            Hashtbl.replace i.prepared g 0)
          moved;
        (* ... compile f (an exception here loses them all) ... *)
        compile_wait ();
        (* ... and lay them out again, f's last *)
        List.iter
          (fun g ->
            let kg, ng = Hashtbl.find i.fns g in
            Hashtbl.replace i.prepared g (charge i kg ng))
          moved;
        Hashtbl.replace i.prepared f (charge i k n))
end

module Deps_abandon = struct
  let name = "c7b-deps-abandon"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        (* f links against the image's other functions: prepare each that
           has no program yet ... *)
        Array.iter
          (fun g ->
            if (not (String.equal g f)) && not (has_program i g) then begin
              let kg, ng = Hashtbl.find i.fns g in
              if ng <= capacity then Hashtbl.replace i.prepared g (charge i kg ng)
            end)
          i.names;
        (* ... then compile f: an exception here leaves them prepared *)
        compile_wait ();
        Hashtbl.replace i.prepared f (charge i k n))
end

module Inflight_counter = struct
  let name = "c7b-inflight-counter"

  (* While a compile is under way the prepared table may be half re-linked:
     entry then makes a program of its own and leaves the prepared one
     where it is (unload frees it). *)
  let entry = entry_with ~claimable:(fun i -> i.in_flight = 0) ~on_no_memory:no_memory

  let prepare i f =
    with_fn i f (fun k n ->
        i.in_flight <- i.in_flight + 1;
        compile_wait ();
        Hashtbl.replace i.prepared f (charge i k n);
        (* never reached when the wait raised: the counter stays up *)
        i.in_flight <- i.in_flight - 1)
end

module Steal_early = struct
  let name = "c7b-steal-early"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        (* make room on the device for f's program: give back other
           functions' prepared programs, least recent first, until it fits ... *)
        let rec room () =
          if not (fits_now i n) then begin
            let v = lru_victim i f in
            if v >= 0 then begin
              evict i v;
              room ()
            end
          end
        in
        room ();
        (* ... then compile: an exception here leaves them given back *)
        compile_wait ();
        Hashtbl.replace i.prepared f (charge i k n);
        touch i f)
end

(* ---- conforming *)

module Lru_evict_late = struct
  let name = "c7b-lru-evict-late"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        (* pick the victim now (reading only) ... *)
        let v = if count_prepared i >= slots then lru_victim i f else -1 in
        compile_wait ();
        (* ... and evict it only after the last point the prepare can be
           ended at: nothing below allocates or waits *)
        if v >= 0 then evict i v;
        Hashtbl.replace i.prepared f (charge i k n);
        touch i f)
end

module Evict_on_entry = struct
  let name = "c7b-evict-on-entry"

  (* prepare never evicts: with the cache full it makes nothing *)
  let prepare i f =
    with_fn i f (fun k n ->
        if count_prepared i < slots then begin
          compile_wait ();
          Hashtbl.replace i.prepared f (charge i k n);
          touch i f
        end)

  (* entry, when f's program does not fit, gives back other functions'
     prepared programs, least recent first, if that makes room, and tries
     again; No_memory (having made nothing) when it cannot. *)
  let reclaim i f k n =
    let b = round_up n word in
    let evictable = ref 0 in
    Array.iter
      (fun g ->
        let p = Hashtbl.find i.prepared g in
        if p <> 0 && not (String.equal g f) then evictable := !evictable + round_up (snd (Hashtbl.find i.fns g)) word)
      i.names;
    let worth = !evictable > 0 && (b <= !evictable || fits_now i (b - !evictable)) in
    let rec go () =
      let v = lru_victim i f in
      if v < 0 then No_memory (max n word)
      else begin
        evict i v;
        let h = charge i k n in
        Hashtbl.replace i.entries f h;
        if h <> 0 then Entry (Int64.of_int h) else go ()
      end
    in
    if worth then go () else No_memory (max n word)

  let entry = entry_with ~claimable:(fun _ -> true) ~on_no_memory:reclaim
end

module Build_aside = struct
  let name = "c7b-build-aside"
  let entry = entry

  let prepare i f =
    with_fn i f (fun k n ->
        let moved = Array.of_list (List.filter (fun g -> Hashtbl.find i.prepared g <> 0) (Array.to_list i.names)) in
        let m = Array.length moved in
        (* the new heap: copies of the prepared programs, then f's *)
        let aside = Array.make (m + 1) 0 in
        let undo () =
          for j = 0 to m do
            let h = aside.(j) in
            aside.(j) <- 0;
            if h <> 0 then ignore (c_free i.dev.c h)
          done
        in
        let complete () =
          let ok = ref true in
          for j = 0 to m do
            if aside.(j) = 0 then ok := false
          done;
          !ok
        in
        match
          for j = 0 to m - 1 do
            let kg, ng = Hashtbl.find i.fns moved.(j) in
            aside.(j) <- charge i kg ng
          done;
          aside.(m) <- charge i k n;
          compile_wait ();
          complete ()
        with
        | exception e ->
            undo ();
            raise e
        | false -> undo () (* no room for the new heap: the old one stays *)
        | true ->
            (* commit: nothing below allocates or waits *)
            for j = 0 to m - 1 do
              let g = moved.(j) in
              let old = Hashtbl.find i.prepared g in
              Hashtbl.replace i.prepared g aside.(j);
              ignore (c_free i.dev.c old)
            done;
            Hashtbl.replace i.prepared f aside.(m))
end

module Solo = struct
  let name = "c7b-solo"
  let entry = entry

  let alone i f =
    let ok = ref true in
    for j = 0 to Array.length i.names - 1 do
      let g = i.names.(j) in
      if (not (String.equal g f)) && has_program i g then ok := false
    done;
    !ok

  let prepare i f =
    with_fn i f (fun k n ->
        if alone i f then begin
          compile_wait ();
          Hashtbl.replace i.prepared f (charge i k n)
        end)
end

(* ------------------------------------------------------------ packages *)

let kit = Hostmem.kit

let kit_more =
  let scratch_functions sizes =
    let names = List.mapi (fun k _ -> Printf.sprintf "work%d" k) sizes in
    (String.concat "\n" (header :: List.map2 (Printf.sprintf "%s nop %d") names sizes) ^ "\n", names)
  in
  (* kit.binary is hostmem's; the refused function comes in a binary of its own *)
  Rig_edge.kit_more ~refused_launch:(kit.binary ^ "refuse refuse 0\n", "refuse") ~scratch_functions ()

module Make (P : POLICY) : Rig_edge.Package = struct
  module D = struct
    type t = Dev.t
    type region = Dev.region
    type nonrec image = image

    exception Fault = Dev.Fault

    let key = P.name
    let facts = Dev.facts
    let locate = Dev.locate
    let peer = Dev.peer
    let alloc = Dev.alloc
    let free = Dev.free
    let map_peer = Dev.map_peer
    let map_host = Dev.map_host
    let dma = Dev.dma
    let image = make_image
    let entry = P.entry
    let prepare = P.prepare
    let grow = Dev.grow
    let signaled = Dev.signaled
    let sleep = Dev.sleep
    let stop = Dev.stop
    let unload = unload
  end

  let name = P.name

  let make name () =
    Prim.check_unheld (P.name ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity in
        let queue = c_queue ~fns:(c_fns ()) ~dev:(c_ptr c) ~may_block:true in
        let d = { Dev.c; name; queue; word = None } in
        d.word <- Some { Dev.owner = d; h = 0; size = 8; kind = Dev.Word };
        d)

  let openers () =
    Prim.check_unheld (P.name ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ P.name ^ "-dev0"; P.name ^ "-dev1" ])

  let kit = kit
end

let policies : (bool * string * (module POLICY)) list =
  [
    (false, "CODE-7", (module Lru_evict_early));
    (false, "CODE-7", (module Slot_reset));
    (false, "CODE-7", (module Repack));
    (false, "CODE-7", (module Deps_abandon));
    (false, "CODE-7", (module Inflight_counter));
    (false, "CODE-7", (module Steal_early));
    (true, "conforming", (module Lru_evict_late));
    (true, "conforming", (module Evict_on_entry));
    (true, "conforming", (module Build_aside));
    (true, "conforming", (module Solo));
  ]

let drivers =
  List.map
    (fun (_, _, (module P : POLICY)) -> (P.name, (module Make (P) : Rig_edge.Package)))
    policies

let table = List.map (fun (ok, clause, (module P : POLICY)) -> (P.name, ok, clause)) policies
