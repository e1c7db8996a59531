(* Driver-side probes; see probes.mli.

   Layout: generic pieces (watchdog, host pages) first, then [Kit], a
   functor over the package under test with the shared helpers (sessions,
   devices, resources, submissions, waits, memory measurement, cleanup),
   then one function per case, grouped by section (MEM, CODE, TIME, STOP),
   then the list. *)

open Rig_edge
module Prim = Rig_edge_primitives

let now = Unix.gettimeofday
let spf = Printf.sprintf

(* The driver lacks what the case needs: the case is Not_applicable. *)
exception Skip of string

(* A driver call outlived its bound (it is still in flight): the case ends
   with this finding, if any, and makes no further call of the driver. *)
exception Abandon of Case.finding option

let contains ~sub s =
  let n = String.length sub and m = String.length s in
  let rec at i = i + n <= m && (String.sub s i n = sub || at (i + 1)) in
  n = 0 || at 0

let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------ watchdog *)

type 'a watched = Done of 'a | Raised of exn | Late

(* [watch ~ms f] runs [f] on a thread of its own and waits for it at most
   [ms] milliseconds, in small steps.  [Late] leaves the thread running. *)
let watch ~ms f =
  let cell = Atomic.make None in
  let t =
    Thread.create
      (fun () ->
        let r = try Done (f ()) with e -> Raised e in
        Atomic.set cell (Some r))
      ()
  in
  let deadline = now () +. (float_of_int ms /. 1000.) in
  let rec loop () =
    match Atomic.get cell with
    | Some r ->
        Thread.join t;
        r
    | None ->
        if now () > deadline then Late
        else (
          Unix.sleepf 0.002;
          loop ())
  in
  loop ()

(* -------------------------------------------------------- host pages *)

type host = Host_pages.t

(* Host memory that a driver may still reach is kept alive for good. *)
let leaked_hosts : host list ref = ref []

(* ----------------------------------------------------------------- Kit *)

