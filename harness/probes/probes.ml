(* What every driver-side probe shares; see probes.mli.

   Layout: generic pieces (watchdog, host pages) first, then [Kit], a
   functor over the package under test with the shared helpers (sessions,
   devices, resources, submissions, waits, memory measurement, cleanup),
   then the case constructor.  The cases are in one module per section:
   mem_probes, code_probes, time_probes, stop_probes, and the others. *)

open Rig_edge
module Prim = Rig_edge_primitives

let now = Unix.gettimeofday
let spf = Printf.sprintf

(* The driver lacks what the case needs: the case is Not_applicable. *)
exception Skip of string

(* A driver call outlived its bound (it is still in flight): the case ends
   with this finding, if any, and makes no further call of the driver. *)
exception Abandon of Case.finding option

(* The opener's make raised: the system refused the driver something (a
   thread, memory) or the driver refuses to open; either way the case's
   clause, which is not about opening, is not judged in this run. *)
exception Not_opened of string

let round_up x k = (x + k - 1) / k * k

let first_difference got want =
  let n = min (String.length got) (String.length want) in
  let i = ref 0 in
  while !i < n && got.[!i] = want.[!i] do incr i done;
  if !i < n then spf "byte %d reads %02x, not %02x" !i (Char.code got.[!i]) (Char.code want.[!i])
  else spf "%d bytes read where %d were written" (String.length got) (String.length want)

let has_room ~room ~grow ~grows =
  let rec ask k = match room () with Rig_edge.Room -> true | Grow -> k > 0 && grow () = Rig_edge.Grown && ask (k - 1) in
  ask grows

let sched_ms ?tid () =
  let path = match tid with Some t -> spf "/proc/self/task/%d/schedstat" t | None -> "/proc/thread-self/schedstat" in
  match In_channel.with_open_text path In_channel.input_line with
  | Some l -> (
      try Scanf.sscanf l "%Ld %Ld" (fun r q -> Some (Int64.to_float r /. 1e6, Int64.to_float q /. 1e6))
      with Scanf.Scan_failure _ | Failure _ | End_of_file -> None)
  | None -> None
  | exception Sys_error _ -> None

let queued_ms () = match sched_ms () with Some (_, q) -> q | None -> 0.

(* Of a sleep's wait for a CPU, what is taken off its time: a loaded
   machine's late wake-up, not a sleep that spins or yields far past its
   bound (half its time queued on a busy machine). *)
let cpu_wait_credit_ms = 250.
let less_cpu_wait ~ms ~cpu_wait_ms = ms -. Float.max 0. (Float.min cpu_wait_credit_ms (Float.min ms cpu_wait_ms))

