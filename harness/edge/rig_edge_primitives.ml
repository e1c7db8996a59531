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
external account_queued_in_waits : bool -> unit = "caml_rig_account_queued_in_waits" [@@noalloc]
external queued_in_waits : unit -> float = "caml_rig_queued_in_waits"
external time_in_waits : unit -> float * float = "caml_rig_time_in_waits"
external chain_runtime_hooks : unit -> unit = "caml_rig_chain_runtime_hooks"
external runtime_hooks_chained : unit -> bool = "caml_rig_runtime_hooks_chained" [@@noalloc]
external signal_at_wait : int -> unit = "caml_rig_signal_at_wait" [@@noalloc]

let fault_signals = c_fault_signals ()

(* Before any thread is made, after the threads library set its hooks. *)
let () = chain_runtime_hooks ()

(* The edge's self-test mutants (Mutant, at the end) are separate functions:
   Mutant.set installs one in place of the conforming one, so that the
   conforming path tests no mutant (and allocates nothing for it). *)

let restore_conforming = restore
let restore_installed = ref restore_conforming
let restore m = !restore_installed m

let masked f =
  let m = mask () in
  match f () with
  | v -> restore m; v
  | exception e -> restore m; raise e

(* The handlers of signals that came during the step run before the mask
   closes again, whichever way the step ended; an exception of theirs wins
   over the step's outcome, as it ends the wait. *)
let after_step outcome =
  (match run_pending () with () -> block () | exception e -> block (); raise e);
  match outcome with Ok v -> v | Error e -> raise e

(* Nothing runs between the unblock and the step's handler: an exception
   there would leave the thread in-wait with rig's signals unblocked. *)
let wait_conforming step =
  unblock ();
  after_step (match step () with v -> Ok v | exception e -> Error e)

type waiter = { wait : 'a. (unit -> 'a) -> 'a }

let waiter = ref { wait = wait_conforming }
let wait step = !waiter.wait step

let shield f =
  let m = shield_begin () in
  match f () with
  | v -> shield_end m; v
  | exception e -> shield_end m; raise e

(* The thread is created under rig_mask, so that it starts with signals
   blocked (a thread inherits its creator's mask): blocking them only once
   it runs left a moment in which a signal could run its handler there. *)
let spawn f = masked (fun () -> Thread.create (fun () -> block_all (); f ()) ())

(* The order in which threads take counted locks, as lockdep keeps it: for
   each thread the locks it holds, and every (held, taken) pair seen.  A pair
   seen both ways is an inversion: two threads could wait for each other. *)
module Order = struct
  let mu = Mutex.create ()
  let held : (int, (int * string) list) Hashtbl.t = Hashtbl.create 16
  let pairs : (int * int, string * string) Hashtbl.t = Hashtbl.create 64
  let inversions : (string * string) list ref = ref []

  (* The thread that holds mu, while it does: the record's updates
     allocate, an allocation may run a finaliser or a Memprof callback,
     and either may take a counted lock (SIG-7 lets a finaliser) on the
     same thread.  That take and its give are not recorded: taking mu again
     raised EDEADLK (blind lq-region-fin-lock). *)
  let owner = Atomic.make (-1)

  (* The order's own mutex is held while OCaml code runs: counted like any
     other (LOCK-3), with no allocation between the count and the handler
     that uncounts it. *)
  let locked ~skipped f =
    let self = Thread.id (Thread.self ()) in
    if Atomic.get owner = self then skipped
    else begin
      hold ();
      match
        Mutex.protect mu (fun () ->
            Atomic.set owner self;
            match f () with
            | v -> Atomic.set owner (-1); v
            | exception e -> Atomic.set owner (-1); raise e)
      with
      | v -> give (); v
      | exception e -> give (); raise e
    end

  let taking self (id, name) =
    locked ~skipped:() (fun () ->
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
    locked ~skipped:() (fun () ->
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

  (* LOCK-7: a lock its holder takes again, or rig's inside another. *)
  let refuse_retake self l =
    if Atomic.get l.owner = self then invalid_arg (l.name ^ ": taken by the thread that holds it");
    if l.rig && holds () <> 0 then invalid_arg (l.name ^ ": rig's lock taken inside another lock")

  let take ~check l f =
    let self = Thread.id (Thread.self ()) in
    check self l;
    Order.taking self (l.id, l.name);
    hold ();
    (match Mutex.lock l.m with () -> () | exception e -> give (); Order.given self l.id; raise e);
    Atomic.set l.owner self;
    match f () with
    | v -> Atomic.set l.owner nobody; Mutex.unlock l.m; give (); Order.given self l.id; v
    | exception e -> Atomic.set l.owner nobody; Mutex.unlock l.m; give (); Order.given self l.id; raise e

  type protector = { protect : 'a. t -> (unit -> 'a) -> 'a }

  let protect_conforming l f = take ~check:refuse_retake l f
  let protector = ref { protect = protect_conforming }
  let protect l f = !protector.protect l f

  let order_inversions () = Order.locked ~skipped:[] (fun () -> List.rev !Order.inversions)

  let await l c =
    let self = Thread.id (Thread.self ()) in
    Atomic.set l.owner nobody;
    match wait (fun () -> Condition.wait c l.m) with
    | () -> Atomic.set l.owner self
    | exception e -> Atomic.set l.owner self; raise e
end

module Mutant = struct
  let all =
    [
      ("retake-unchecked", "LOCK-7", "Lock.protect takes a lock the thread holds, or rig's inside another, without refusing");
      ("block-before-handlers", "SIG-4", "wait masks again before it runs the handlers of the signals that came during it");
      ("restore-keeps-mask", "SIG-5", "restore leaves the thread's signals blocked");
    ]

  (* retake-unchecked *)
  let protect_unchecked l f = Lock.take ~check:(fun _ _ -> ()) l f

  (* block-before-handlers *)
  let wait_blocks_early step =
    unblock ();
    after_step (match step () with v -> block (); Ok v | exception e -> block (); Error e)

  (* restore-keeps-mask *)
  let restore_keeps_mask (_ : mask) = ()

  let install = function
    | "retake-unchecked" -> Lock.protector := { protect = protect_unchecked }
    | "block-before-handlers" -> waiter := { wait = wait_blocks_early }
    | "restore-keeps-mask" -> restore_installed := restore_keeps_mask
    | m -> invalid_arg ("unknown edge mutant " ^ m)

  let set m =
    (match m with
    | Some m when not (List.exists (fun (n, _, _) -> n = m) all) -> invalid_arg ("unknown edge mutant " ^ m)
    | _ -> ());
    Lock.protector := { protect = Lock.protect_conforming };
    waiter := { wait = wait_conforming };
    restore_installed := restore_conforming;
    Option.iter install m
end
