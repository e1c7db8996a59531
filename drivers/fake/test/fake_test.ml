(* fake_test.ml: a throwaway smoke test of the fake driver: memory, images,
   entries, the queue, sleep, stop (with running and hanging work), and a
   few mutants.  Exits non-zero on the first failure. *)

module E = Rig_edge
module D = Fake.D

external page_alloc : int -> nativeint = "test_page_alloc"
external page_free : nativeint -> unit = "test_page_free"
external poke : nativeint -> int -> int -> unit = "test_poke"
external peek : nativeint -> int -> int = "test_peek"

let check what b =
  if not b then (
    Printf.printf "FAIL: %s\n%!" what;
    exit 1)

let step what = Printf.printf "- %s\n%!" what
let opener name = List.find (fun o -> o.E.name = name) (Fake.openers ())
let open_ name = (opener name).E.make ()
let get = function Some x -> x | None -> failwith "None"
let reach d r = Option.get (D.locate d r).E.reach
let handle d r = (D.locate d r).E.handle

let read d r off n =
  let b = Bytes.create n in
  reach d r (E.Read { off; into = b });
  Bytes.to_string b

let write d r off s = reach d r (E.Write { off; from = s })
let raises f = match f () with _ -> false | exception _ -> true
let raises_invalid f = match f () with _ -> false | exception Invalid_argument _ -> true
let now () = Unix.gettimeofday ()

(* room -> (grow on Grow) -> submit -> commit, as rig does. *)
let submit ?(commit = true) d parts ~value =
  let q = (D.facts d).E.queue in
  let s = E.encode parts in
  let rec go tries =
    match q.E.room s with
    | E.Room -> ()
    | E.Grow ->
        if tries = 0 then failwith "no room after 4 grows";
        (match D.grow d with E.Grown -> () | E.Short n -> Printf.printf "  short %d\n" n);
        go (tries - 1)
  in
  go 4;
  check "submit" (q.E.submit s ~value);
  if commit then check "commit" (q.E.commit ())

let wait_word ?(limit = 5.) d v =
  let t0 = now () in
  let rec loop () =
    let w = D.signaled d in
    if w < v then (
      check (Printf.sprintf "word reaches %d in time (at %d)" v w) (now () -. t0 < limit);
      D.sleep d ~seen:w ~still_ms:100;
      loop ())
  in
  loop ()

(* After stop: the word alone, polled (sleep is no longer allowed). *)
let poll_word ?(limit = 1.) d v =
  let t0 = now () in
  while D.signaled d <> v && now () -. t0 < limit do Thread.delay 0.001 done;
  check (Printf.sprintf "word reads %d after stop (reads %d)" v (D.signaled d)) (D.signaled d = v)

let entry i f = match D.entry i f with E.Entry e -> e | _ -> failwith ("no entry " ^ f)
let load d b = match D.image d b with Ok i -> i | Error e -> failwith e
let word_region d = Option.get (D.facts d).E.own_word

