(* The rigs: each is a deviation of Rg ([bug], "" for none) and the program
   of user requests it serves. *)

open Rg

let setup ms = Rg.hang_ms := ms; V.set_hang_ms ms
let req what f = V.user (Request what) f
let opn name = V.user (Open name) (fun () -> open_ name)
let cls name = V.user (Close name) (fun () -> close name)
let d0 = "hostmem0"
let d1 = "hostmem1"

(* A request whose failure the program expects and reports. *)
let expect_fail what f =
  match req what f with
  | _ -> ()
  | exception (Device_lost _ | Out_of_memory _ | Invalid_argument _ | Failure _ | Not_found) -> ()
  | exception e when is_fault e -> ()

let fill b byte = Rig_edge.Fill { dst = handle b; off = 0; len = 64; byte }

(* Open, a buffer, a spin and a fill, wait, read, free, close. *)
let basic ?(spin = 30) name =
  let d = opn name in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  req "write" (fun () -> write b 0 "hello, device");
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ spin ]; fill b 7 ]) in
  req "wait" (fun () -> wait d v);
  ignore (req "read" (fun () -> read b 0 4));
  req "free" (fun () -> free b);
  cls name

let basic_on d =
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ 20 ]; fill b 9 ]) in
  req "wait" (fun () -> wait d v);
  req "free" (fun () -> free b);
  cls d.name

let p_basic () = setup 2000; basic d0

(* CNT-1: the close forgets to mark the device stopped; the next open of
   its name stops it again. *)
let p_reopen () = setup 2000; basic d0; basic d0

(* CNT-2: a waiter inside sleep while another thread closes. *)
let p_close_while_waiting () =
  setup 5000;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ 1500 ] ]) in
  let t = Thread.create (fun () -> expect_fail "wait" (fun () -> wait d v)) () in
  V.await_in_flight "sleep";
  cls d0;
  Thread.join t

(* CNT-6, STOP-1 with a Fault: work that faults, then more requests. *)
let p_fault_then_more () =
  setup 2000;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i fault_f) in
  let v = req "submit" (fun () -> submit d [ launch e [] ]) in
  expect_fail "wait" (fun () -> wait d v);
  expect_fail "alloc" (fun () -> alloc d Device 64);
  cls d0

(* LOCK-2: the program asks a question of rig while it holds a lock of
   its own (a correct rig raises Invalid_argument as the call starts). *)
let p_ask_in_lock () =
  setup 2000;
  let a = opn d0 in
  let b = opn d1 in
  let l = P.Lock.create "program.log" in
  (match P.Lock.protect l (fun () -> req "can_share" (fun () -> can_share a b)) with
   | _ -> ()
   | exception Invalid_argument _ -> ());
  cls d0; cls d1

(* EXC-1: a write past the end of a buffer, then more requests. *)
let p_write_past_end () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  expect_fail "write" (fun () -> write b 60 "12345678");
  expect_fail "alloc" (fun () -> alloc d Device 64);
  cls d0

(* GUAR-2: a buffer of hostmem1 seen by hostmem0; the owner frees first. *)
let p_share_free_owner_first () =
  setup 2000;
  let a = opn d0 in
  let b = opn d1 in
  let r = req "alloc" (fun () -> alloc b Device 64) in
  let m = req "share" (fun () -> share a r) in
  expect_fail "free" (fun () -> free r);
  req "free" (fun () -> free m);
  cls d0; cls d1

(* GUAR-3: the program shares a buffer with its own device. *)
let p_share_self () =
  setup 2000;
  let a = opn d0 in
  let r = req "alloc" (fun () -> alloc a Device 64) in
  let m = req "share" (fun () -> share a r) in
  ignore m;
  cls d0

(* GUAR-4: dma asked for an imported buffer. *)
let p_dma_import () =
  setup 2000;
  let a = opn d0 in
  let b = opn d1 in
  let r = req "alloc" (fun () -> alloc b Device 64) in
  let m = req "share" (fun () -> share a r) in
  expect_fail "dma" (fun () -> ignore (dma m "0000:41:00.0"));
  req "free" (fun () -> free m);
  cls d0; cls d1

(* GUAR-5: unload a module, then warm the entries of what is loaded. *)
let p_unload_then_warm () =
  setup 2000;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ 10 ] ]) in
  req "wait" (fun () -> wait d v);
  req "unload" (fun () -> unload d i);
  let _j = req "load" (fun () -> load d (fst ((Option.get kit.scratch) 64))) in
  req "warm" (fun () -> warm d);
  cls d0

(* GUAR-6: a staging buffer (Mapped). *)
let p_staging () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Mapped 256) in
  req "write" (fun () -> write b 0 "staged");
  req "free" (fun () -> free b);
  cls d0