let word_reaches ~signaled ~last ~ms =
  let reached () = match signaled () with w -> w >= last | exception _ -> false in
  let rec await k = reached () || (k > 0 && (Thread.delay 0.002; await (k - 1))) in
  await (ms / 2)

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

  let flag s fmt = Printf.ksprintf (fun detail -> s.acc := { Case.clause = s.clause; detail; timing = true } :: !(s.acc)) fmt
  let flag_value s fmt = Printf.ksprintf (fun detail -> s.acc := { Case.clause = s.clause; detail; timing = false } :: !(s.acc)) fmt
  (* an overstayed call: a timing *)
  let abandon s fmt = Printf.ksprintf (fun detail -> raise (Abandon (Some { Case.clause = s.clause; detail; timing = true }))) fmt
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
    let d =
      try m o.make
      with e -> raise (Not_opened (spf "opening %s raised %s" o.name (Printexc.to_string e)))
    in
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

  let unload_img (i : img) = release i.ires

  let entry (i : img) f = call i.idev (fun () -> D.entry i.image f)

  let entry_as_rig_asks (i : img) f =
    let rec ask left = match entry i f with No_memory _ when left > 1 -> ask (left - 1) | answer -> answer in
    ask 4

  let place (r : reg) = D.locate r.dev.d r.region
  let handle r = (place r).handle

  (* Bytes of r beyond its place's size are no access this probe may judge:
     a region smaller than asked is MEM-2's (probe.MEM-2.distinct-regions
     compares the two), and the reach's refusal would blame the probe's
     own clause. *)
  let within (r : reg) (p : Rig_edge.place) ~off ~len =
    if off + len > p.size then
      raise (Skip (spf "setup: a region asked for %d bytes answers place.size %d, short of byte %d (MEM-2's)" r.size p.size (off + len - 1)))

  let read (r : reg) ~off ~len =
    let p = place r in
    match p.reach with
    | None -> None
    | Some f ->
        within r p ~off ~len;
        let into = Bytes.create len in
        call r.dev (fun () -> f (Read { off; into }));
        Some (Bytes.to_string into)

  let write (r : reg) ~off from =
    let p = place r in
    match p.reach with
    | None -> false
    | Some f ->
        within r p ~off ~len:(String.length from);
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

  (* What [dev.lost] says after a submit that failed (stop then gets None). *)
  let failed_submit = "failed submit"

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
          dev.lost <- Some failed_submit;
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
  let sleep ?took ?(on_call = ignore) s dev ~seen ~still_ms ~bound_ms =
    let call () =
      on_call ();
      let q0 = queued_ms () and t0 = now () in
      Fun.protect
        ~finally:(fun () ->
          Option.iter (fun r -> r := less_cpu_wait ~ms:((now () -. t0) *. 1000.) ~cpu_wait_ms:(queued_ms () -. q0)) took)
        (fun () -> m (fun () -> D.sleep dev.d ~seen ~still_ms))
    in
    match watch ~ms:bound_ms call with
    | Done () -> Returned
    | Raised (D.Fault why) ->
        if dev.lost = None then dev.lost <- Some why;
        Faulted why
    | Raised e -> Other e
    | Late -> abandon s "%s: sleep ~seen:%d ~still_ms:%d did not return within %d ms" dev.oname seen still_ms bound_ms

  let timed_sleep ?(less_cpu_wait = false) s dev ~seen ~still_ms ~bound_ms =
    let took = ref 0. and t0 = now () in
    let outcome = sleep ~took s dev ~seen ~still_ms ~bound_ms in
    (outcome, if less_cpu_wait then !took else (now () -. t0) *. 1000.)

  type waited = Reached | Timed_out of int | Fault_seen of string

  (* [wait_value s dev v ~ms] sleeps until the word reads at least [v]. *)
  let wait_value s dev v ~ms =
    let deadline = now () +. (float_of_int ms /. 1000.) in
    let rec loop () =
      let w = D.signaled dev.d in
      if w >= v then Reached
      else if now () > deadline then Timed_out w
      else
        match sleep s dev ~seen:w ~still_ms:20 ~bound_ms:9000 with
        | Returned | Other _ -> loop ()
        | Faulted why -> Fault_seen why
    in
    loop ()

  let describe_wait = function
    | Reached -> "reached"
    | Timed_out w -> spf "did not arrive within the bound (the word reads %d)" w
    | Fault_seen why -> spf "the device faulted: %s" why

  (* Setup work: submit, commit and wait, or skip the case. *)
  let submit_or_skip ?commit dev parts what =
    match submit ?commit dev parts with Ok v -> v | Error e -> raise (Skip (spf "setup: %s: %s" what e))

  let run_or_skip s dev parts what =
    let v = submit_or_skip dev parts what in
    match wait_value s dev v ~ms:3000 with
    | Reached -> v
    | w -> raise (Skip (spf "setup: %s: value %d %s" what v (describe_wait w)))

  (* Half a millisecond between reads of the word: a value a driver shows
     only briefly (the last value, then a late write over it) is seen. *)
  let poll_interval = 0.0005

  (* [poll_word dev ~ms until] reads signaled every [poll_interval] until
     [until w] holds or [ms] pass; the last word read. *)
  let poll_word dev ~ms until =
    let deadline = now () +. (float_of_int ms /. 1000.) in
    let rec loop () =
      let w = D.signaled dev.d in
      if until w || now () > deadline then w
      else (
        Thread.delay poll_interval;
        loop ())
    in
    loop ()

  (* --- stopping and cleanup *)

  type stopped = Stop_returned of float | Stop_raised of exn * float

  (* [stop s dev ~bound_ms]: stop under the watchdog, with no call of [dev]
     in flight; the seconds it took. *)
  let stop ?(before = ignore) ?(on_return = ignore) s dev ~bound_ms =
    let t0 = now () in
    (* STOP-1: Some why only for a Fault or the hang bound; a failed
       submit loses the device with None *)
    let fault = if dev.lost = Some failed_submit then None else dev.lost in
    match watch ~ms:bound_ms (fun () -> before (); m (fun () -> D.stop dev.d ~fault); on_return ()) with
    | Done () ->
        dev.stopped <- true;
        Stop_returned (now () -. t0)
    | Raised e ->
        dev.stopped <- true;
        Stop_raised (e, now () -. t0)
    | Late -> abandon s "%s: stop did not return within %d ms" dev.oname bound_ms

  let word_at_stop s dev ~bound_ms =
    let at_return = ref None in
    ignore (stop s dev ~bound_ms ~on_return:(fun () -> at_return := Some (D.signaled dev.d)));
    match !at_return with Some w -> w | None -> D.signaled dev.d

  (* Close as rig does: let the work end (unless it hangs or the device is
     lost), then stop. *)
  let close s dev =
    if not dev.stopped then begin
      if dev.lost = None && not dev.hung then ignore (wait_value s dev dev.last ~ms:3000);
      if dev.hung && dev.lost = None then dev.lost <- Some "hang bound";
      ignore (stop s dev ~bound_ms:9000)
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

  (* [leave s dev]: [dev]'s word never read the last value after stop, so
     rig frees nothing of it: neither does the session's end (its memory
     and the host pages it may reach are kept). *)
  let leave s dev =
    dev.word_freed <- true;
    List.iter (fun r -> if r.owner = dev.id then r.live <- false) s.undo;
    leaked_hosts := s.hosts @ !leaked_hosts

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
      | exception (D.Fault why | Fun.Finally_raised (D.Fault why)) ->
          (* A Fault that escapes the body came from a call the case does
             not judge (its checks catch what they are about): the run is
             not judged, and says why. *)
          `Skip (spf "not judged: the driver raised Fault (%s) in a call this case's clause is not about" why)
      | exception Not_opened why ->
          Case.report_unjudged [ (s.clause, why) ];
          `Ran
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

  let rec free_bytes_when s dev ~deadline until =
    let free = free_bytes s dev in
    if until free || now () > deadline then free else (Thread.delay 0.01; free_bytes_when s dev ~deadline until)

  let taken_by s dev ~shows start =
    let before = free_bytes s dev in
    start ();
    let deadline = now () +. 1. in
    let rec shown () =
      if before - free_bytes s dev >= shows then true
      else if now () > deadline then false
      else (Thread.delay 0.03; shown ())
    in
    if shown () then begin
      Thread.delay 0.3;
      Some (before - free_bytes s dev)
    end
    else None

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

  (* A device of the package, and a witness region of it: host memory where
     it declares maps_host, else a region a second device's mapping reaches. *)
  let witness_device s n =
    match openers () with
    | [] -> raise (Skip "the package has no opener")
    | o :: rest -> (
        let a = open_dev s o in
        if a.facts.maps_host then (a, host_witness s a n)
        else
          match rest with
          | [] -> raise (Skip "needs a device that declares maps_host or a second device")
          | o2 :: _ -> (
              let b = open_dev s o2 in
              match peer_witness s a b n with
              | Some w -> (a, w)
              | None -> raise (Skip "no region of one device that another device's mapping reaches")))
end

(* The case constructor: one clause per case. *)
let case name clause run = { Case.name; clauses = [ clause ]; run }
