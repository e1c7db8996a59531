(* The page of driver calls in flight; see call_trace.mli. *)

external create_fd : unit -> int = "rig_iso_trace_create"
external attach : int -> bool = "rig_iso_trace_attach"
external enter_page : int -> unit = "rig_iso_trace_enter" [@@noalloc]
external leave : int -> unit = "rig_iso_trace_leave" [@@noalloc]
external read : int -> (int * (int * int) list) list = "rig_iso_trace_read"
external entered_mask : int -> int = "rig_iso_trace_entered"

(* A call's number on the page is its index here. *)
let names =
  [| "facts"; "locate"; "peer"; "alloc"; "free"; "map_peer"; "map_host"; "dma"; "image"; "entry"; "prepare"; "grow";
     "signaled"; "sleep"; "stop"; "unload"; "openers"; "make"; "room"; "submit"; "commit" |]

(* How many times this process called each function, by its number: an
   int array's store allocates nothing. *)
let tally = Array.make (Array.length names) 0

let enter i =
  tally.(i) <- tally.(i) + 1;
  enter_page i

let reset_called () = Array.fill tally 0 (Array.length tally) 0

let called () =
  List.filter (fun (_, n) -> n > 0) (List.mapi (fun i n -> (names.(i), n)) (Array.to_list tally))

(* A descriptor is its number on Linux (Unix's own representation). *)
let fd_int (fd : Unix.file_descr) : int = Obj.magic fd
let create () : Unix.file_descr = Obj.magic (create_fd ())
let attach_page fd = attach (fd_int fd)

let name i = if i >= 0 && i < Array.length names then names.(i) else Printf.sprintf "call #%d" i
let in_flight fd =
  List.map (fun (tid, calls) -> (tid, List.map (fun (f, ms) -> (name f, float ms /. 1000.)) calls)) (read (fd_int fd))

let entered fd =
  let mask = entered_mask (fd_int fd) in
  List.filter_map (fun i -> if mask land (1 lsl i) <> 0 then Some names.(i) else None) (List.init (Array.length names) Fun.id)

let longest threads =
  List.fold_left
    (fun best (_, calls) ->
      List.fold_left
        (fun best (f, s) -> match best with Some (_, s') when s' >= s -> best | _ -> Some (f, s))
        best calls)
    None threads

let describe threads =
  let threads = List.map (fun (tid, calls) -> (tid, List.map fst calls)) threads in
  match threads with
  | [] -> None
  | [ (_, fns) ] -> Some ("in " ^ String.concat " within " (List.rev fns))
  | threads ->
      Some
        ("in "
        ^ String.concat " and "
            (List.map (fun (tid, fns) -> Printf.sprintf "%s (thread %d)" (String.concat " within " (List.rev fns)) tid) threads))

let facts_ = 0 and locate_ = 1 and peer_ = 2 and alloc_ = 3 and free_ = 4 and map_peer_ = 5 and map_host_ = 6
and dma_ = 7 and image_ = 8 and entry_ = 9 and prepare_ = 10 and grow_ = 11 and signaled_ = 12 and sleep_ = 13
and stop_ = 14 and unload_ = 15 and openers_ = 16 and make_ = 17 and room_ = 18 and submit_ = 19 and commit_ = 20

(* The queue's C functions, reached through closures that facts hands out. *)
let traced_queue (q : Rig_edge.queue) =
  { Rig_edge.room = (fun s -> enter room_; match q.room s with x -> leave room_; x | exception e -> leave room_; raise e);
    submit =
      (fun s ~value ->
        enter submit_; match q.submit s ~value with x -> leave submit_; x | exception e -> leave submit_; raise e);
    commit = (fun () -> enter commit_; match q.commit () with x -> leave commit_; x | exception e -> leave commit_; raise e) }

(* Each function written out, so that no partial application allocates. *)
module Traced (P : Rig_edge.Package) : Rig_edge.Package = struct
  module D = struct
    include P.D

    (* The queue's closures are wrapped after facts returned: facts is
       never a point of the asynchronous sweep, so this allocation moves none. *)
    let facts t =
      let f = enter facts_; match P.D.facts t with r -> leave facts_; r | exception e -> leave facts_; raise e in
      { f with queue = traced_queue f.queue }
    let locate t r = enter locate_; match P.D.locate t r with x -> leave locate_; x | exception e -> leave locate_; raise e
    let peer a b = enter peer_; match P.D.peer a b with x -> leave peer_; x | exception e -> leave peer_; raise e
    let alloc t m n = enter alloc_; match P.D.alloc t m n with x -> leave alloc_; x | exception e -> leave alloc_; raise e
    let free t r = enter free_; match P.D.free t r with x -> leave free_; x | exception e -> leave free_; raise e

    let map_peer a b r =
      enter map_peer_; match P.D.map_peer a b r with x -> leave map_peer_; x | exception e -> leave map_peer_; raise e

    let map_host t p n =
      enter map_host_; match P.D.map_host t p n with x -> leave map_host_; x | exception e -> leave map_host_; raise e

    let dma t r ~fn = enter dma_; match P.D.dma t r ~fn with x -> leave dma_; x | exception e -> leave dma_; raise e
    let image t b = enter image_; match P.D.image t b with x -> leave image_; x | exception e -> leave image_; raise e
    let entry i n = enter entry_; match P.D.entry i n with x -> leave entry_; x | exception e -> leave entry_; raise e

    let prepare i n =
      enter prepare_; match P.D.prepare i n with x -> leave prepare_; x | exception e -> leave prepare_; raise e

    let grow t = enter grow_; match P.D.grow t with x -> leave grow_; x | exception e -> leave grow_; raise e

    let signaled t =
      enter signaled_; match P.D.signaled t with x -> leave signaled_; x | exception e -> leave signaled_; raise e

    let sleep t ~seen ~still_ms =
      enter sleep_;
      match P.D.sleep t ~seen ~still_ms with x -> leave sleep_; x | exception e -> leave sleep_; raise e

    let stop t ~fault = enter stop_; match P.D.stop t ~fault with x -> leave stop_; x | exception e -> leave stop_; raise e
    let unload i = enter unload_; match P.D.unload i with x -> leave unload_; x | exception e -> leave unload_; raise e
  end

  let name = P.name
  let kit = P.kit

  let make (o : P.D.t Rig_edge.opener) () =
    enter make_; match o.make () with x -> leave make_; x | exception e -> leave make_; raise e

  let openers () =
    let os = enter openers_; match P.openers () with x -> leave openers_; x | exception e -> leave openers_; raise e in
    List.map (fun (o : P.D.t Rig_edge.opener) -> { o with make = make o }) os
end

let wrap (module P : Rig_edge.Package) = (module Traced (P) : Rig_edge.Package)