module Kit (P : Package) = struct
  module D = P.D

  let m = Prim.masked

  type dev = {
    id : int;
    d : D.t;
    oname : string;
    facts : D.region facts;  (* read at open: facts is not called after stop *)
    mutable last : int;  (* the last value given to submit *)
    mutable stopped : bool;
    mutable lost : string option;  (* why, when a call lost the device *)
    mutable hung : bool;  (* runs work that never ends *)
    mutable word_freed : bool;
    mutable keep : submission list;  (* kept alive until the case ends *)
  }

  type res = { mutable live : bool; owner : int; release : unit -> unit }
  type reg = { dev : dev; region : D.region; size : int; res : res }
  type img = { idev : dev; image : D.image; ires : res }

  type session = {
    clause : string;
    acc : Case.finding list ref;
    rng : Random.State.t;
    mutable devs : dev list;  (* newest first *)
    mutable undo : res list;  (* newest first: released in that order *)
    mutable hosts : host list;
    mutable next_id : int;
  }

  let flag s fmt = Printf.ksprintf (fun detail -> s.acc := { Case.clause = s.clause; detail } :: !(s.acc)) fmt
  let abandon s fmt = Printf.ksprintf (fun detail -> raise (Abandon (Some { Case.clause = s.clause; detail }))) fmt
  let int s n = Random.State.int s.rng n
  let byte s = int s 256
  let other_byte s b = (b + 1 + int s 255) land 0xff
  let pattern s n = String.init n (fun _ -> Char.chr (byte s))

  (* A counted call of [dev]: an exception from it loses the device (a
     Fault, or any other exception of the calls EXC-1 lists). *)
  let call dev f =
    try m f
    with e ->
      (match e with
      | D.Fault why -> if dev.lost = None then dev.lost <- Some why
      | _ -> if dev.lost = None then dev.lost <- Some (Printexc.to_string e));
      raise e

  (* --- devices *)

  let openers () = m P.openers

  let open_dev s (o : D.t opener) =
    let d = m o.make in
    let facts = m (fun () -> D.facts d) in
    let dev =
      { id = s.next_id; d; oname = o.name; facts; last = 0; stopped = false; lost = None;
        hung = false; word_freed = false; keep = [] }
    in
    s.next_id <- s.next_id + 1;
    s.devs <- dev :: s.devs;
    dev

  let open_first s =
    match openers () with
    | [] -> raise (Skip "the package has no opener")
    | o :: _ -> open_dev s o

  let open_two s =
    match openers () with
    | o1 :: o2 :: _ ->
        let a = open_dev s o1 in
        let b = open_dev s o2 in
        (a, b)
    | _ -> raise (Skip "the package has fewer than two devices")

  (* --- resources *)

  let track s dev release =
    let r = { live = true; owner = dev.id; release } in
    s.undo <- r :: s.undo;
    r

  let release r =
    if r.live then (
      r.live <- false;
      r.release ())

  let free_reg r = release r.res

  let reg s dev region size =
    { dev; region; size; res = track s dev (fun () -> call dev (fun () -> D.free dev.d region)) }

  let alloc s dev mem n =
    match call dev (fun () -> D.alloc dev.d mem n) with
    | None -> None
    | Some r -> Some (reg s dev r n)

  (* Host memory the device reaches: Mapped, or Pinned where Mapped is None
     (rig's own fallback, GUAR-6). *)
  let alloc_host s dev n =
    match alloc s dev Mapped n with Some r -> Some r | None -> alloc s dev Pinned n

  let map_peer s dev (r : reg) =
    let mp = call dev (fun () -> D.map_peer dev.d r.dev.d r.region) in
    reg s dev mp r.size

  let map_host s dev p n =
    let mp = call dev (fun () -> D.map_host dev.d p n) in
    reg s dev mp n

  let image s dev bin =
    match call dev (fun () -> D.image dev.d bin) with
    | Error why -> Error why
    | Ok image -> Ok { idev = dev; image; ires = track s dev (fun () -> call dev (fun () -> D.unload image)) }

  let entry (i : img) f = call i.idev (fun () -> D.entry i.image f)

  let place (r : reg) = D.locate r.dev.d r.region
  let handle r = (place r).handle

  let read (r : reg) ~off ~len =
    match (place r).reach with
    | None -> None
    | Some f ->
        let into = Bytes.create len in
        call r.dev (fun () -> f (Read { off; into }));
        Some (Bytes.to_string into)

  let write (r : reg) ~off from =
    match (place r).reach with
    | None -> false
    | Some f ->
        call r.dev (fun () -> f (Write { off; from }));
        true

  let reachable (r : reg) = (place r).reach <> None

  (* [host_pages s size] is page-aligned host memory of [size] bytes and
     its address, kept with the case's state. *)
  let host_pages s size =
    match Host_pages.alloc size with
    | addr, ba -> s.hosts <- ba :: s.hosts; (addr, ba)
    | exception Failure why -> raise (Skip why)

  (* --- submissions and waits *)

  (* [submit s dev parts] asks room (growing as rig does, at most four
     times), submits with the next value and commits unless [~commit:false].
     [Ok v] or [Error why]. *)
  let submit ?(commit = true) dev parts =
    let q = dev.facts.queue in
    let sub = encode parts in
    dev.keep <- sub :: dev.keep;
    let rec ask n =
      match call dev (fun () -> q.room sub) with
      | Room -> Ok ()
      | Grow -> (
          if n >= 4 then Error "room answers Grow after four growths"
          else
            match call dev (fun () -> D.grow dev.d) with
            | Grown -> ask (n + 1)
            | Short k -> Error (spf "grow is Short %d" k))
    in
    match ask 0 with
    | Error e -> Error e
    | Ok () ->
        let v = dev.last + 1 in
        let ok = m (fun () -> q.submit sub ~value:v) in
        dev.last <- v;
        if not ok then (
          dev.lost <- Some "failed submit";
          Error "submit failed")
        else if commit && not (m q.commit) then (
          dev.lost <- Some "failed commit";
          Error "commit failed")
        else Ok v

  (* [launch dev h what]: one Launch of entry [h] with no argument, which the
     case needs to go on ([what] names it in the Skip). *)
  let launch dev h what =
    match submit dev [ Launch { entry = h; args = [] } ] with
    | Ok v -> v
    | Error e -> raise (Skip (spf "setup: the %s launch: %s" what e))

  type slept = Returned | Faulted of string | Other of exn

  (* One call of sleep under the watchdog; outliving [bound_ms] abandons the
     case with a finding. *)
  let sleep s dev ~seen ~still_ms ~bound_ms =
    match watch ~ms:bound_ms (fun () -> m (fun () -> D.sleep dev.d ~seen ~still_ms)) with
    | Done () -> Returned
    | Raised (D.Fault why) ->
        if dev.lost = None then dev.lost <- Some why;
        Faulted why
    | Raised e -> Other e
    | Late -> abandon s "%s: sleep ~seen:%d ~still_ms:%d did not return within %d ms" dev.oname seen still_ms bound_ms

  (* [sleep], and how long it took, in milliseconds. *)
  let timed_sleep s dev ~seen ~still_ms ~bound_ms =
    let t0 = now () in
    let outcome = sleep s dev ~seen ~still_ms ~bound_ms in
    (outcome, (now () -. t0) *. 1000.)

  type waited = Reached | Timed_out of int | Fault_seen of string

  (* [wait_value s dev v ~ms] sleeps until the word reads at least [v]. *)
  let wait_value s dev v ~ms =
    let deadline = now () +. (float_of_int ms /. 1000.) in
    let rec loop () =
      let w = D.signaled dev.d in
      if w >= v then Reached
      else if now () > deadline then Timed_out w
      else
        match sleep s dev ~seen:w ~still_ms:20 ~bound_ms:6000 with
        | Returned | Other _ -> loop ()
        | Faulted why -> Fault_seen why
    in
    loop ()

  let describe_wait = function
    | Reached -> "reached"
    | Timed_out w -> spf "did not arrive within the bound (the word reads %d)" w
    | Fault_seen why -> spf "the device faulted: %s" why

  (* Setup work: submit, commit and wait, or skip the case. *)
  let run_or_skip s dev parts what =
    match submit dev parts with
    | Error e -> raise (Skip (spf "setup: %s: %s" what e))
    | Ok v -> (
        match wait_value s dev v ~ms:3000 with
        | Reached -> v
        | w -> raise (Skip (spf "setup: %s: value %d %s" what v (describe_wait w))))

  (* [poll_word dev ~ms until] reads signaled in 10 ms steps until [until w]
     holds or [ms] pass; the last word read. *)
  let poll_word dev ~ms until =
    let deadline = now () +. (float_of_int ms /. 1000.) in
    let rec loop () =
      let w = D.signaled dev.d in
      if until w || now () > deadline then w
      else (
        Thread.delay 0.01;
        loop ())
    in
    loop ()

  (* --- stopping and cleanup *)

  type stopped = Stop_returned of float | Stop_raised of exn * float

  (* [stop s dev ~bound_ms]: stop under the watchdog, with no call of [dev]
     in flight; the seconds it took. *)
  let stop s dev ~bound_ms =
    let t0 = now () in
    match watch ~ms:bound_ms (fun () -> m (fun () -> D.stop dev.d ~fault:dev.lost)) with
    | Done () ->
        dev.stopped <- true;
        Stop_returned (now () -. t0)
    | Raised e ->
        dev.stopped <- true;
        Stop_raised (e, now () -. t0)
    | Late -> abandon s "%s: stop did not return within %d ms" dev.oname bound_ms

  (* Close as rig does: let the work end (unless it hangs or the device is
     lost), then stop. *)
  let close s dev =
    if not dev.stopped then begin
      if dev.lost = None && not dev.hung then ignore (wait_value s dev dev.last ~ms:3000);
      if dev.hung && dev.lost = None then dev.lost <- Some "hang bound";
      ignore (stop s dev ~bound_ms:6000)
    end

  (* After stop: wait (bounded) until the word reads the last value. *)
  let settled dev ~ms = poll_word dev ~ms (fun w -> w = dev.last) = dev.last

  let free_word dev =
    if not dev.word_freed then begin
      dev.word_freed <- true;
      match dev.facts.own_word with
      | Some w -> ( try m (fun () -> D.free dev.d w) with _ -> ())
      | None -> ()
    end

  (* Free and unload what [dev] owns (after its stop and settled word),
     newest first, then its word.  Faults are dropped, as rig drops them. *)
  let release_dev s dev =
    List.iter (fun r -> if r.owner = dev.id then try release r with _ -> ()) s.undo;
    free_word dev

  let finish s =
    let everything_freed =
      try
        List.iter (close s) (List.rev s.devs);
        let ok = List.for_all (fun dev -> dev.word_freed || settled dev ~ms:3000) s.devs in
        if ok then begin
          List.iter (fun r -> try release r with _ -> ()) s.undo;
          List.iter free_word s.devs
        end;
        ok
      with
      | Abandon f ->
          Option.iter (fun f -> s.acc := f :: !(s.acc)) f;
          false
      | _ -> false
    in
    if not everything_freed then leaked_hosts := s.hosts @ !leaked_hosts;
    ignore (Sys.opaque_identity s.hosts);
    List.iter (fun dev -> ignore (Sys.opaque_identity dev.keep)) s.devs

  (* [run ~clause ~seed body]: a session, the body, the cleanup. *)
  let run ~clause ~seed body =
    let s =
      { clause; acc = ref []; rng = Random.State.make [| seed |]; devs = []; undo = []; hosts = [];
        next_id = 0 }
    in
    let outcome =
      match body s with
      | () -> `Ran
      | exception Skip why -> `Skip why
      | exception Abandon f ->
          Option.iter (fun f -> s.acc := f :: !(s.acc)) f;
          `Abandoned
      | exception e ->
          flag s "unexpected exception: %s" (Printexc.to_string e);
          `Ran
    in
    (match outcome with `Abandoned -> () | `Ran | `Skip _ -> finish s);
    match outcome with
    | `Skip why when !(s.acc) = [] -> Case.Not_applicable why
    | `Skip _ | `Ran | `Abandoned -> Case.Ran (List.rev !(s.acc))

  (* --- memory measurement *)

  (* [take s dev amount]: Device regions totalling at most [amount] bytes,
     in power-of-two chunks from 1 GiB down to one word, as many as fit. *)
  let take s dev amount =
    let rec go remaining size acc count =
      if remaining <= 0 || size < word || count >= 20000 then acc
      else if size > remaining then go remaining (size / 2) acc count
      else
        match alloc s dev Device size with
        | Some r -> go (remaining - size) size (r :: acc) (count + 1)
        | None -> go remaining (size / 2) acc count
    in
    go amount (1 lsl 30) [] 0

  let total rs = List.fold_left (fun a r -> a + r.size) 0 rs

  (* Free Device memory: what [take] gets, given back at once. *)
  let free_bytes s dev =
    let rs = take s dev max_int in
    let t = total rs in
    List.iter free_reg rs;
    t

  (* --- code *)

  let binary_image s dev =
    match image s dev P.kit.binary with
    | Ok i -> i
    | Error why -> raise (Skip (spf "setup: the device refuses kit.binary: %s" why))

  (* The entry of one of kit.binary's functions, or skip. *)
  let kit_entry s dev what fname =
    let i = binary_image s dev in
    match entry i fname with
    | Entry h -> h
    | Absent -> raise (Skip (spf "setup: kit.binary has no %s function %S" what fname))
    | No_memory n -> raise (Skip (spf "setup: no memory (%d bytes) for the %s function" n what))

  let need_item what = function Some x -> x | None -> raise (Skip (spf "the kit has no %s" what))

  let scratch_image s dev n =
    let bin, fname = need_item "scratch" P.kit.scratch n in
    match image s dev bin with
    | Ok i -> (i, fname)
    | Error why -> raise (Skip (spf "setup: the device refuses the scratch binary of %d bytes: %s" n why))

  (* The image and function the prepare probes use: one whose launches need
     scratch memory where the kit has one, else the kit's spin. *)
  let function_to_prepare s dev =
    match P.kit.scratch with
    | Some _ -> scratch_image s dev (4096 * (1 + int s 4))
    | None -> (binary_image s dev, need_item "scratch or spin" P.kit.spin)

  let fill_part r ~off ~len ~byte = Fill { dst = handle r; off; len; byte }

  (* --- witness: a region of [a] whose bytes can still be read after [a]'s
     stop, through host memory (map_host) or another device's map_peer. *)
  type witness = { wreg : reg; wread : off:int -> len:int -> string; wwrite : off:int -> string -> unit }

  let host_witness s a n =
    let size = round_up n 4096 in
    let addr, ba = host_pages s size in
    let wreg = map_host s a addr n in
    let wread ~off ~len = String.init len (fun i -> Bigarray.Array1.get ba (off + i)) in
    let wwrite ~off str = String.iteri (fun i c -> Bigarray.Array1.set ba (off + i) c) str in
    { wreg; wread; wwrite }

  let peer_witness s a b n =
    let kinds = (if D.peer b.d a.d then [ `Device ] else []) @ [ `Host ] in
    let rec try_kinds = function
      | [] -> None
      | k :: rest -> (
          let r = match k with `Device -> alloc s a Device n | `Host -> alloc_host s a n in
          match r with
          | None -> try_kinds rest
          | Some r ->
              let mp = map_peer s b r in
              if not (reachable mp) then try_kinds rest
              else
                let wread ~off ~len = Option.get (read mp ~off ~len) in
                let wwrite ~off str = ignore (write mp ~off str) in
                Some { wreg = r; wread; wwrite })
    in
    try_kinds kinds
end

(* The case constructor: one clause per case. *)
let case name clause run = { Case.name; clauses = [ clause ]; run }

(* ================================================================= MEM *)

(* MEM-2: regions of each kind hold their own bytes, and place.size >= n. *)
let mem2_distinct (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-2" ~seed (fun s ->
      let dev = K.open_first s in
      let regions = ref [] in
      let get kind label =
        for _ = 1 to 2 + K.int s 3 do
          let n = word * (1 + K.int s 2048) in
          let r = match kind with `Device -> K.alloc s dev Device n | `Host -> K.alloc_host s dev n in
          match r with
          | None -> ()
          | Some r ->
              let size = (K.place r).size in
              if size < n then K.flag s "alloc of %d bytes of %s memory: place.size is %d" n label size;
              regions := (label, n, r) :: !regions
        done
      in
      get `Device "Device";
      get `Host "Mapped/Pinned";
      let regions = List.rev !regions in
      (* The patterns go in only once every region exists, so that a later
         alloc over an earlier region's memory shows. *)
      let written =
        List.filter_map
          (fun (label, n, r) ->
            let p = K.pattern s n in
            if K.write r ~off:0 p then Some (label, n, r, p) else None)
          regions
      in
      if written = [] then raise (Skip "no region the host can reach");
      List.iteri
        (fun i (label, n, r, p) ->
          match K.read r ~off:0 ~len:n with
          | Some got when got <> p ->
              let j = ref 0 in
              while got.[!j] = p.[!j] do incr j done;
              K.flag s "region %d (%s, %d bytes) does not hold the bytes written into it: byte %d reads %02x, not %02x (alloc overlaps another region?)"
                i label n !j (Char.code got.[!j]) (Char.code p.[!j])
          | _ -> ())
        written)

(* MEM-4: peer answers the same once either device is stopped. *)
let mem4_peer_stable (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-4" ~seed (fun s ->
      let a, b = K.open_two s in
      let ab = P.D.peer a.d b.d and ba = P.D.peer b.d a.d in
      let n = word * (1 + K.int s 1024) in
      let try_map x y yes =
        if yes then
          match K.alloc s y Device n with
          | None -> ()
          | Some r -> (
              match K.map_peer s x r with
              | _ -> ()
              | exception e ->
                  K.flag s "peer %s %s is true, but map_peer of %d bytes of Device memory raised %s" x.oname y.oname n
                    (Printexc.to_string e))
      in
      try_map a b ab;
      try_map b a ba;
      let check when_ =
        let ab' = P.D.peer a.d b.d and ba' = P.D.peer b.d a.d in
        if ab' <> ab then K.flag s "peer %s %s was %b at open, %b %s" a.oname b.oname ab ab' when_;
        if ba' <> ba then K.flag s "peer %s %s was %b at open, %b %s" b.oname a.oname ba ba' when_
      in
      K.close s b;
      check (spf "once %s is stopped" b.oname);
      K.close s a;
      check "once both are stopped")

(* MEM-5: map_peer maps the memory of r itself, both ways, also for work. *)
let mem5_map_peer_live (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-5" ~seed (fun s ->
      let a, b = K.open_two s in
      let kinds = (if P.D.peer a.d b.d then [ `Device ] else []) @ [ `Host ] in
      let tested = ref 0 in
      List.iter
        (fun kind ->
          let n = word * (4 + K.int s 1024) in
          let label = match kind with `Device -> "Device" | `Host -> "Mapped/Pinned" in
          let r = match kind with `Device -> K.alloc s b Device n | `Host -> K.alloc_host s b n in
          match r with
          | None -> ()
          | Some r ->
              let mp = K.map_peer s a r in
              if K.reachable r && K.reachable mp then begin
                incr tested;
                let p1 = K.pattern s n in
                ignore (K.write r ~off:0 p1);
                if K.read mp ~off:0 ~len:n <> Some p1 then
                  K.flag s "%s memory of %s: bytes written into r after map_peer do not show through %s's mapping" label
                    b.oname a.oname;
                let p2 = K.pattern s n in
                ignore (K.write mp ~off:0 p2);
                if K.read r ~off:0 ~len:n <> Some p2 then
                  K.flag s "%s memory of %s: bytes written through %s's mapping do not show in r" label b.oname a.oname;
                let off = word * K.int s (n / word) in
                let len = 1 + K.int s (n - off) in
                let bt = K.byte s in
                match K.submit a [ K.fill_part mp ~off ~len ~byte:bt ] with
                | Error e -> K.flag s "a Fill of %s's mapping could not be submitted: %s" a.oname e
                | Ok v -> (
                    match K.wait_value s a v ~ms:3000 with
                    | Reached -> (
                        match K.read r ~off ~len with
                        | Some got when got <> String.make len (Char.chr bt) ->
                            K.flag s "%s memory of %s: a Fill on %s of bytes [%d,%d) of the mapping with %02x does not show in r"
                              label b.oname a.oname off (off + len) bt
                        | _ -> ())
                    | w -> K.flag s "a Fill on %s of its mapping of %s memory: %s" a.oname label (K.describe_wait w))
              end)
        kinds;
      if !tested = 0 then raise (Skip "no map_peer mapping of a region the host can reach"))

(* MEM-7: map_host maps the whole pages: a Fill of the last word, and on to
   the end of its page, reaches host memory. *)
let mem7_whole_pages (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-7" ~seed (fun s ->
      let dev = K.open_first s in
      if not dev.facts.maps_host then raise (Skip "device does not declare maps_host");
      let addr, ba = K.host_pages s 8192 in
      Bigarray.Array1.fill ba '\000';
      (* n: one page and some bytes, not a multiple of the word. *)
      let n = 4096 + (word * K.int s 1000) + 1 + K.int s (word - 1) in
      let r = K.map_host s dev addr n in
      let fill_and_check ~off ~len what =
        let bt = 1 + K.int s 255 in
        match K.submit dev [ K.fill_part r ~off ~len ~byte:bt ] with
        | Error e ->
            K.flag s "map_host of %d bytes: a Fill of %s could not be submitted: %s" n what e;
            false
        | Ok v -> (
            match K.wait_value s dev v ~ms:3000 with
            | Reached ->
                let bad = ref None in
                for i = off to off + len - 1 do
                  if !bad = None && Char.code (Bigarray.Array1.get ba i) <> bt then bad := Some i
                done;
                (match !bad with
                | Some i ->
                    K.flag s "map_host of %d bytes: a Fill of %s [%d,%d) with %02x left host byte %d at %02x" n what off
                      (off + len) bt i (Char.code (Bigarray.Array1.get ba i))
                | None -> ());
                true
            | w ->
                K.flag s "map_host of %d bytes: a Fill of %s [%d,%d) %s" n what off (off + len) (K.describe_wait w);
                false)
      in
      let lo = n / word * word and hi = round_up n word in
      if fill_and_check ~off:lo ~len:(hi - lo) "the last word" && hi < 8192 then
        ignore (fill_and_check ~off:hi ~len:(8192 - hi) "the rest of the last page"))

(* MEM-8: dma's Errors name a malformed or absent fn; the kit's fn reaches. *)
let mem8_dma_errors (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-8" ~seed (fun s ->
      let fn = K.need_item "bus_function" P.kit.bus_function in
      let dev = K.open_first s in
      let n = word * (1 + K.int s 1024) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let dma fn = K.call dev (fun () -> P.D.dma dev.d r.region ~fn) in
      let bad = [ (spf "not-a-bus-%d" (K.int s 1000), "not a bus address"); ("0000:ff:1f.7", "no function of the machine") ] in
      List.iter
        (fun (bad, what) ->
          match dma bad with
          | Error why when contains ~sub:bad why -> ()
          | Error why -> K.flag s "dma ~fn:%S (%s) is Error %S, which does not name fn" bad what why
          | Ok (Bus a) -> K.flag s "dma ~fn:%S (%s) answered Bus 0x%Lx" bad what a)
        bad;
      match dma fn with
      | Ok (Bus _) -> ()
      | Error why -> K.flag s "dma ~fn:%S (kit.bus_function) of %d bytes of Device memory is Error %S" fn n why)

(* ================================================================ CODE *)

(* CODE-1: image takes kit.binary and refuses kit.refused_binary with Error. *)
let code1_image (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-1" ~seed (fun s ->
      let dev = K.open_first s in
      (match K.image s dev P.kit.binary with
      | Ok _ -> ()
      | Error why -> K.flag s "image refuses kit.binary: %s" why);
      match P.kit.refused_binary with
      | None -> ()
      | Some b -> (
          match K.image s dev b with
          | Error _ -> ()
          | Ok _ -> K.flag s "image takes kit.refused_binary instead of answering Error"
          | exception e -> K.flag s "image of kit.refused_binary raised %s instead of answering Error" (Printexc.to_string e)))

(* CODE-2: a second entry makes nothing new; Absent for an absent name; a
   launch needs no memory beyond what entry made. *)
let code2_entry (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-2" ~seed (fun s ->
      let dev = K.open_first s in
      let need = 4096 * (4 + K.int s 12) in
      let i, f = K.scratch_image s dev need in
      let h =
        match K.entry i f with
        | Entry h -> h
        | Absent -> raise (Skip (spf "setup: entry of the scratch function %S is Absent" f))
        | No_memory k -> raise (Skip (spf "setup: first entry is No_memory %d" k))
      in
      let before = K.free_bytes s dev in
      let second = K.entry i f in
      let after = K.free_bytes s dev in
      (match second with
      | Entry h' when h' = h -> ()
      | Entry h' -> K.flag s "a second entry of %S answered a new handle (%Ld, then %Ld)" f h h'
      | Absent -> K.flag s "a second entry of %S answered Absent" f
      | No_memory k -> K.flag s "a second entry of %S answered No_memory %d" f k);
      if after <> before then
        K.flag s "a second entry of %S changed free Device memory from %d to %d bytes" f before after;
      let absent = spf "probe-absent-%d" (K.int s 100000) in
      (match K.entry i absent with
      | Absent -> ()
      | Entry _ -> K.flag s "entry of %S, which the image lacks, answered Entry" absent
      | No_memory k -> K.flag s "entry of %S, which the image lacks, answered No_memory %d" absent k);
      (* A launch with the device's memory full must still run. *)
      let launch = [ Launch { entry = h; args = [] } ] in
      ignore (K.run_or_skip s dev launch "a first launch of the scratch function");
      let fillers = K.take s dev max_int in
      (match K.submit dev launch with
      | Error _ -> () (* queues may need memory: not this clause *)
      | Ok v -> (
          match K.wait_value s dev v ~ms:3000 with
          | Reached -> ()
          | w -> K.flag s "a launch of %S with the Device memory full: %s" f (K.describe_wait w)));
      if dev.lost = None then ignore (K.wait_value s dev dev.last ~ms:3000);
      List.iter K.free_reg fillers)

(* CODE-3: No_memory n (n >= the need), having made nothing. *)
let code3_no_memory (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-3" ~seed (fun s ->
      let dev = K.open_first s in
      let need = 4096 * (8 + K.int s 8) in
      let i, f = K.scratch_image s dev need in
      let free0 = K.free_bytes s dev in
      if free0 < need then raise (Skip (spf "setup: the device has %d bytes free, less than %d" free0 need));
      let keep = word * (1 + K.int s ((need / word) - 2)) in
      let fillers = K.take s dev (free0 - keep) in
      let before = K.free_bytes s dev in
      if before <= 0 || before >= need then
        raise (Skip (spf "setup: could not leave between 0 and %d bytes free (%d)" need before));
      let answer = K.entry i f in
      let after = K.free_bytes s dev in
      (match answer with
      | No_memory k when k >= need -> ()
      | No_memory k -> K.flag s "entry with %d bytes free answered No_memory %d, fewer than the %d bytes %S needs" before k need f
      | Entry _ -> K.flag s "entry of %S, which needs %d bytes, answered Entry with %d bytes free" f need before
      | Absent -> K.flag s "entry of %S answered Absent" f);
      if after <> before then
        K.flag s "entry answering No_memory changed free Device memory from %d to %d bytes" before after;
      List.iter K.free_reg fillers;
      match K.entry i f with
      | Entry _ -> ()
      | No_memory k -> K.flag s "with the memory freed again, entry of %S still answers No_memory %d" f k
      | Absent -> K.flag s "with the memory freed again, entry of %S answers Absent" f)

(* CODE-5: Invalid_argument for a function that needs more than the device
   has. *)
let code5_too_big (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-5" ~seed (fun s ->
      let dev = K.open_first s in
      let free0 = K.free_bytes s dev in
      let need = round_up (max (1 lsl 30) ((4 * free0) + 4096 + (4096 * K.int s 16))) 4096 in
      let i, f = K.scratch_image s dev need in
      match Prim.masked (fun () -> P.D.entry i.image f) with
      | exception Invalid_argument _ -> ()
      | exception e ->
          i.idev.lost <- Some (Printexc.to_string e);
          K.flag s "entry of a function needing %d bytes (the device has %d free) raised %s, not Invalid_argument" need free0
            (Printexc.to_string e)
      | No_memory k ->
          K.flag s "entry of a function needing %d bytes (the device has %d free) answered No_memory %d, not Invalid_argument"
            need free0 k
      | Entry _ -> K.flag s "entry of a function needing %d bytes (the device has %d free) answered Entry" need free0
      | Absent -> K.flag s "entry of a function needing %d bytes answered Absent" need)

(* CODE-6: prepare reports nothing; the next entry answers as entry would. *)
let code6_prepare (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-6" ~seed (fun s ->
      let dev = K.open_first s in
      let i, f = K.function_to_prepare s dev in
      let prepare g = Prim.masked (fun () -> P.D.prepare i.image g) in
      let absent = spf "probe-absent-%d" (K.int s 100000) in
      (match prepare absent with
      | () -> ()
      | exception e -> K.flag s "prepare of %S, which the image lacks, raised %s" absent (Printexc.to_string e));
      (match K.entry i absent with
      | Absent -> ()
      | Entry _ -> K.flag s "entry after prepare of %S, which the image lacks, answered Entry" absent
      | No_memory k -> K.flag s "entry after prepare of %S, which the image lacks, answered No_memory %d" absent k);
      (match prepare f with
      | () -> ()
      | exception e -> K.flag s "prepare of %S raised %s" f (Printexc.to_string e));
      (* Whether a later entry answers the same handle is CODE-2's. *)
      match K.entry i f with
      | Entry _ -> ()
      | Absent -> K.flag s "entry of %S after its prepare answered Absent" f
      | No_memory k -> K.flag s "entry of %S after its prepare answered No_memory %d" f k)

(* CODE-7: prepares of a function that has an entry make nothing.  prepare
   may start its work and return: the memory is measured again once a
   moment has passed, and not through a second entry, whose making nothing
   new is CODE-2's. *)
let code7_prepare_idle (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-7" ~seed (fun s ->
      let dev = K.open_first s in
      let i, f = K.function_to_prepare s dev in
      (match K.entry i f with Entry _ -> () | _ -> raise (Skip (spf "setup: entry of %S is not Entry" f)));
      let before = K.free_bytes s dev in
      let times = 2 + K.int s 2 in
      for _ = 1 to times do
        try Prim.masked (fun () -> P.D.prepare i.image f) with _ -> ()
      done;
      Thread.delay 0.1;
      let after = K.free_bytes s dev in
      if after <> before then
        K.flag s "%d prepares of %S, which had an entry, changed free Device memory from %d to %d bytes" times f before after)

(* ================================================================ TIME *)

(* TIME-3: sleep returns at once when the word already differs from seen. *)
let time3_early_return (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-3" ~seed (fun s ->
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      for _ = 1 to 1 + K.int s 3 do
        ignore (K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill")
      done;
      let w = P.D.signaled dev.d in
      List.iter
        (fun seen ->
          let outcome, ms = K.timed_sleep s dev ~seen ~still_ms:2000 ~bound_ms:6000 in
          match outcome with
          | K.Returned | K.Faulted _ | K.Other _ ->
              if ms > 1000. then
                K.flag s "with the word at %d, sleep ~seen:%d ~still_ms:2000 took %.0f ms instead of returning at once" w seen ms)
        [ w - 1; w + 1 + K.int s 5 ])

(* How late past still_ms a sleep may return on a loaded machine (TIME-4,
   TIME-6). *)
let sleep_slack_ms = 1000

(* TIME-4: with work hanging, sleep returns (or raises Fault) by still_ms. *)
let time4_bounded_sleep (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-4" ~seed (fun s ->
      let hang = K.need_item "hang" P.kit.hang in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "hang" hang in
      ignore (K.launch dev h "hang");
      dev.hung <- true;
      Thread.delay 0.05;
      let rec go k =
        if k > 0 then begin
          let still = 30 + K.int s 70 in
          let w = P.D.signaled dev.d in
          let outcome, ms = K.timed_sleep s dev ~seen:w ~still_ms:still ~bound_ms:(still + 5000) in
          if ms > float_of_int (still + sleep_slack_ms) then
            K.flag s "with work hanging, sleep ~seen:%d ~still_ms:%d returned after %.0f ms" w still ms;
          match outcome with K.Faulted _ -> () | _ -> go (k - 1)
        end
      in
      go 2)

(* TIME-5: after a fault, every sleep raises Fault. *)
let time5_fault_sticks (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"TIME-5" ~seed (fun s ->
      let fault = K.need_item "fault" P.kit.fault in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "fault" fault in
      ignore (K.launch dev h "fault");
      let deadline = now () +. 3. in
      let rec first () =
        match K.sleep s dev ~seen:(P.D.signaled dev.d) ~still_ms:20 ~bound_ms:6000 with
        | K.Faulted why -> Some why
        | _ -> if now () > deadline then None else first ()
      in
      match first () with
      | None -> K.flag s "sleep did not raise Fault within 3 s of a launch of the fault function %S" fault
      | Some why ->
          let again = 3 + K.int s 3 in
          for k = 1 to again do
            match K.sleep s dev ~seen:(P.D.signaled dev.d) ~still_ms:20 ~bound_ms:6000 with
            | K.Faulted _ -> ()
            | K.Returned -> K.flag s "sleep call %d after the Fault (%s) returned instead of raising Fault" k why
            | K.Other e -> K.flag s "sleep call %d after the Fault (%s) raised %s instead of Fault" k why (Printexc.to_string e)
          done)

(* TIME-6: sleep called while another thread's submit or commit runs
   behaves as sleep must: it returns by still_ms (with slack for a loaded
   machine).  A thread submits small pieces of work while this one sleeps
   over and over; the calls of either that began or ended while the other
   ran are counted, and with none the case is n/a.  The fake's commits are
   held (its commit_hold_ms knob, with may_block so that the held commit
   lets the runtime go), so that the sleeps surely overlap one. *)
let time6_hold_ms = 1500

let time6_sleep_during_submit (module P : Package) ~seed =
  let module K = Kit (P) in
  let held = P.name = Fake.name in
  if held then Fake.configure ~may_block:true ~commit_hold_ms:time6_hold_ms ();
  Fun.protect ~finally:(fun () -> if held then Fake.configure ()) @@ fun () ->
  K.run ~clause:"TIME-6" ~seed (fun s ->
      let dev = K.open_first s in
      let r = match K.alloc s dev Device word with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let rounds = if held then 1 else 200 in
      (* A sleep too long with nothing else running is TIME-4's. *)
      let alone = 20 + K.int s 30 in
      let _, ms = K.timed_sleep s dev ~seen:(P.D.signaled dev.d) ~still_ms:alone ~bound_ms:(alone + 5000) in
      if ms > float_of_int (alone + sleep_slack_ms) then
        raise (Skip (spf "sleep ~still_ms:%d took %.0f ms with no submit running (TIME-4's probe judges that)" alone ms));
      let sleeping = Atomic.make false and submitting = Atomic.make false in
      let over = Atomic.make false and overlaps = Atomic.make 0 and failed = Atomic.make None in
      let submitter =
        Thread.create
          (fun () ->
            let rec go i =
              if i <= rounds then begin
                Atomic.set submitting true;
                let during = Atomic.get sleeping in
                let res = try K.submit dev [ K.fill_part r ~off:0 ~len:word ~byte:(i land 255) ] with e -> Error (Printexc.to_string e) in
                if during || Atomic.get sleeping then Atomic.incr overlaps;
                Atomic.set submitting false;
                match res with Ok _ -> go (i + 1) | Error e -> Atomic.set failed (Some (i, e))
              end
            in
            go 1;
            Atomic.set over true)
          ()
      in
      let rec sleeps () =
        if not (Atomic.get over) then begin
          let still = 20 + K.int s 30 in
          let w = P.D.signaled dev.d in
          Atomic.set sleeping true;
          let during = Atomic.get submitting in
          let outcome, ms = K.timed_sleep s dev ~seen:w ~still_ms:still ~bound_ms:(still + 5000) in
          Atomic.set sleeping false;
          if during then Atomic.incr overlaps;
          if ms > float_of_int (still + sleep_slack_ms) then
            K.flag s "sleep ~seen:%d ~still_ms:%d, called while another thread submitted and committed work, returned after %.0f ms"
              w still ms;
          match outcome with K.Faulted _ | K.Other _ -> () | K.Returned -> sleeps ()
        end
      in
      (* A sleep that outlived its bound abandons the case from here,
         leaving the submitter to the process's end. *)
      sleeps ();
      Thread.join submitter;
      (match Atomic.get failed with
      | Some (i, e) -> raise (Skip (spf "setup: submission %d of %d: %s" i rounds e))
      | None -> ());
      if Atomic.get overlaps = 0 then
        raise (Skip (spf "no sleep overlapped a submit or commit in %d submissions" rounds));
      ignore (K.wait_value s dev dev.last ~ms:3000))

(* ================================================================ STOP *)

(* STOP-2: stop returns at once with work hanging. *)
let stop2_no_wait (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-2" ~seed (fun s ->
      let hang = K.need_item "hang" P.kit.hang in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "hang" hang in
      ignore (K.launch dev h "hang");
      dev.hung <- true;
      Thread.delay (0.02 +. (0.01 *. float_of_int (K.int s 5)));
      dev.lost <- Some "hang bound";
      match K.stop s dev ~bound_ms:6000 with
      | K.Stop_returned t | K.Stop_raised (_, t) ->
          if t > 2.0 then K.flag s "with work hanging, stop took %.0f ms to return" (t *. 1000.))

(* STOP-3: with no work running, stop writes the last value before it
   returns. *)
let stop3_uncommitted (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let done_v = K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill" in
      let v =
        match K.submit ~commit:false dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] with
        | Ok v -> v
        | Error e -> raise (Skip (spf "setup: an uncommitted Fill: %s" e))
      in
      ignore (K.stop s dev ~bound_ms:6000);
      let w = P.D.signaled dev.d in
      (* A word below the value it showed before stop was dropped: STOP-5's. *)
      if w <> v && w >= done_v then
        K.flag s "right after stop returned, with no work running, the word reads %d, not the last value %d given to submit" w v)

(* STOP-3: with work running, the last value arrives once it ends. *)
let stop3_running (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-3" ~seed (fun s ->
      let spin = K.need_item "spin" P.kit.spin in
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let done_v = K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "a Fill" in
      let h = K.kit_entry s dev "spin" spin in
      let ms = 150 + K.int s 150 in
      let v =
        match K.submit dev [ Launch { entry = h; args = [ Int64.of_int ms ] } ] with
        | Ok v -> v
        | Error e -> raise (Skip (spf "setup: a spin launch: %s" e))
      in
      ignore (K.stop s dev ~bound_ms:6000);
      let w = K.poll_word dev ~ms:(ms + 3000) (fun w -> w = v || w < done_v) in
      if w <> v && w >= done_v then
        K.flag s "%d ms after stop (work spinning %d ms), the word reads %d, not the last value %d given to submit"
          (ms + 3000) ms w v)

(* STOP-4: work encoded but not committed does not run at stop. *)
let stop4_drop_encoded (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-4" ~seed (fun s ->
      let n = word * (1 + K.int s 512) in
      let a, witness =
        match K.openers () with
        | [] -> raise (Skip "the package has no opener")
        | o :: rest -> (
            let a = K.open_dev s o in
            if a.facts.maps_host then (a, K.host_witness s a n)
            else
              match rest with
              | [] -> raise (Skip "needs a device that declares maps_host or a second device")
              | o2 :: _ -> (
                  let b = K.open_dev s o2 in
                  match K.peer_witness s a b n with
                  | Some w -> (a, w)
                  | None -> raise (Skip "no region of one device that another device's mapping reaches")))
      in
      let b0 = K.byte s in
      witness.wwrite ~off:0 (String.make n (Char.chr b0));
      let b1 = K.other_byte s b0 in
      ignore (K.run_or_skip s a [ K.fill_part witness.wreg ~off:0 ~len:n ~byte:b1 ] "a committed Fill");
      let expect = String.make n (Char.chr b1) in
      if witness.wread ~off:0 ~len:n <> expect then raise (Skip "setup: the witness does not show the device's work");
      let b2 = K.other_byte s b1 in
      (match K.submit ~commit:false a [ K.fill_part witness.wreg ~off:0 ~len:n ~byte:b2 ] with
      | Ok _ -> ()
      | Error e -> raise (Skip (spf "setup: an uncommitted Fill: %s" e)));
      ignore (K.stop s a ~bound_ms:6000);
      ignore (K.settled a ~ms:1000);
      Thread.delay 0.05;
      let got = witness.wread ~off:0 ~len:n in
      if got <> expect then
        let i = ref 0 in
        while got.[!i] = expect.[!i] do incr i done;
        K.flag s "after stop, byte %d of a region reads %02x, not %02x: a Fill with %02x that was submitted but never committed ran"
          !i (Char.code got.[!i]) b1 b2)

(* STOP-5: stop keeps the word (signaled still reads the last value) and
   releases nothing rig made (a region still holds its bytes). *)
let stop5_keeps (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-5" ~seed (fun s ->
      let n = word * (1 + K.int s 512) in
      let a, b =
        match K.openers () with
        | [] -> raise (Skip "the package has no opener")
        | [ o ] -> (K.open_dev s o, None)
        | o1 :: o2 :: _ ->
            let a = K.open_dev s o1 in
            (a, Some (K.open_dev s o2))
      in
      let r =
        match K.alloc_host s a n with
        | Some r -> r
        | None -> ( match K.alloc s a Device n with Some r -> r | None -> raise (Skip "setup: no memory"))
      in
      let p = K.pattern s n in
      let have_bytes = K.write r ~off:0 p in
      let off = word * K.int s (n / word) in
      let len = 1 + K.int s (n - off) in
      let bt = K.byte s in
      let v = K.run_or_skip s a [ K.fill_part r ~off ~len ~byte:bt ] "a Fill" in
      let expect = String.sub p 0 off ^ String.make len (Char.chr bt) ^ String.sub p (off + len) (n - off - len) in
      (* The mapping is made once the bytes are in, so that the check holds
         whatever map_peer does. *)
      let mapping =
        match b with
        | Some b when have_bytes -> (
            match K.map_peer s b r with
            | mp when K.read mp ~off:0 ~len:n = Some expect -> Some mp
            | _ -> None
            | exception _ -> None)
        | _ -> None
      in
      if P.D.signaled a.d <> v then raise (Skip "setup: the word does not read the completed value");
      ignore (K.stop s a ~bound_ms:6000);
      let bad = ref None in
      let deadline = now () +. 0.3 +. (0.01 *. float_of_int (K.int s 20)) in
      while now () < deadline && !bad = None do
        let w = P.D.signaled a.d in
        if w <> v then bad := Some w else Thread.delay 0.01
      done;
      (match !bad with
      | Some w -> K.flag s "after stop, signaled reads %d, not the last value %d the word showed before stop" w v
      | None -> ());
      match mapping with
      | None -> ()
      | Some mp ->
          if K.read mp ~off:0 ~len:n <> Some expect then
            K.flag s "after %s's stop, its region read through %s's mapping no longer holds its bytes" a.oname mp.dev.oname)

(* STOP-6: once the word shows the last value and stop returned, the word
   stays. *)
let stop6_no_late_write (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-6" ~seed (fun s ->
      let spin = K.need_item "spin" P.kit.spin in
      let dev = K.open_first s in
      let n = word * (1 + K.int s 256) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let h = K.kit_entry s dev "spin" spin in
      let ms = 300 + K.int s 100 in
      (match K.submit dev [ Launch { entry = h; args = [ Int64.of_int ms ] } ] with
      | Ok _ -> ()
      | Error e -> raise (Skip (spf "setup: a spin launch: %s" e)));
      let v =
        match K.submit dev [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] with
        | Ok v -> v
        | Error e -> raise (Skip (spf "setup: a Fill behind the spin: %s" e))
      in
      ignore (K.stop s dev ~bound_ms:6000);
      if K.poll_word dev ~ms:(ms + 3000) (fun w -> w = v) = v then begin
        let t0 = now () in
        let bad = ref None in
        while now () -. t0 < 0.6 && !bad = None do
          let w = P.D.signaled dev.d in
          if w <> v then bad := Some (w, now () -. t0) else Thread.delay 0.01
        done;
        match !bad with
        | Some (w, t) ->
            K.flag s "the word showed the last value %d after stop returned, then %.0f ms later read %d" v (t *. 1000.) w
        | None -> ()
      end)

(* STOP-8: free and unload after stop touch nothing of a new device of the
   same hardware. *)
let stop8_old_frees (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"STOP-8" ~seed (fun s ->
      let o = match K.openers () with o :: _ -> o | [] -> raise (Skip "the package has no opener") in
      let a = K.open_dev s o in
      let count = 2 + K.int s 4 in
      let regions = List.init count (fun _ -> K.alloc s a Device (4096 * (1 + K.int s 16))) in
      let some = List.find_map Fun.id regions in
      (match some with
      | Some r -> ignore (K.run_or_skip s a [ K.fill_part r ~off:0 ~len:r.size ~byte:(K.byte s) ] "a Fill")
      | None -> ());
      ignore (K.binary_image s a);
      K.close s a;
      if not (K.settled a ~ms:3000) then raise (Skip "setup: the first device's word did not reach its last value");
      let b = K.open_dev s o in
      let n = word * (1 + K.int s 256) in
      let rb = K.alloc s b Device n in
      let p = K.pattern s n in
      let have_bytes = match rb with Some rb -> K.write rb ~off:0 p | None -> false in
      let before = K.free_bytes s b in
      K.release_dev s a;
      let after = K.free_bytes s b in
      if after <> before then
        K.flag s "free and unload on the stopped %s changed the new device's free Device memory from %d to %d bytes" o.name
          before after;
      match rb with
      | Some rb when have_bytes ->
          if K.read rb ~off:0 ~len:n <> Some p then
            K.flag s "free and unload on the stopped %s changed the bytes of a region of the new device" o.name
      | _ -> ())

(* ================================================================ list *)

let cases =
  [
    case "probe.MEM-2.distinct-regions" "MEM-2" mem2_distinct;
    case "probe.MEM-4.peer-after-stop" "MEM-4" mem4_peer_stable;
    case "probe.MEM-5.map-peer-live" "MEM-5" mem5_map_peer_live;
    case "probe.MEM-7.whole-pages" "MEM-7" mem7_whole_pages;
    case "probe.MEM-8.dma-errors" "MEM-8" mem8_dma_errors;
    case "probe.CODE-1.image" "CODE-1" code1_image;
    case "probe.CODE-2.entry-once" "CODE-2" code2_entry;
    case "probe.CODE-3.no-memory" "CODE-3" code3_no_memory;
    case "probe.CODE-5.too-big" "CODE-5" code5_too_big;
    case "probe.CODE-6.prepare-silent" "CODE-6" code6_prepare;
    case "probe.CODE-7.prepare-idle" "CODE-7" code7_prepare_idle;
    case "probe.TIME-3.early-return" "TIME-3" time3_early_return;
    case "probe.TIME-4.bounded-sleep" "TIME-4" time4_bounded_sleep;
    case "probe.TIME-5.fault-sticks" "TIME-5" time5_fault_sticks;
    case "probe.TIME-6.sleep-during-submit" "TIME-6" time6_sleep_during_submit;
    case "probe.STOP-2.no-wait" "STOP-2" stop2_no_wait;
    case "probe.STOP-3.uncommitted" "STOP-3" stop3_uncommitted;
    case "probe.STOP-3.running" "STOP-3" stop3_running;
    case "probe.STOP-4.drop-encoded" "STOP-4" stop4_drop_encoded;
    case "probe.STOP-5.keeps-word" "STOP-5" stop5_keeps;
    case "probe.STOP-6.no-late-write" "STOP-6" stop6_no_late_write;
    case "probe.STOP-8.old-frees" "STOP-8" stop8_old_frees;
  ]