(* GUAR-7, STOP-1 with the hang bound: work that never ends. *)
let p_hang ~tell () =
  setup 300;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i hang_f) in
  let v = req "submit" (fun () -> submit d [ launch e [] ]) in
  (match req "wait" (fun () -> wait d v) with
   | () -> ()
   | exception Device_lost _ -> if tell then V.lost_for_hang d0
   | exception Validate.Abandoned _ -> ());
  cls d0

(* MEM-1: an empty staging buffer. *)
let p_empty_buffer () =
  setup 2000;
  let d = opn d0 in
  expect_fail "alloc" (fun () -> ignore (alloc d Mapped 0));
  cls d0

(* MEM-3: free a buffer right after submitting work that fills it. *)
let p_free_after_submit () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v = req "submit" (fun () -> submit d [ launch e [ 300 ]; fill b 1 ]) in
  req "free" (fun () -> free b);
  expect_fail "wait" (fun () -> wait d v);
  cls d0

(* MEM-6: map a host buffer that does not start a page. *)
external addr : (char, Bigarray.int8_unsigned_elt, Bigarray.c_layout) Bigarray.Array1.t -> nativeint = "rg_addr"

let host_area = Bigarray.Array1.create Bigarray.char Bigarray.c_layout (4 * page)

let p_map_host () =
  setup 2000;
  let d = opn d0 in
  let a = addr host_area in
  let aligned = Nativeint.(logand (add a (of_int (page - 1))) (lognot (of_int (page - 1)))) in
  let p = Nativeint.add aligned 64n in
  let b = req "map_host" (fun () -> map_host d p 100) in
  req "free" (fun () -> free b);
  cls d0

(* CODE-4: a function whose scratch does not fit beside a big buffer. *)
let p_entry_oom () =
  setup 2000;
  let d = opn d0 in
  let big = req "alloc" (fun () -> alloc d Device (Hostmem.capacity / 4 * 3)) in
  let bin, f = (Option.get kit.scratch) (Hostmem.capacity / 2) in
  let i = req "load" (fun () -> load d bin) in
  expect_fail "entry" (fun () -> ignore (entry d i f));
  req "free" (fun () -> free big);
  cls d0

(* QUEUE-5: many submissions, so that the queues grow. *)
let p_many_submits () =
  setup 5000;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  (* The queue must grow for the rigs to show their growth: a first launch
     keeps the device busy while the others fill its 64 slots, and the
     program goes on until a grow was asked, so that a loaded machine, whose
     device may drain as fast as this thread submits, still sees one. *)
  let grew () = List.exists (fun (ev : Validate.event) -> ev.fn = "grow") (V.events ()) in
  let v = ref (req "submit" (fun () -> submit d [ launch e [ 300 ] ])) in
  let n = ref 1 in
  while !n < 40 || (not (grew ()) && !n < 2000) do
    v := req "submit" (fun () -> submit d [ launch e [ 1 ] ]);
    incr n
  done;
  if not (grew ()) then failwith "the queue never grew in 2000 submissions";
  req "wait" (fun () -> wait d !v);
  cls d0

(* STOP-7: close while work still runs. *)
let p_close_busy () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  ignore b;
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let _v = req "submit" (fun () -> submit d [ launch e [ 500 ]; fill b 3 ]) in
  cls d0

(* ------------------------------------------------ conforming, unusual *)

(* Two threads wait on two values of the same device at once; the close
   comes after both. *)
let p_two_waiters () =
  setup 3000;
  let d = opn d0 in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let v1 = req "submit" (fun () -> submit d [ launch e [ 100 ] ]) in
  let v2 = req "submit" (fun () -> submit d [ launch e [ 100 ] ]) in
  let t1 = Thread.create (fun () -> req "wait" (fun () -> wait ~still:7 d v2)) () in
  let t2 = Thread.create (fun () -> req "wait" (fun () -> wait ~still:13 d v1)) () in
  Thread.join t1; Thread.join t2;
  cls d0

(* entry raises Invalid_argument (too much scratch): the device stays. *)
let p_entry_too_big () =
  setup 2000;
  let d = opn d0 in
  let bin, f = (Option.get kit.scratch) (Hostmem.capacity * 2) in
  let i = req "load" (fun () -> load d bin) in
  expect_fail "entry" (fun () -> ignore (entry d i f));
  req "unload" (fun () -> unload d i);
  basic_on d


(* entry answers No_memory while rig's cache holds idle buffers; the
   first round of reclamation frees them and the next ask succeeds. *)
let p_oom_reclaim () =
  setup 2000;
  let d = opn d0 in
  let cached = List.init 3 (fun _ -> req "alloc" (fun () -> alloc d Device (Hostmem.capacity / 4))) in
  List.iter (fun b -> req "release" (fun () -> release b)) cached;
  let bin, f = (Option.get kit.scratch) (Hostmem.capacity / 2) in
  let i = req "load" (fun () -> load d bin) in
  let e = req "entry" (fun () -> entry d i f) in
  let v = req "submit" (fun () -> submit d [ launch e [] ]) in
  req "wait" (fun () -> wait d v);
  cls d0

