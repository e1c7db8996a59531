(* The rigs: each is a deviation of Rg2 ([bug], "" for none) and the program
   of user requests it serves, told to the validation layer with V.user. *)

open Rg2

let setup ms = Rg2.hang_ms := ms; V.set_hang_ms ms
let req what f = V.user (Request what) (fun () -> api what f)
let opn name = V.user (Open name) (fun () -> api "open" (fun () -> open_ name))
let cls name = V.user (Close name) (fun () -> api "close" (fun () -> close name))
let d0 = "hostmem0"

(* A request made where a correct rig raises Invalid_argument: the program
   goes on whatever it gets. *)
let attempt f = match f () with _ -> () | exception _ -> ()

(* The program's locks: a counted lock of the primitives, or a Mutex
   counted with rig_hold / rig_give (Rig_edge_primitives.hold/give). *)
let in_plock f = P.Lock.protect (P.Lock.create "program.state") f

let in_counted_mutex =
  let m = Mutex.create () in
  fun f ->
    P.hold (); Mutex.lock m;
    Fun.protect ~finally:(fun () -> Mutex.unlock m; P.give ()) f

(* Open, a buffer, a spin and a fill, wait, read, free, close. *)
let basic_on d =
  let b = req "alloc" (fun () -> alloc d Device 64) in
  req "write" (fun () -> write b 0 "hello, device");
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ 20 ]; Rig_edge.Fill { dst = handle b; off = 0; len = 64; byte = 7 } ]) in
  req "wait" (fun () -> wait d v);
  ignore (req "read" (fun () -> read b 0 4));
  req "free" (fun () -> free b);
  cls d.name

let p_basic () = setup 2000; basic_on (opn d0)

(* ------------------------------------------------------------- LOCK-2 *)

(* A device with a buffer and a loaded image; [inside] runs the program's
   requests inside a lock; then the plain work, and the close. *)
let lock_program ?(lock = in_plock) inside () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  req "write" (fun () -> write b 0 "abcd");
  let i = req "load" (fun () -> load d kit.binary) in
  lock (fun () -> inside d b i);
  req "free" (fun () -> free b);
  basic_on d