let main_scenario () =
  step "open fake0, fake1";
  let d0 = open_ "fake0" and d1 = open_ "fake1" in
  check "peer d0 d1" (D.peer d0 d1);
  check "not peer d0 d0" (not (D.peer d0 d0));
  check "key" (D.key = "rig-fake");
  let base = Fake.usage d0 E.Device in
  check "queue charged" (base = 64 * 64);

  step "alloc, reach";
  let r = get (D.alloc d0 E.Device 64) in
  check "size" ((D.locate d0 r).E.size = 64);
  check "zeroed" (read d0 r 0 4 = "\000\000\000\000");
  write d0 r 4 "hello";
  check "read back" (read d0 r 4 5 = "hello");
  check "out of bounds" (raises_invalid (fun () -> read d0 r 60 8));
  check "usage" (Fake.usage d0 E.Device = base + 64);
  check "too big: None" (D.alloc d0 E.Mapped (2 lsl 20) = None);
  let r2 = get (D.alloc d0 E.Device 64) in
  check "distinct handles" (handle d0 r <> handle d0 r2);
  write d0 r2 0 "zz";
  check "distinct memory" (read d0 r 0 2 = "\000\000");

  step "images, entries";
  let i = load d0 Fake.kit.E.binary in
  check "refused" (match D.image d0 "not an image" with Error "not a rig-fake image" -> true | _ -> false);
  check "bad line" (match D.image d0 "rigfake 1\nfn x y nop\n" with Error e -> String.length e > 0 | _ -> false);
  let spin = entry i "spin" in
  check "same entry" (D.entry i "spin" = E.Entry spin);
  check "absent" (D.entry i "nope" = E.Absent);
  D.prepare i "nope";
  D.prepare i "fill";
  let fill = entry i "fill" in

  step "submit Fill + Launch spin 20, sleep";
  let t0 = now () in
  submit d0 ~value:1
    [ E.Fill { dst = handle d0 r; off = 0; len = 16; byte = 0xab }; E.Launch { entry = spin; args = [ 20L ] } ];
  wait_word d0 1;
  let dt = now () -. t0 in
  check "spin took ~20 ms" (dt >= 0.015 && dt < 2.);
  check "filled" (read d0 r 0 16 = String.make 16 '\xab');
  submit d0 ~value:2
    [ E.Launch { entry = fill; args = [ handle d0 r2; 8L; 8L; 0x5aL ] };
      E.Copy { src = handle d0 r2; src_off = 8; dst = handle d0 r; dst_off = 32; len = 8 } ];
  wait_word d0 2;
  check "launch fill + copy" (read d0 r 32 8 = String.make 8 '\x5a');
  let t0 = now () in
  D.sleep d0 ~seen:1 ~still_ms:1000;
  check "sleep returns at once when the word differs" (now () -. t0 < 0.05);
  let t0 = now () in
  D.sleep d0 ~seen:2 ~still_ms:50;
  check "sleep returns after still_ms" (now () -. t0 >= 0.045 && now () -. t0 < 1.);

  step "map_peer";
  let m = D.map_peer d1 d0 r in
  check "peer mapping aliases" (read d1 m 0 4 = "\xab\xab\xab\xab");
  write d1 m 0 "XY";
  check "write through mapping" (read d0 r 0 2 = "XY");
  submit d1 ~value:1 [ E.Fill { dst = handle d1 m; off = 60; len = 4; byte = 0x11 } ];
  wait_word d1 1;
  check "d1's work on the mapping" (read d0 r 60 4 = "\x11\x11\x11\x11");

  step "map_host";
  let page = 4096 in
  let p = page_alloc (2 * page) in
  poke p 5 42;
  let h = D.map_host d0 p 10 in
  check "whole page" ((D.locate d0 h).E.size = page);
  check "aliases host" (read d0 h 5 1 = "\042");
  write d0 h (page - 4) "abcd";
  check "host sees it" (peek p (page - 1) = Char.code 'd');
  check "misaligned" (raises_invalid (fun () -> D.map_host d0 (Nativeint.add p 1n) 10));

  step "dma";
  let ok = D.dma d0 r ~fn:"0000:41:00.0" in
  check "dma ok" (match ok with Ok (E.Bus _) -> true | _ -> false);
  check "dma stable" (D.dma d0 r ~fn:"0000:41:00.0" = ok);
  check "dma malformed" (D.dma d0 r ~fn:"41:00.0" = Error "not a bus address: 41:00.0");
  check "dma absent" (D.dma d0 r ~fn:"0000:43:00.0" = Error "no such function: 0000:43:00.0");
  let big = get (D.alloc d0 E.Device 8192) in
  check "dma BAR"
    (D.dma d0 big ~fn:"0000:42:00.0"
    = Error "BAR of 0000:42:00.0 is 4096 bytes, smaller than the region's 8192");
  D.free d0 big;

  step "queue growth";
  Fake.configure ~queue_slots:1 ~device_bytes:(64 * 5) ();
  let g = open_ "fake2" in
  check "small queue" (Fake.usage g E.Device = 64);
  let gr = get (D.alloc g E.Device 4) in
  submit g ~value:1 (List.init 3 (fun k -> E.Fill { dst = handle g gr; off = 0; len = 4; byte = k }));
  wait_word g 1;
  check "grew" (Fake.usage g E.Device = 64 * 3 + 4);
  let q = (D.facts g).E.queue in
  let gm = get (D.alloc g E.Mapped 4) in
  let s = E.encode (List.init 5 (fun _ -> E.Fill { dst = handle g gm; off = 0; len = 4; byte = 0 })) in
  check "grow needed" (q.E.room s = E.Grow);
  check "short, growing what fits" (D.grow g = E.Short 64);
  check "still grow" (q.E.room s = E.Grow);
  check "short again" (D.grow g = E.Short 64);
  D.free g gr;
  check "grown after free" (D.grow g = E.Grown);
  check "room after grown" (q.E.room s = E.Room);
  check "submit5" (q.E.submit s ~value:2);
  check "commit5" (q.E.commit ());
  wait_word g 2;
  Fake.reset ();

  step "entry scratch";
  Fake.configure ~device_bytes:(64 * 64 + 1000) ();
  let sd = open_ "fake2" in
  let scratch_image n = let b, f = (Option.get Fake.kit.E.scratch) n in (load sd b, f) in
  let i1, f1 = scratch_image 6000 in
  check "too big" (raises_invalid (fun () -> D.entry i1 f1));
  let i2, f2 = scratch_image 600 in
  let e2 = entry i2 f2 in
  check "scratch charged" (Fake.usage sd E.Device = 64 * 64 + 600);
  check "second entry" (D.entry i2 f2 = E.Entry e2 && Fake.usage sd E.Device = 64 * 64 + 600);
  let i3, f3 = scratch_image 600 in
  check "no memory" (D.entry i3 f3 = E.No_memory 600);
  check "made nothing" (Fake.usage sd E.Device = 64 * 64 + 600);
  D.prepare i3 f3;
  D.unload i2;
  check "unload frees scratch" (Fake.usage sd E.Device = 64 * 64);
  check "entry after unload" (match D.entry i3 f3 with E.Entry _ -> true | _ -> false);
  Fake.reset ();

  step "stop d0 (nothing running), frees";
  D.stop d0 ~fault:None;
  poll_word d0 2;
  check "counted after stop" (raises_invalid (fun () -> D.alloc d0 E.Device 4));
  check "sleep after stop" (raises_invalid (fun () -> D.sleep d0 ~seen:0 ~still_ms:1));
  check "peer after stop" (D.peer d0 d1);
  D.free d1 m;
  D.free d0 h;
  D.free d0 r;
  D.free d0 r2;
  check "budget back" (Fake.usage d0 E.Device = 0);
  D.unload i;
  D.free d0 (word_region d0);
  page_free p;
  List.iter (fun d -> D.stop d ~fault:None) [ d1; g; sd ];
  D.free d1 (word_region d1)

