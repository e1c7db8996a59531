(* Lock count, counted locks, masks and waits; see rig_edge_primitives.mli. *)

external holds : unit -> int = "caml_rig_holds" [@@noalloc]
external hold : unit -> unit = "caml_rig_hold" [@@noalloc]
external give : unit -> unit = "caml_rig_give" [@@noalloc]

let check_unheld fn = if holds () <> 0 then invalid_arg (fn ^ ": called inside a lock")

type mask = string

external mask : unit -> mask = "caml_rig_mask"
external restore : mask -> unit = "caml_rig_restore"
external unblock : unit -> unit = "caml_rig_unblock" [@@noalloc]
external block : unit -> unit = "caml_rig_block" [@@noalloc]
external in_wait : unit -> bool = "caml_rig_in_wait" [@@noalloc]
external shield_begin : unit -> mask = "caml_rig_shield_begin"
external shield_end : mask -> unit = "caml_rig_shield_end"
external run_pending : unit -> unit = "caml_rig_run_pending"
external block_all : unit -> unit = "caml_rig_block_all" [@@noalloc]
external c_fault_signals : unit -> int list = "caml_rig_fault_signals"
external mask_as_left : unit -> bool = "caml_rig_mask_as_left" [@@noalloc]
external blocks_rig_set : unit -> bool = "caml_rig_blocks_rig_set" [@@noalloc]
external activity : unit -> int = "caml_rig_activity" [@@noalloc]
external masks : unit -> int = "caml_rig_masks" [@@noalloc]
external waits : unit -> int = "caml_rig_waits" [@@noalloc]
external signal_at_wait : int -> unit = "caml_rig_signal_at_wait" [@@noalloc]

let fault_signals = c_fault_signals ()

module Mutant = struct
  let all =
    [
      ("retake-unchecked", "LOCK-7", "Lock.protect takes a lock the thread holds, or rig's inside another, without refusing");
      ("block-before-handlers", "SIG-4", "wait masks again before it runs the handlers of the signals that came during it");
      ("restore-keeps-mask", "SIG-5", "restore leaves the thread's signals blocked");
    ]

  let active = ref None

  let set = function
    | None -> active := None
    | Some m ->
        if not (List.exists (fun (n, _, _) -> n = m) all) then invalid_arg ("unknown edge mutant " ^ m);
        active := Some m

  let is m = !active = Some m
end

let restore m = if not (Mutant.is "restore-keeps-mask") then restore m

let masked f =
  let m = mask () in
  match f () with
  | v -> restore m; v
  | exception e -> restore m; raise e

(* The handlers of signals that came during the step run before the mask
   closes again, whichever way the step ended; an exception of theirs wins
   over the step's outcome, as it ends the wait. *)
let wait step =
  unblock ();
  let early = Mutant.is "block-before-handlers" in
  let outcome =
    match step () with
    | v -> if early then block (); Ok v
    | exception e -> if early then block (); Error e
  in
  (match run_pending () with () -> block () | exception e -> block (); raise e);
  match outcome with Ok v -> v | Error e -> raise e

let shield f =
  let m = shield_begin () in
  match f () with
  | v -> shield_end m; v
  | exception e -> shield_end m; raise e

let spawn f = Thread.create (fun () -> block_all (); f ()) ()

(* The order in which threads take counted locks, as lockdep keeps it: for
   each thread the locks it holds, and every (held, taken) pair seen.  A pair
   seen both ways is an inversion: two threads could wait for each other. *)
module Order = struct
  let mu = Mutex.create ()
  let held : (int, (int * string) list) Hashtbl.t = Hashtbl.create 16
  let pairs : (int * int, string * string) Hashtbl.t = Hashtbl.create 64
  let inversions : (string * string) list ref = ref []

  (* The order's own mutex is held while OCaml code runs: counted like any
     other (LOCK-3), with no allocation between the count and the handler
     that uncounts it. *)
  let locked f =
    hold ();
    match Mutex.protect mu f with
    | v -> give (); v
    | exception e -> give (); raise e

  let taking self (id, name) =
    locked (fun () ->
        let mine = Option.value ~default:[] (Hashtbl.find_opt held self) in
        List.iter
          (fun (h, hname) ->
            if not (Hashtbl.mem pairs (h, id)) then begin
              Hashtbl.replace pairs (h, id) (hname, name);
              if Hashtbl.mem pairs (id, h) && not (List.mem (name, hname) !inversions) then
                inversions := (hname, name) :: !inversions
            end)
          mine;
        Hashtbl.replace held self ((id, name) :: mine))

  let given self id =
    locked (fun () ->
        match Hashtbl.find_opt held self with
        | Some mine -> Hashtbl.replace held self (List.filter (fun (h, _) -> h <> id) mine)
        | None -> ())
end

module Lock = struct
  type t = { id : int; name : string; rig : bool; m : Mutex.t; owner : int Atomic.t }

  let nobody = -1
  let next_id = Atomic.make 0

  let create ?(rig = false) name =
    { id = Atomic.fetch_and_add next_id 1; name; rig; m = Mutex.create (); owner = Atomic.make nobody }

  let name l = l.name

  let protect l f =
    let self = Thread.id (Thread.self ()) in
    let checked = not (Mutant.is "retake-unchecked") in
    if checked && Atomic.get l.owner = self then invalid_arg (l.name ^ ": taken by the thread that holds it");
    if checked && l.rig && holds () <> 0 then invalid_arg (l.name ^ ": rig's lock taken inside another lock");
    Order.taking self (l.id, l.name);
    hold ();
    (match Mutex.lock l.m with () -> () | exception e -> give (); Order.given self l.id; raise e);
    Atomic.set l.owner self;
    match f () with
    | v -> Atomic.set l.owner nobody; Mutex.unlock l.m; give (); Order.given self l.id; v
    | exception e -> Atomic.set l.owner nobody; Mutex.unlock l.m; give (); Order.given self l.id; raise e

  let order_inversions () = Order.locked (fun () -> List.rev !Order.inversions)

  let await l c =
    let self = Thread.id (Thread.self ()) in
    Atomic.set l.owner nobody;
    match wait (fun () -> Condition.wait c l.m) with
    | () -> Atomic.set l.owner self
    | exception e -> Atomic.set l.owner self; raise e
end