(* read inside the program's lock *)
let p_read_in_lock = lock_program (fun _ b _ -> attempt (fun () -> req "read" (fun () -> read b 0 4)))

(* alloc inside the program's lock *)
let p_alloc_in_lock ?lock () =
  lock_program ?lock (fun d _ _ -> attempt (fun () -> req "alloc" (fun () -> alloc d Device 64))) ()

(* warm (prepare every loaded function) inside the lock *)
let p_warm_in_lock = lock_program (fun d _ _ -> attempt (fun () -> req "warm" (fun () -> warm d)))

(* trim with nothing cached inside the lock *)
let p_trim_in_lock = lock_program (fun d _ _ -> attempt (fun () -> req "trim" (fun () -> trim d)))

(* free inside a counted Mutex of the program's (a callback's lock) *)
let p_free_in_mutex () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let b2 = req "alloc" (fun () -> alloc d Device 64) in
  in_counted_mutex (fun () -> attempt (fun () -> req "free" (fun () -> free b2)));
  req "free" (fun () -> free b);
  basic_on d

(* Every kind of request inside a lock, those that would do nothing
   included (trim of an empty cache, sync with nothing submitted, close);
   then the same outside. *)
let p_everything_in_lock () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  in_plock (fun () ->
      attempt (fun () -> req "trim" (fun () -> trim d));
      attempt (fun () -> req "sync" (fun () -> sync d));
      attempt (fun () -> req "alloc" (fun () -> alloc d Device 64));
      attempt (fun () -> req "write" (fun () -> write b 0 "x"));
      attempt (fun () -> req "read" (fun () -> read b 0 4));
      attempt (fun () -> req "entry" (fun () -> entry d i spin_f));
      attempt (fun () -> req "warm" (fun () -> warm d));
      attempt (fun () -> req "submit" (fun () -> submit d [ launch e [ 1 ] ])));
  in_counted_mutex (fun () ->
      attempt (fun () -> req "release" (fun () -> release b));
      attempt (fun () -> cls d0);
      attempt (fun () -> opn "hostmem1"));
  req "trim" (fun () -> trim d);
  req "sync" (fun () -> sync d);
  req "free" (fun () -> free b);
  basic_on d

(* One thread holds a lock (waiting on a semaphore inside it) while the main
   thread makes its requests outside any lock. *)
let p_other_thread_holds () =
  setup 2000;
  let ready = Semaphore.Binary.make false and go = Semaphore.Binary.make false in
  let t =
    Thread.create (fun () ->
        in_plock (fun () -> Semaphore.Binary.release ready; Semaphore.Binary.acquire go)) ()
  in
  Semaphore.Binary.acquire ready;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  req "trim" (fun () -> trim d);
  req "free" (fun () -> free b);
  basic_on d;
  Semaphore.Binary.release go;
  Thread.join t

(* -------------------------------------------------------------- queues *)

(* Fill the device's memory with the program's buffers, largest first. *)
let fill_device d =
  let bufs = ref [] in
  let chunk = ref (Hostmem.capacity / 2) in
  while !chunk >= 4 do
    match req "alloc" (fun () -> alloc d Device !chunk) with
    | b -> bufs := (b, !chunk) :: !bufs
    | exception Out_of_memory _ -> chunk := !chunk / 2
  done;
  !bufs

(* Work that never ends holds the queues; then [n] more submissions, until
   the queues must grow with the memory full.  [cache]: the program gives
   rig a buffer of at least 4096 bytes back as idle (rig's cache), which a
   round of reclamation frees. *)
let queue_setup ~cache =
  setup 2000;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let h = req "entry" (fun () -> entry d i hang_f) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let bufs = fill_device d in
  let rest =
    if cache then
      match List.find_opt (fun (_, n) -> n >= 4096) bufs with
      | Some (b, _) -> req "release" (fun () -> release b); List.filter (fun (x, _) -> x != b) bufs
      | None -> failwith "no buffer of 4096 bytes"
    else bufs
  in
  ignore (req "submit" (fun () -> submit d [ launch h [] ]));
  (d, e, rest)

(* Submits up to [n] spins; the first Out_of_memory ends it. *)
let submit_spins d e n =
  let rec go k = if k < n then
      match req "submit" (fun () -> submit d [ launch e [ 1 ] ]) with
      | _ -> go (k + 1)
      | exception Out_of_memory _ -> ()
  in
  go 0

let p_queue ~cache () =
  let d, e, _ = queue_setup ~cache in
  submit_spins d e 40;
  cls d0

(* Out_of_memory twice in two requests, then a buffer given back (release,
   trim: the free does not wait for the never-ending work) and a submission
   that grows. *)
let p_oom_twice () =
  let d, e, bufs = queue_setup ~cache:false in
  submit_spins d e 40;
  (match req "submit" (fun () -> submit d [ launch e [ 1 ] ]) with
   | _ -> failwith "expected Out_of_memory"
   | exception Out_of_memory _ -> ());
  (match List.find_opt (fun (_, n) -> n >= 4096) bufs with
   | Some (b, _) -> req "release" (fun () -> release b); req "trim" (fun () -> trim d)
   | None -> failwith "no buffer of 4096 bytes");
  ignore (req "submit" (fun () -> submit d [ launch e [ 1 ] ]));
  cls d0

(* One request submits two submissions that both find the memory short:
   each asks grow four times, eight asks in the request. *)
let p_batch () =
  let d, e, _ = queue_setup ~cache:false in
  submit_spins d e 40;
  let rs = req "submit_all" (fun () -> submit_all d [ [ launch e [ 1 ] ]; [ launch e [ 2 ] ] ]) in
  if List.exists Result.is_ok rs then failwith "expected both refused";
  cls d0

(* ---------------------------------------------- conforming, unusual *)

(* Waits read the word under rig's own device lock. *)
let p_wait_two () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ 50 ]; Rig_edge.Fill { dst = handle b; off = 0; len = 64; byte = 1 } ]) in
  req "wait" (fun () -> wait ~still:5 d v);
  req "sync" (fun () -> sync d);
  req "free" (fun () -> free b);
  cls d0

let all = [
  (* broken *)
  "rg2-check-after-locate", "LOCK-2", "check-after-locate", p_read_in_lock;
  "rg2-wrong-exception", "LOCK-2", "wrong-exn", (fun () -> p_alloc_in_lock ());
  "rg2-forgot-warm", "LOCK-2", "forgot-warm", p_warm_in_lock;
  "rg2-own-locks-only", "LOCK-2", "own-locks-only", (fun () -> p_alloc_in_lock ~lock:in_counted_mutex ());
  "rg2-fastpath-return", "LOCK-2", "fastpath-return", p_trim_in_lock;
  "rg2-deferred-free", "LOCK-2", "deferred-free", p_free_in_mutex;
  "rg2-short-gives-up", "QUEUE-4", "short-gives-up", p_queue ~cache:true;
  "rg2-short-regrow", "QUEUE-4", "short-regrow", p_queue ~cache:true;
  "rg2-short-no-reclaim", "QUEUE-4", "short-no-reclaim", p_queue ~cache:true;
  "rg2-grow-5", "QUEUE-6", "grow-5", p_queue ~cache:false;
  (* conforming *)
  "ok2-basic", "ok", "", p_basic;
  "ok2-everything-in-lock", "ok", "", p_everything_in_lock;
  "ok2-shared-wrapper", "ok", "wrapper", p_everything_in_lock;
  "ok2-rig-lock-as-check", "ok", "lock-as-check", p_everything_in_lock;
  "ok2-other-thread-holds", "ok", "", p_other_thread_holds;
  "ok2-short-then-grown", "ok", "", p_queue ~cache:true;
  "ok2-short-oom", "ok", "", p_queue ~cache:false;
  "ok2-oom-twice", "ok", "", p_oom_twice;
  "ok2-batch-two-submissions", "ok", "", p_batch;
  "ok2-signaled-under-rig-lock", "ok", "signaled-locked", p_wait_two;
]
