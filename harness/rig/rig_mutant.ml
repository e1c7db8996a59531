(* The reference rig's mutants; see rig_mutant.mli. *)

let all =
  [
    ("stop-twice", "CNT-1", "close calls stop again on a device already stopped at a reopen of its name");
    ("stop-waits-for-none", "CNT-1", "counts its calls, but close stops the device while counted calls are in flight");
    ("uncounted-sleep", "CNT-2", "sleep is not counted, so close stops a device while a sleep is in flight");
    ("uncounted-c-calls", "CNT-3", "does not count the C functions' calls of a device that declares may_block");
    ("keep-after-stop", "CNT-5", "keeps the values of the device's submissions alive after stop");
    ("call-after-stop", "CNT-4", "after stop, waits for the word with sleep instead of signaled");
    ("ignore-fault", "CNT-6", "a Fault from a counted call does not lose the device");
    ("kept-after-failed-submit", "CNT-6", "a failed submit or commit raises Device_lost but does not lose the device");
    ("grow-exception-kept", "EXC-1", "an exception other than Fault from grow loses nothing");
    ("loss-without-text", "EXC-1", "a loss for another exception names the function, not the exception's text");
    ("lose-on-sleep-exn", "EXC-3", "an exception other than Fault from sleep loses the device");
    ("ignore-exception", "EXC-1", "another exception from alloc (and the other listed functions) loses nothing");
    ("map-peer-own", "GUAR-3", "asks map_peer of a buffer on its own device instead of refusing it");
    ("lose-on-entry-invalid", "EXC-2", "an Invalid_argument from entry loses the device");
    ("lose-on-prepare-exn", "EXC-3", "an exception other than Fault from prepare loses the device");
    ("lose-on-signaled-exn", "EXC-3", "an exception other than Fault from signaled loses the device");
    ("lose-on-peer-exn", "EXC-3", "an exception from peer loses the device that asked");
    ("lose-on-locate-exn", "EXC-3", "an exception from locate loses the region's device");
    ("double-free", "GUAR-1", "close frees again the regions the program freed");
    ("free-before-mapping", "GUAR-2", "frees a region while a map_peer region over it lives");
    ("peer-self", "GUAR-3", "asks peer of a device with itself before mapping");
    ("dma-any-region", "GUAR-4", "asks dma of a region map_peer made");
    ("unload-twice", "GUAR-5", "close unloads again the images the program unloaded");
    ("no-pinned-fallback", "GUAR-6", "falls back from Mapped to Device memory whatever host_addresses says");
    ("no-hang-bound", "GUAR-7", "never loses a device whose word stands still");
    ("hang-bound-doubled", "GUAR-7", "loses a device whose word stands still only after twice its hang bound");
    ("unrounded-alloc", "MEM-1", "asks alloc of the buffer's length, not rounded up to a word");
    ("free-under-work", "MEM-3", "frees a buffer at once, while work that uses it may still run");
    ("map-host-anyway", "MEM-6", "asks map_host of a device that does not declare maps_host");
    ("stop-no-fault", "STOP-1", "calls stop with fault None after a Fault");
    ("stop-no-fault-after-hang", "STOP-1", "loses a device for its hang bound without a fault, so its stop has fault None");
    ("free-before-word", "STOP-7", "frees after stop without waiting for the word to read the last value");
    ("free-after-stop-raised", "STOP-7", "after a stop that raised, frees at once without waiting for the word to read the last value");
    ("after-stop-faults-raised", "STOP-7", "a Fault from a free or unload after stop escapes close, and what is left is not given back");
    ("signaled-fault-after-stop", "TIME-2", "a Fault from signaled after stop escapes close");
    ("signaled-after-word-freed", "TIME-2", "reads signaled once more after freeing the word");
    ("three-asks", "CODE-4", "after No_memory from entry, runs one round too few");
    ("grow-again", "QUEUE-4", "after a Short, asks grow again without asking room");
    ("short-no-round", "QUEUE-4", "after a Short, asks room again without a round of reclamation");
    ("short-gives-up", "QUEUE-4", "after a submission's first Short, raises Out_of_memory without asking room again");
    ("grow-unasked", "QUEUE-5", "asks grow before any room answered RIG_GROW");
    ("five-asks", "QUEUE-6", "asks grow a fifth time for a submission");
    ("oom-previous-short", "QUEUE-6", "after the last Short, raises Out_of_memory with the n of the Short before it");
    ("grown-unbounded", "QUEUE-6", "after a fourth grow that answered Grown, asks grow again when room answers RIG_GROW anew");
    ("call-in-lock", "LOCK-1", "calls alloc while it holds a lock of its own");
    ("no-lock-check", "LOCK-2", "its calls made inside a lock do not raise Invalid_argument");
    ("prepare-unchecked", "LOCK-2", "Rig.prepare alone does not check that it is called inside a lock");
    ("unmasked-call", "SIG-1", "calls alloc with the thread's signals unblocked");
    ("unmask-before-loss", "SIG-1", "gives a call's mask back before it records the loss its Fault makes");
    ("no-stop-after-async", "ASYNC-1", "after an exception it does not know (an asynchronous one) from a driver call, forgets the device: no stop, free or unload");
  ]

let under_fault = [ ("grown-unbounded", "rig.grow-rounds", "room:6:grow") ]

(* The instances of the reference rig, each kept here only while it lives:
   a case makes an instance per run, and a child runs hundreds of points (a
   sweep's batch) one after another.  Held strongly, every instance that
   ever ran stayed reachable, with the validation layer under it, and each
   collection a later point asked for marked them all.  An instance is
   keyed on its first step (a ref its code reads); its resets and variants,
   which hold its steps, are the ephemeron's data, kept while that key
   lives.  A register installs the active mutant at once, so an instance
   made after [set] (as every run makes its own) has it whatever becomes
   of its key. *)
type owned = { resets : (unit -> unit) list; variants : (string * (unit -> unit)) list }
type instance = Instance : 'k Weak.t * ('k, owned) Ephemeron.K1.t -> instance
type key = Key : 'k -> key

let instances : instance list ref = ref []

(* The steps made since the last register: the instance being made. *)
let making : (key * (unit -> unit)) list ref = ref []
let active = ref None

let step conforming =
  let r = ref conforming in
  making := (Key r, fun () -> r := conforming) :: !making;
  r

let install (o : owned) =
  List.iter (fun reset -> reset ()) o.resets;
  Option.iter (fun name -> List.iter (fun (n, install) -> if n = name then install ()) o.variants) !active

(* The registrations of the instances alive, the dead ones dropped. *)
let alive () =
  let live =
    List.filter_map
      (fun (Instance (key, eph) as i) ->
        match Weak.get key 0 with Some k -> Option.map (fun o -> (i, o)) (Ephemeron.K1.query eph k) | None -> None)
      !instances
  in
  instances := List.map fst live;
  List.map snd live

let register vs =
  let resets = List.map snd !making in
  let owned = { resets; variants = vs } in
  (match List.rev !making with
  | (Key first, _) :: _ ->
      let key = Weak.create 1 in
      Weak.set key 0 (Some first);
      ignore (alive ());
      instances := Instance (key, Ephemeron.K1.make first owned) :: !instances
  | [] -> invalid_arg "Rig_mutant.register: an instance without steps");
  making := [];
  install owned

let set m =
  (match m with
  | Some name when not (List.exists (fun (n, _, _) -> n = name) all) -> invalid_arg ("unknown rig mutant " ^ name)
  | _ -> ());
  active := m;
  List.iter install (alive ())