(* An open of a name whose device is open: rig stops the old device at
   that open and frees its regions after the new device exists. *)
let p_reopen_without_close () =
  setup 2000;
  let d = opn d0 in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let i = req "load" (fun () -> load d kit.binary) in
  let e = req "entry" (fun () -> entry d i spin_f) in
  let _v = req "submit" (fun () -> submit d [ launch e [ 200 ]; fill b 1 ]) in
  basic d0

(* prepare of every function, twice, and of one the image lacks; waits
   with tiny sleeps; locate and peer asked inside the program's lock. *)
let p_prepare_all () =
  setup 2000;
  let d = opn d0 in
  let d' = opn d1 in
  let i = req "load" (fun () -> load d kit.binary) in
  req "warm" (fun () -> warm d);
  req "warm" (fun () -> warm d);
  req "prepare" (fun () -> prepare d i "no_such_function");
  let e = req "entry" (fun () -> entry d i spin_f) in
  let e' = req "entry" (fun () -> entry d i spin_f) in
  let b = req "alloc" (fun () -> alloc d Device 64) in
  let l = P.Lock.create "program.state" in
  P.Lock.protect l (fun () ->
      ignore (V.locate d.d b.r).size;
      ignore (V.peer d.d d'.d);
      ignore (V.signaled d.d));
  let v = req "submit" (fun () -> submit d [ launch e [ 50 ]; launch e' [ 10 ]; fill b 2 ]) in
  req "wait" (fun () -> wait ~still:1 d v);
  cls d1;
  cls d0

(* A fault loses the device; the close stops it with the fault; the name
   opens again and works. *)
let p_fault_reopen () =
  p_fault_then_more ();
  basic d0

let all = [
  (* broken *)
  "rg-stop-twice", "CNT-1", "stop-twice", p_reopen;
  "rg-sleep-uncounted", "CNT-2", "sleep-uncounted", p_close_while_waiting;
  "rg-locate-after-stop", "CNT-4", "locate-after-stop", p_close_busy;
  "rg-fault-ignored", "CNT-6", "fault-ignored", p_fault_then_more;
  "rg-alloc-under-lock", "LOCK-1", "alloc-under-lock", p_basic;
  "rg-no-holds-check", "LOCK-2", "no-holds-check", p_ask_in_lock;
  "rg-reach-invalid-kept", "EXC-1", "reach-invalid-kept", p_write_past_end;
  "rg-free-unmasked", "SIG-1", "free-unmasked", p_basic;
  "rg-double-free", "GUAR-1", "double-free", p_basic;
  "rg-free-under-mapping", "GUAR-2", "free-under-mapping", p_share_free_owner_first;
  "rg-self-map", "GUAR-3", "self-map", p_share_self;
  "rg-dma-on-mapping", "GUAR-4", "dma-on-mapping", p_dma_import;
  "rg-prepare-after-unload", "GUAR-5", "prepare-after-unload", p_unload_then_warm;
  "rg-pinned-first", "GUAR-6", "pinned-first", p_staging;
  "rg-hang-reset", "GUAR-7", "hang-reset", p_hang ~tell:true;
  "rg-zero-alloc", "MEM-1", "zero-alloc", p_empty_buffer;
  "rg-free-busy", "MEM-3", "free-busy", p_free_after_submit;
  "rg-map-host-unaligned", "MEM-6", "map-host-unaligned", p_map_host;
  "rg-entry-retry-5", "CODE-4", "entry-retry-5", p_entry_oom;
  "rg-room-retry", "QUEUE-5", "room-retry", p_many_submits;
  "rg-grow-helper-thread", "QUEUE-5", "grow-helper-thread", p_many_submits;
  "rg-signaled-after-word-free", "TIME-2", "signaled-after-word-free", p_basic;
  "rg-hang-fault-none", "STOP-1", "hang-fault-none", p_hang ~tell:true;
  "rg-free-before-word", "STOP-7", "free-before-word", p_close_busy;
  (* conforming *)
  "ok-basic", "ok", "", p_basic;
  "ok-two-waiters", "ok", "", p_two_waiters;
  "ok-entry-too-big", "ok", "", p_entry_too_big;
  "ok-oom-reclaim", "ok", "", p_oom_reclaim;
  "ok-reopen-without-close", "ok", "", p_reopen_without_close;
  "ok-prepare-all", "ok", "", p_prepare_all;
  "ok-fault-reopen", "ok", "", p_fault_reopen;
  "ok-hang-bounded", "ok", "", p_hang ~tell:true;
  "ok-entry-oom", "ok", "", p_entry_oom;
  "ok-many-submits", "ok", "", p_many_submits;
  "ok-close-busy", "ok", "", p_close_busy;
]
