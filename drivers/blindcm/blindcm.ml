(* blindcm: hostmem (drivers/hostmem) with one behaviour changed per driver,
   about two clauses of the document (spec/rig_edge_driver.txt):

   CODE-3  "It is No_memory n, having made nothing, if the device has no
            memory for the n bytes f's launches need."  (Code, entry)
   MEM-7   "The region must map the whole pages that hold the n bytes, so
            that work reaches through it each word of the allocation's last
            bytes (Rig's Words section), and they must stay mapped until the
            region is freed (free)."  (Memory, map_host)

   Written blind: from the document, the driver-facing interface
   (harness/edge/*.mli, include/rig_edge.h) and drivers/hostmem/ only, and
   this table was written and committed before the certifier ran on any of
   them.

   Expected verdicts
   =================

   BROKEN: exactly the one clause given must be `fail`; every other clause's
   verdict as hostmem's.

   driver                | what it does                                         | must fail
   ----------------------|------------------------------------------------------|----------
   cm-entry-boundary     | entry's room check is off by one: it answers          | CODE-3
                         | No_memory unless free Device memory is strictly more  |
                         | than f's need, so with exactly the need free it       |
                         | refuses (probes with an alloc of need + 1 word).      |
                         | Relies on: No_memory only "if the device has no       |
                         | memory for the n bytes f's launches need" -- here it  |
                         | has them.                                             |
   cm-entry-keeps-pieces | entry makes f's memory in four pieces (three Device   | CODE-3
                         | regions of a quarter each, then the entry's own       |
                         | scratch); when a piece fails it answers No_memory of  |
                         | the whole need but keeps the pieces it made, cached   |
                         | for the retry (freed at unload).  Relies on:          |
                         | "No_memory n, having made nothing".                   |
   cm-map-512            | map_host rounds n up to 512 bytes, not to the page.   | MEM-7
                         | Relies on: "the region must map the whole pages that  |
                         | hold the n bytes, so that work reaches through it     |
                         | each word of the allocation's last bytes".            |
   cm-map-recycle        | map_host keeps one host window per device: a later    | MEM-7
                         | map_host on the device unmaps the previous mapping    |
                         | (its pages are no longer reachable through it) before |
                         | the region is freed; free knows the recycled ones and |
                         | skips them.  Relies on: "they must stay mapped until  |
                         | the region is freed (free)".                          |

   CONFORMING: every clause's verdict as hostmem's.

   driver                  | what it does                                       | expected
   ------------------------|----------------------------------------------------|----------------
   cm-ok-entry-descriptor  | entry also makes a 64-byte Device descriptor per   | same as hostmem
                           | function, before the scratch; No_memory n reports  |
                           | scratch + 64; on No_memory the descriptor is freed |
                           | first; Invalid_argument when scratch + 64 exceeds  |
                           | the capacity.  Its kit's scratch n names a         |
                           | function of n - 64 scratch bytes, so that its      |
                           | launches need n in all (for n >= 64; below, 64).   |
                           | Relies on: entry "must make what a launch of f     |
                           | needs, such as a compiled pipeline or f's scratch  |
                           | memory" (the descriptor is part of what f's        |
                           | launches need, so n counts it), and the kit's      |
                           | "scratch n ... whose launches need n bytes of      |
                           | device memory".                                    |
   cm-ok-map-extra-page    | map_host maps one page more than the whole pages   | same as hostmem
                           | that hold the n bytes.  Relies on: "must map the   |
                           | whole pages that hold the n bytes" asks for at     |
                           | least those pages, not at most.                    |
   cm-ok-entry-pieces      | entry makes f's memory in four pieces as           | same as hostmem
                           | cm-entry-keeps-pieces does, the total exactly      |
                           | hostmem's; when a piece fails it frees every piece |
                           | made and answers No_memory of the whole need.      |
                           | Relies on: "No_memory n, having made nothing, ...  |
                           | the n bytes f's launches need" (n = the whole).    |

   Each driver is hostmem with ONE behaviour changed.  The entry drivers wrap
   hostmem's image (they keep f's scratch sizes and their own pieces beside
   it, and give the pieces back at unload); cm-map-recycle's free skips the
   windows map_host already unmapped, so that its bug shows only as the early
   unmap.  cm-ok-entry-descriptor's kit says what its launches need. *)

open Rig_edge
module Prim = Rig_edge_primitives
module HD = Hostmem.D

let page = 4096
let round_up x k = (x + k - 1) / k * k
let header = "hostmem-image 1"

(* ------------------------------------------------------ image wrapper *)

(* The scratch bytes of each function of an image text hostmem took. *)
let scratch_sizes b =
  match String.split_on_char '\n' b with
  | [] -> []
  | _ :: lines ->
      List.filter_map
        (fun l ->
          match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
          | [ name; _; n ] -> Option.map (fun n -> (name, n)) (int_of_string_opt n)
          | _ -> None)
        lines

(* The same image text with each function's scratch s replaced by [f s]. *)
let rewrite_sizes f b =
  match String.split_on_char '\n' b with
  | [] -> b
  | h :: lines ->
      String.concat "\n"
        (h
        :: List.map
             (fun l ->
               match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
               | [ name; k; n ] -> (
                   match int_of_string_opt n with
                   | Some n -> Printf.sprintf "%s %s %d" name k (f n)
                   | None -> l)
               | _ -> l)
             lines)

type img = {
  inner : HD.image;
  dev : HD.t;
  sizes : (string * int) list;  (* f -> its scratch bytes, as the binary says *)
  lock : Prim.Lock.t;  (* guards the two tables *)
  made : (string, HD.region list) Hashtbl.t;  (* f has an entry: the pieces beside it *)
  kept : (string, HD.region list) Hashtbl.t;  (* cm-entry-keeps-pieces: pieces of a No_memory *)
}

let free_all d rs = List.iter (fun r -> HD.free d r) rs

(* A driver whose entry is [first i f s] for the first call of f (scratch
   s) that answers Entry; later calls answer hostmem's cached entry. *)
module Entry_driver (E : sig
  val inner_scratch : int -> int  (* the scratch hostmem's own entry of a function of scratch s makes *)
  val first : img -> string -> int -> entry_answer  (* under i.lock *)
end) : Driver with type t = HD.t and type region = HD.region = struct
  type t = HD.t
  type region = HD.region
  type image = img

  exception Fault = HD.Fault

  let key = HD.key
  let facts = HD.facts
  let locate = HD.locate
  let peer = HD.peer
  let alloc = HD.alloc
  let free = HD.free
  let map_peer = HD.map_peer
  let map_host = HD.map_host
  let dma = HD.dma

  let image d b =
    match HD.image d b with
    | Error e -> Error e
    | Ok orig -> (
        let sizes = scratch_sizes b in
        let inner =
          if List.for_all (fun (_, s) -> E.inner_scratch s = s) sizes then Ok orig
          else HD.image d (rewrite_sizes E.inner_scratch b)
        in
        match inner with
        | Error e -> Error e
        | Ok inner ->
            Ok
              {
                inner;
                dev = d;
                sizes;
                lock = Prim.Lock.create "blindcm.image";
                made = Hashtbl.create 8;
                kept = Hashtbl.create 8;
              })

  let entry i f =
    Prim.Lock.protect i.lock (fun () ->
        if Hashtbl.mem i.made f then HD.entry i.inner f
        else
          match List.assoc_opt f i.sizes with
          | None -> HD.entry i.inner f
          | Some s -> E.first i f s)

  let prepare _ _ = ()

  let unload i =
    let pieces =
      Prim.Lock.protect i.lock (fun () ->
          let all = Hashtbl.fold (fun _ rs acc -> rs @ acc) i.made [] in
          let all = Hashtbl.fold (fun _ rs acc -> rs @ acc) i.kept all in
          Hashtbl.reset i.made;
          Hashtbl.reset i.kept;
          all)
    in
    free_all i.dev pieces;
    HD.unload i.inner

  let grow = HD.grow
  let signaled = HD.signaled
  let sleep = HD.sleep
  let stop = HD.stop
end

let too_big f need =
  invalid_arg
    (Printf.sprintf "blindcm: %s needs %d bytes of Device memory, the device has %d in all" f need
       Hostmem.capacity)

(* --------------------------------------------------- cm-entry-boundary *)

module Boundary = Entry_driver (struct
  let inner_scratch s = s

  let first i f s =
    if s > Hostmem.capacity then HD.entry i.inner f (* hostmem's Invalid_argument *)
    else
      let need = round_up s word in
      (* BUG: "is there room?" asked as "is there more than the need?" *)
      match HD.alloc i.dev Device (need + word) with
      | None -> No_memory (max s word)
      | Some probe -> (
          HD.free i.dev probe;
          match HD.entry i.inner f with
          | Entry _ as e ->
              Hashtbl.replace i.made f [];
              e
          | a -> a)
end)

(* ------------------------------------------- the four-piece entries *)

(* f's memory in four pieces: three Device regions of a quarter each (q,
   a multiple of the word), and the entry's own scratch, the rest. *)
let quarter s = s / 4 / word * word
let pieces_inner s = s - (3 * quarter s)

(* [pieces i f s ~keep]: the first entry of f.  [keep]: the bug, pieces
   made before a No_memory stay (for the retry). *)
let pieces ~keep i f s =
  if s > Hostmem.capacity then too_big f s
  else
    let q = quarter s in
    let have = Option.value ~default:[] (Hashtbl.find_opt i.kept f) in
    Hashtbl.remove i.kept f;
    let no_memory made =
      if keep then Hashtbl.replace i.kept f made else free_all i.dev made;
      No_memory (max s word)
    in
    if q = 0 then (
      match HD.entry i.inner f with
      | Entry _ as e ->
          Hashtbl.replace i.made f have;
          e
      | No_memory _ -> no_memory have
      | a -> a)
    else
      let rec collect made k =
        if k = 0 then Ok made
        else
          match HD.alloc i.dev Device q with
          | Some r -> collect (r :: made) (k - 1)
          | None -> Error made
      in
      match collect have (3 - List.length have) with
      | Error made -> no_memory made
      | Ok made -> (
          match HD.entry i.inner f with
          | Entry _ as e ->
              Hashtbl.replace i.made f made;
              e
          | No_memory _ -> no_memory made
          | a ->
              free_all i.dev made;
              a
          | exception ex ->
              free_all i.dev made;
              raise ex)

module Keeps_pieces = Entry_driver (struct
  let inner_scratch = pieces_inner
  let first = pieces ~keep:true
end)

module Ok_pieces = Entry_driver (struct
  let inner_scratch = pieces_inner
  let first = pieces ~keep:false
end)

(* --------------------------------------------- cm-ok-entry-descriptor *)

let descriptor = 64

module Ok_descriptor = Entry_driver (struct
  let inner_scratch s = s

  let first i f s =
    let need = round_up s word + descriptor in
    if need > Hostmem.capacity then too_big f need
    else
      match HD.alloc i.dev Device descriptor with
      | None -> No_memory need
      | Some desc -> (
          match HD.entry i.inner f with
          | Entry _ as e ->
              Hashtbl.replace i.made f [ desc ];
              e
          | No_memory _ ->
              HD.free i.dev desc;
              No_memory need
          | a ->
              HD.free i.dev desc;
              a
          | exception ex ->
              HD.free i.dev desc;
              raise ex)
end)

let descriptor_kit =
  {
    Hostmem.kit with
    scratch =
      Some (fun n -> (Printf.sprintf "%s\nwork nop %d\n" header (max 0 (n - descriptor)), "work"));
  }

(* ------------------------------------------------------- map drivers *)

module Map_driver (M : sig
  val map_host : HD.t -> nativeint -> int -> HD.region
  val free : HD.t -> HD.region -> unit
end) : Driver with type t = HD.t and type region = HD.region = struct
  include HD

  let map_host = M.map_host
  let free = M.free
end

module Map_512 = Map_driver (struct
  (* BUG: the unit of the mapping is 512 bytes, not the page. *)
  let map_host d p n = Hostmem.map d p (round_up n 512)
  let free = HD.free
end)

module Ok_map_extra_page = Map_driver (struct
  let map_host d p n = Hostmem.map d p (round_up n page + page)
  let free = HD.free
end)

module Map_recycle = Map_driver (struct
  let lock = Prim.Lock.create "blindcm.windows"
  let window : (int, HD.region) Hashtbl.t = Hashtbl.create 4  (* device id -> its window *)
  let recycled : HD.region list ref = ref []  (* unmapped by map_host, not yet freed by rig *)

  let map_host d p n =
    let r = Hostmem.map d p (round_up n page) in
    Prim.Lock.protect lock (fun () ->
        (* BUG: one window per device: the previous mapping goes now. *)
        (match Hashtbl.find_opt window (Hostmem.id d) with
        | Some prev ->
            recycled := prev :: !recycled;
            HD.free d prev
        | None -> ());
        Hashtbl.replace window (Hostmem.id d) r);
    r

  let free d r =
    let skip =
      Prim.Lock.protect lock (fun () ->
          if List.memq r !recycled then begin
            recycled := List.filter (fun x -> x != r) !recycled;
            true
          end
          else begin
            (match Hashtbl.find_opt window (Hostmem.id d) with
            | Some w when w == r -> Hashtbl.remove window (Hostmem.id d)
            | _ -> ());
            false
          end)
    in
    if not skip then HD.free d r
end)

(* ---------------------------------------------------------- packages *)

let package name (module D : Driver with type t = HD.t and type region = HD.region) kit :
    (module Package) =
  (module struct
    module D = D

    let name = name
    let openers = Hostmem.openers
    let kit = kit
  end)

let packages =
  [
    package "cm-entry-boundary" (module Boundary) Hostmem.kit;
    package "cm-entry-keeps-pieces" (module Keeps_pieces) Hostmem.kit;
    package "cm-map-512" (module Map_512) Hostmem.kit;
    package "cm-map-recycle" (module Map_recycle) Hostmem.kit;
    package "cm-ok-entry-descriptor" (module Ok_descriptor) descriptor_kit;
    package "cm-ok-map-extra-page" (module Ok_map_extra_page) Hostmem.kit;
    package "cm-ok-entry-pieces" (module Ok_pieces) Hostmem.kit;
  ]
