(* Runs each bug's shortest sequence: prints, per driver, what the sequence
   shows on the broken driver, on hostmem as it is (Base), and on a shorter
   sequence of the broken driver.  Exit 1 if a bug does not show or shows
   where it must not. *)
open Rig_edge
module B = Blindseq
module H = Hostmem

external pages : int -> nativeint = "check_pages"

let bad = ref false

let report name ~bug ~base ~short =
  let ok = bug && (not base) && not short in
  if not ok then bad := true;
  Printf.printf "%-24s %s  (broken: %b, hostmem: %b, shorter sequence: %b)\n%!" name
    (if ok then "bug shows only after its sequence" else "UNEXPECTED") bug base short

let opener ?(wrap = B.same_queue) name =
  let o = List.find (fun (o : B.t opener) -> o.name = name) (B.openers ~wrap ()) in
  o.make

let dev ?wrap () = opener ?wrap "hostmem0" ()
let refused = Option.get H.kit.refused_binary

(* MEM-2 *)
let free_after_refusal (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~refuse =
  let d = dev () in
  let a = Option.get (X.alloc d Device 64) in
  if refuse then ignore (X.image d refused);
  X.free d a;
  let b = Option.get (X.alloc d Device 64) and c = Option.get (X.alloc d Device 64) in
  let reach x = Option.get (X.locate d x).reach in
  reach c (Write { off = 0; from = "y" });
  reach b (Write { off = 0; from = "x" });
  let into = Bytes.create 1 in
  reach c (Read { off = 0; into });
  Bytes.to_string into = "x"

(* STOP-3 *)
let stop_last_good (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~good =
  let d = dev ~wrap:B.stop_queue () in
  let q = (X.facts d).queue in
  let r = Option.get (X.alloc d Device 64) in
  let s = encode [ Fill { dst = (X.locate d r).handle; off = 0; len = 4; byte = 1 } ] in
  for v = 1 to good do
    assert (q.room s = Room);
    assert (q.submit s ~value:v)
  done;
  assert (not (q.submit s ~value:(good + 1)));
  X.stop d ~fault:None;
  X.signaled d <> good + 1

(* TIME-5 *)
let fault_polled_away (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~polls =
  let d = dev () in
  let i = Result.get_ok (X.image d H.kit.binary) in
  let e = match X.entry i "fault" with Entry e -> e | _ -> assert false in
  let q = (X.facts d).queue in
  let s = encode [ Launch { entry = e; args = [] } ] in
  assert (q.room s = Room);
  assert (q.submit s ~value:1);
  assert (q.commit ());
  Thread.delay 0.05;
  for _ = 1 to polls do ignore (X.signaled d) done;
  match X.sleep d ~seen:0 ~still_ms:100 with () -> true | exception X.Fault _ -> false

(* MEM-4 *)
let peer_ring (module X : Driver with type t = B.t and type region = B.region and type image = B.image) ~opens =
  let b = opener "hostmem1" () in
  let a = ref (opener "hostmem0" ()) in
  for _ = 2 to opens do a := opener "hostmem0" () done;
  let m = X.map_peer !a b (Option.get (X.alloc b Device 64)) in
  ignore m;
  not (X.peer !a b)

(* CODE-2 *)
let entry_prepare_flush (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~other =
  let d = dev () in
  let i = Result.get_ok (X.image d H.kit.binary) in
  let e1 = X.entry i "nop" in
  X.prepare i (if other then "spin" else "nop");
  X.entry i "nop" <> e1

(* MEM-7 *)
let map_host_recount (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~twice =
  let d = dev () in
  let p = pages 8192 in
  if twice then X.free d (X.map_host d p 8192);
  let r = X.map_host d p 8192 in
  (X.locate d r).size < 8192

(* QUEUE-2 *)
let grow_forgotten (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~interleave =
  let d = dev ~wrap:B.grow_queue () in
  let q = (X.facts d).queue in
  let r = Option.get (X.alloc d Device 64) in
  let fill = Fill { dst = (X.locate d r).handle; off = 0; len = 4; byte = 1 } in
  let big = encode (List.init 63 (fun _ -> fill)) in
  assert (q.room big = Room);
  assert (q.submit big ~value:1);
  let s = encode [ fill ] in
  assert (q.room s = Grow);
  assert (X.grow d = Grown);
  if interleave then Thread.join (Thread.create (fun () -> ignore (q.room s)) ());
  q.room s = Grow

(* CODE-7: Device memory that an idle prepare took, measured as what alloc
   can still get in 64-byte steps. *)
let free_device (module X : Driver with type t = B.t and type region = B.region and type image = B.image) d =
  let rec go acc = match X.alloc d Device 64 with Some r -> go (r :: acc) | None -> acc in
  let rs = go [] in
  List.iter (X.free d) rs;
  List.length rs

let prepare_after_unload (module X : Driver with type t = B.t and type region = B.region and type image = B.image)
    ~unload =
  let d = dev () in
  let i = Result.get_ok (X.image d H.kit.binary) in
  ignore (X.entry i "nop");
  let j = Result.get_ok (X.image d H.kit.binary) in
  if unload then X.unload j;
  let before = free_device (module X) d in
  X.prepare i "nop";
  free_device (module X) d < before

let () =
  let base = (module B.Base : Driver with type t = B.t and type region = B.region and type image = B.image) in
  report "bq-free-after-refusal"
    ~bug:(free_after_refusal (module B.Free_after_refusal) ~refuse:true)
    ~base:(free_after_refusal base ~refuse:true)
    ~short:(free_after_refusal (module B.Free_after_refusal) ~refuse:false);
  report "bq-stop-last-good"
    ~bug:(stop_last_good (module B.Stop_last_good) ~good:2)
    ~base:(stop_last_good base ~good:2)
    ~short:(stop_last_good (module B.Stop_last_good) ~good:1);
  report "bq-fault-polled-away"
    ~bug:(fault_polled_away (module B.Fault_polled_away) ~polls:2)
    ~base:(fault_polled_away base ~polls:2)
    ~short:(fault_polled_away (module B.Fault_polled_away) ~polls:1);
  report "bq-peer-ring"
    ~bug:(peer_ring (module B.Peer_ring) ~opens:3)
    ~base:(peer_ring base ~opens:3)
    ~short:(peer_ring (module B.Peer_ring) ~opens:2);
  report "bq-entry-prepare-flush"
    ~bug:(entry_prepare_flush (module B.Entry_prepare_flush) ~other:true)
    ~base:(entry_prepare_flush base ~other:true)
    ~short:(entry_prepare_flush (module B.Entry_prepare_flush) ~other:false);
  report "bq-map-host-recount"
    ~bug:(map_host_recount (module B.Map_host_recount) ~twice:true)
    ~base:(map_host_recount base ~twice:true)
    ~short:(map_host_recount (module B.Map_host_recount) ~twice:false);
  report "bq-grow-forgotten"
    ~bug:(grow_forgotten (module B.Grow_forgotten) ~interleave:true)
    ~base:(grow_forgotten base ~interleave:true)
    ~short:(grow_forgotten (module B.Grow_forgotten) ~interleave:false);
  report "bq-prepare-after-unload"
    ~bug:(prepare_after_unload (module B.Prepare_after_unload) ~unload:true)
    ~base:(prepare_after_unload base ~unload:true)
    ~short:(prepare_after_unload (module B.Prepare_after_unload) ~unload:false);
  exit (if !bad then 1 else 0)