let hang_scenario () =
  step "hang + stop";
  let d = open_ "fake0" in
  let i = load d Fake.kit.E.binary in
  let hang = entry i "hang" and spin = entry i "spin" in
  let r = get (D.alloc d E.Device 16) in
  let other = open_ "fake1" in
  let m = D.map_peer other d r in
  submit d ~value:1 [ E.Launch { entry = spin; args = [ 1L ] } ];
  wait_word d 1;
  submit d ~value:2 [ E.Launch { entry = hang; args = [] } ];
  submit d ~value:3 [ E.Fill { dst = handle d r; off = 0; len = 16; byte = 1 } ];
  (* Encoded, never committed: stop drops it. *)
  submit ~commit:false d ~value:4 [ E.Fill { dst = handle d r; off = 0; len = 16; byte = 2 } ];
  let t0 = now () in
  D.sleep d ~seen:1 ~still_ms:50;
  check "hang holds the word" (D.signaled d = 1 && now () -. t0 >= 0.045);
  let t0 = now () in
  D.stop d ~fault:(Some "hang bound");
  check "stop returns promptly" (now () -. t0 < 0.1);
  poll_word d 4;
  (* reach after stop is refused: look through the peer mapping. *)
  Thread.delay 0.02;
  check "queued and encoded work dropped" (read other m 0 16 = String.make 16 '\000');
  D.unload i;
  D.free other m;
  D.free d r;
  D.free d (word_region d);
  D.stop other ~fault:None

let fault_scenario () =
  step "fault";
  let d = open_ "fake1" in
  let i = load d Fake.kit.E.binary in
  submit d ~value:7 [ E.Launch { entry = entry i "fault"; args = [] } ];
  let fault () = match D.sleep d ~seen:0 ~still_ms:1000 with () -> None | exception D.Fault w -> Some w in
  check "sleep raises Fault" (fault () = Some "fault function fault");
  check "again" (fault () = Some "fault function fault");
  D.stop d ~fault:(Some "fault function fault");
  poll_word d 7;
  D.unload i;
  D.free d (word_region d)

let encoded_scenario () =
  step "stop drops encoded work; a new device of the same name";
  let d = open_ "fake2" in
  let other = open_ "fake1" in
  let r = get (D.alloc d E.Device 16) in
  let m = D.map_peer other d r in
  submit ~commit:false d ~value:9 [ E.Fill { dst = handle d r; off = 0; len = 16; byte = 3 } ];
  D.stop d ~fault:None;
  poll_word d 9;
  check "not run" (read other m 0 16 = String.make 16 '\000');
  let d' = open_ "fake2" in
  let before = Fake.usage d' E.Device in
  D.free other m;
  D.free d r;
  D.free d (word_region d);
  check "free after stop leaves the new device alone" (Fake.usage d' E.Device = before);
  List.iter (fun d -> D.stop d ~fault:None) [ other; d' ]

let injection_scenario () =
  step "injection";
  let d = open_ "fake0" in
  Fake.inject ~fn:"alloc" ~nth:2 (`Fault "boom");
  ignore (D.alloc d E.Device 4);
  check "injected fault" (match D.alloc d E.Device 4 with _ -> false | exception D.Fault "boom" -> true);
  Fake.inject ~fn:"commit" ~nth:1 `Fail;
  let q = (D.facts d).E.queue in
  let s = E.encode [] in
  check "room" (q.E.room s = E.Room);
  check "submit" (q.E.submit s ~value:1);
  check "injected commit failure" (not (q.E.commit ()));
  Fake.clear_injections ();
  D.stop d ~fault:None;
  poll_word d 1

let mutant_scenario () =
  step "mutants";
  check "mutant names are unique"
    (let names = List.map (fun (n, _, _) -> n) Fake.mutants in
     List.length (List.sort_uniq compare names) = List.length names);
  check "unknown mutant" (raises_invalid (fun () -> Fake.set_mutant (Some "nope")));
  (* stop-no-last-value: the word stays at 0. *)
  Fake.set_mutant (Some "stop-no-last-value");
  let d = open_ "fake0" in
  let q = (D.facts d).E.queue in
  let s = E.encode [] in
  ignore (q.E.room s);
  ignore (q.E.submit s ~value:5);
  D.stop d ~fault:None;
  Thread.delay 0.05;
  check "stop-no-last-value" (D.signaled d = 0);
  (* late-word-write: the spin's value lands after the last one. *)
  Fake.set_mutant (Some "late-word-write");
  let d = open_ "fake1" in
  let i = load d Fake.kit.E.binary in
  submit d ~value:1 [ E.Launch { entry = entry i "spin"; args = [ 100L ] } ];
  submit ~commit:false d ~value:2 [];
  Thread.delay 0.02;
  D.stop d ~fault:None;
  check "late: last value at once" (D.signaled d = 2);
  Thread.delay 0.2;
  check "late: spin value lands later" (D.signaled d = 1);
  Fake.set_mutant (Some "alloc-overlap");
  let d = open_ "fake2" in
  let a = get (D.alloc d E.Device 8) and b = get (D.alloc d E.Device 8) in
  write d a 0 "A";
  check "alloc-overlap" (read d b 0 1 = "A");
  Fake.set_mutant (Some "sleep-consumes-fault");
  let d = open_ "fake0" in
  let i = load d Fake.kit.E.binary in
  submit d ~value:1 [ E.Launch { entry = entry i "fault"; args = [] } ];
  check "first raises" (raises (fun () -> D.sleep d ~seen:0 ~still_ms:1000));
  check "second does not" (not (raises (fun () -> D.sleep d ~seen:0 ~still_ms:10)));
  let with_mutant m f =
    Fake.set_mutant (Some m);
    let d = open_ "fake0" and d' = open_ "fake1" in
    Fake.set_mutant None;
    check m (f d d')
  in
  with_mutant "peer-live" (fun d d' -> D.stop d ~fault:None; not (D.peer d d'));
  with_mutant "map-peer-copy" (fun d d' ->
      let r = get (D.alloc d' E.Device 8) in
      let m = D.map_peer d d' r in
      write d' r 0 "Q";
      read d m 0 1 = "\000");
  with_mutant "map-host-exact" (fun d _ ->
      let h = D.map_host d (page_alloc 4096) 10 in
      (D.locate d h).E.size = 10);
  with_mutant "dma-vague" (fun d _ ->
      let r = get (D.alloc d E.Device 8) in
      D.dma d r ~fn:"zz" = Error "bad address");
  with_mutant "image-takes-anything" (fun d _ -> Result.is_ok (D.image d "junk"));
  with_mutant "entry-remakes" (fun d _ ->
      let i = load d Fake.kit.E.binary in
      D.entry i "spin" <> D.entry i "spin");
  with_mutant "entry-leaks" (fun d _ ->
      let i = load d "rigfake 1\nfn big 1046000 nop\n" in
      let u = Fake.usage d E.Device in
      D.entry i "big" = E.No_memory 1046000 && Fake.usage d E.Device > u);
  with_mutant "entry-too-big-no-memory" (fun d _ ->
      let i = load d "rigfake 1\nfn big 2000000 nop\n" in
      D.entry i "big" = E.No_memory 2000000);
  with_mutant "prepare-reports" (fun d _ ->
      let i = load d Fake.kit.E.binary in
      raises (fun () -> D.prepare i "nope"));
  with_mutant "prepare-restarts" (fun d _ ->
      let i = load d "rigfake 1\nfn s 100 nop\n" in
      ignore (D.entry i "s");
      let u = Fake.usage d E.Device in
      D.prepare i "s";
      Fake.usage d E.Device = u + 100);
  with_mutant "sleep-no-early-return" (fun d _ ->
      let t0 = now () in
      D.sleep d ~seen:1 ~still_ms:100;
      now () -. t0 >= 0.09);
  with_mutant "sleep-overstays" (fun d _ ->
      let i = load d Fake.kit.E.binary in
      submit d ~value:1 [ E.Launch { entry = entry i "spin"; args = [ 200L ] } ];
      let t0 = now () in
      D.sleep d ~seen:0 ~still_ms:10;
      now () -. t0 >= 0.15);
  with_mutant "stop-waits" (fun d _ ->
      let i = load d Fake.kit.E.binary in
      submit d ~value:1 [ E.Launch { entry = entry i "spin"; args = [ 200L ] } ];
      Thread.delay 0.01;
      let t0 = now () in
      D.stop d ~fault:None;
      now () -. t0 >= 0.15);
  with_mutant "stop-runs-encoded" (fun d d' ->
      let r = get (D.alloc d E.Device 8) in
      let m = D.map_peer d' d r in
      submit ~commit:false d ~value:1 [ E.Fill { dst = handle d r; off = 0; len = 8; byte = 7 } ];
      D.stop d ~fault:None;
      read d' m 0 1 = "\007");
  with_mutant "stop-drops-word" (fun d _ ->
      submit d ~value:3 [];
      wait_word d 3;
      D.stop d ~fault:None;
      D.signaled d = 0);
  with_mutant "free-touches-new" (fun d _ ->
      let r = get (D.alloc d E.Device 8) in
      D.stop d ~fault:None;
      let n = open_ "fake0" in
      let u = Fake.usage n E.Device in
      D.free d r;
      Fake.usage n E.Device = u + 8);
  Fake.reset ()

(* Threads racing for a small queue: after Grown, the next room of the
   thread that grew answers Room (QUEUE-2). *)
let concurrent_scenario () =
  step "concurrent submissions, small queue";
  Fake.configure ~queue_slots:2 ~may_block:true ();
  let d = open_ "fake0" in
  Fake.reset ();
  let r = get (D.alloc d E.Device 64) in
  let q = (D.facts d).E.queue in
  let bad = Atomic.make 0 in
  let worker k () =
    for v = 1 to 200 do
      let s = E.encode (List.init 3 (fun _ -> E.Fill { dst = handle d r; off = k * 4; len = 4; byte = v land 0xff })) in
      (match q.E.room s with
      | E.Room -> ()
      | E.Grow -> (
          (match D.grow d with E.Grown -> () | E.Short _ -> Atomic.incr bad);
          match q.E.room s with E.Room -> () | E.Grow -> Atomic.incr bad));
      if not (q.E.submit s ~value:v && q.E.commit ()) then Atomic.incr bad
    done
  in
  let ts = List.init 4 (fun k -> Thread.create (worker k) ()) in
  List.iter Thread.join ts;
  check "no Grow after Grown" (Atomic.get bad = 0);
  submit d ~value:1000 [];
  wait_word d 1000;
  check "all filled" (read d r 0 16 = String.make 16 '\200');
  D.stop d ~fault:None;
  poll_word d 1000

let () =
  main_scenario ();
  concurrent_scenario ();
  hang_scenario ();
  fault_scenario ();
  encoded_scenario ();
  injection_scenario ();
  mutant_scenario ();
  Gc.full_major ();
  print_endline "OK"
