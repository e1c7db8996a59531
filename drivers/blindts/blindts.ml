(* blindts: drivers about TIME-6, STOP-2, STOP-4 and CODE-2, written from
   the document (spec/rig_edge_driver.txt), its clause catalog and
   spec/decisions.md.  Every driver is hostmem (its C device, hm_*, and a
   copy of its OCaml side) with a queue layer of its own in front
   (blindts_stubs.c), and differs from hostmem in one place only.

   driver                      | what it does                                            | clause     | the sentence it breaks / that allows it
   ----------------------------+---------------------------------------------------------+------------+-----------------------------------------
   ts-sleep-holds-submit-lock  | sleep waits (hostmem's wait) inside the layer's submit  | TIME-6     | "rig may call sleep while the driver's submit or commit runs." A
                               | lock; submit takes that lock (commit does not), so a    |            | submit made on another thread while a sleep waits blocks until the
                               | submit made during a sleep waits for the sleep to end   |            | sleep's still_ms ends; rig sleeping again in a loop starves it
                               | (one direction only: sleep never waits for submit)      |            | (the work the sleep waits for can never be submitted).
   ts-commit-waits-sleepers    | commit, "so that no sleeper misses the doorbell", waits | TIME-6     | same sentence: commit waits for every sleep in flight to return,
                               | until no sleep is inside its wait (a condition, no      |            | so sleep and commit cannot overlap; the sleep itself is exactly
                               | lock held across it); sleep never waits for commit     |            | hostmem's and meets TIME-3/4/5.
   ts-stop-grace-drain         | stop lets the device drain (polls "busy") for a grace   | STOP-2     | "stop d ~fault stops the lost d and must not wait for its work."
                               | of up to 3 s, whatever fault is, then cancels           |            | A bounded wait is still a wait for the work (a spin: its length;
                               |                                                         |            | a hang: 3 s).
   ts-stop-inband-fence        | stop waits for the word to reach the value of the last  | STOP-2     | same sentence.  Skips the wait only when the device faulted (a
                               | committed submission (an in-band "fence" behind the     |            | faulted device runs nothing), so a device lost for rig's hang
                               | work) before it cancels                                 |            | bound is never stopped: stop never returns.
   ts-stop-writeback-on-close  | stop with fault = None writes back on the host the      | STOP-4     | "The driver must drop the work d encoded that runs only once
                               | Fills and Copies every thread encoded and did not       |            | committed, such as an open command buffer."  That work's effect
                               | commit ("don't lose the program's staged writes"),      |            | lands (in the region's bytes) although it was never committed.
                               | then cancels; a lost device (Some) drops them           |            |
   ts-stop-flush-own-cmdbuf    | stop ends the calling thread's open command buffer the  | STOP-4     | same sentence, for the stopping thread's buffer only (other
                               | way commit would (runs its Fills/Copies on the host     |            | threads' buffers are dropped), whatever fault is.
                               | copy path) before it cancels                            |            |
   ts-entry-nocache-big        | entry caches only functions whose scratch is under 256  | CODE-2     | "A second call for f must make nothing new."  For scratch >= 256
                               | bytes; a bigger one is "transient" and made anew at     |            | bytes each call makes new scratch and a new handle (all freed at
                               | each call (all freed at unload)                         |            | unload).
   ts-entry-scratch-at-submit  | entry checks the budget and answers Entry, but the      | CODE-2     | "It must make what a launch of f needs, such as ... f's scratch
                               | scratch is made by submit at f's first launch (and the  |            | memory, so that the driver's submit allocates nothing to launch
                               | submit fails when the budget is gone by then)           |            | f."  (No_memory is still answered, having made nothing, when the
                               |                                                         |            | budget lacks the bytes at entry: CODE-3 holds.)
   ts-ok-poll-sleep            | sleep polls the word with a 1 ms timer of its own       | conforming | TIME-4: "It may return earlier, on ... a timer of the driver's
                               | (each step a wait), no condition variable               |            | own"; each step ends by still_ms.
   ts-ok-stop-ack              | stop cancels first, then waits at most 50 ms for the    | conforming | STOP-2 forbids waiting for the work, not for the cancel's
                               | word to show the last value (the cancel's ack)          |            | acknowledgement: the work is cancelled before the wait, and the
                               |                                                         |            | wait is bounded whatever the work.
   ts-ok-shared-cv             | sleep and commit share the layer's mutex: sleep waits   | conforming | TIME-6: the lock is given back while the sleep blocks
                               | on a condvar under it (given back while it blocks) in   |            | (pthread_cond_timedwait), so submit/commit overlap sleep; commit
                               | steps of at most 5 ms; commit takes it and signals      |            | wakes it early ("It may return earlier").
   ts-ok-eager-prepare         | prepare makes the entry at once (synchronously,         | conforming | CODE-6: "Doing nothing is a valid prepare"; prepare "may start
                               | swallowing Invalid_argument and No_memory); entry is    |            | making what entry i f makes"; the next entry answers as if it
                               | hostmem's cache                                         |            | made the entry itself; a second call makes nothing new (CODE-2).

   Ambiguities met, and how I decided each:
   - TIME-6 "rig may call sleep while the driver's submit or commit runs":
     read as "sleep and submit/commit may be in flight at once on different
     threads, in either start order; neither may wait for the other beyond
     a short critical section".  A driver whose sleep blocks a submit or a
     commit that starts during it breaks it, although its sleep alone meets
     TIME-3/4/5 and its submit/commit alone are hostmem's.  A lock shared
     by both is allowed when it is given back across the blocking step
     (ts-ok-shared-cv).
   - STOP-2 "must not wait for its work": any wait whose end depends on the
     work finishing is a wait for it, bounded (ts-stop-grace-drain) or not,
     whatever fault is.  A short bounded wait after the cancel, for the
     cancel's effect, is not (ts-ok-stop-ack).
   - STOP-4: "drop" is read as: the encoded, uncommitted work's effects must
     never land, neither on the device nor by the driver doing them itself
     on the host in stop.  Which thread stops does not matter: a stop that
     flushes only its own thread's buffer still breaks it.
   - CODE-2 and "entries made lazily": making an entry at the first entry
     call (not at image) is allowed (it is what hostmem does); making f's
     scratch at the first launch (in submit) is not: the sentence names
     scratch memory and submit.  ts-entry-scratch-at-submit still answers
     No_memory at entry when the budget lacks the bytes then, so that only
     CODE-2 is at stake.
   - CODE-2 "make nothing new": a new handle or new scratch for the same f
     of the same image is something new, even if the old one is kept and
     freed at unload.
   - A prepare that makes the entry synchronously is a prepare that "starts"
     and finishes at once; allowed (ts-ok-eager-prepare).
   - Where a lock of the layer's (a pthread mutex) is held across a call
     that enters and leaves a blocking section, it is counted with
     rig_hold/rig_give (LOCK-3), although no OCaml code runs under it. *)

open Rig_edge
module Prim = Rig_edge_primitives

(* ------------------------------------------------------------ the C side *)

type cdev
type tsdev

external c_open : int -> cdev = "hm_open"
external c_alloc : cdev -> bool -> int -> int = "hm_alloc"
external c_map : cdev -> nativeint -> int -> int = "hm_map"
external c_map_peer : cdev -> cdev -> int -> int = "hm_map_peer"
external c_free : cdev -> int -> bool = "hm_free"

external c_access : cdev -> int -> int -> bytes -> int -> int -> bool -> bool
  = "hm_access_byte" "hm_access"

external c_entry : cdev -> int -> int -> int = "hm_entry"
external c_grow : cdev -> int = "hm_grow"
external c_signaled : cdev -> int = "hm_signaled" [@@noalloc]
external c_wait : cdev -> int -> int -> unit = "hm_wait"
external c_fault : cdev -> string option = "hm_fault"
external c_stop : cdev -> bool -> unit = "hm_stop"
external c_busy : cdev -> bool = "hm_busy"

external ts_open : cdev -> int -> tsdev = "ts_open"
external ts_ptr : tsdev -> nativeint = "ts_ptr"
external ts_fns : unit -> nativeint = "ts_fns"
external ts_last_submitted : tsdev -> int = "ts_last_submitted"
external ts_last_committed : tsdev -> int = "ts_last_committed"
external ts_sleep_sublock : tsdev -> cdev -> int -> int -> unit = "ts_sleep_sublock"
external ts_sleep_registered : tsdev -> cdev -> int -> int -> unit = "ts_sleep_registered"
external ts_sleep_cv : tsdev -> int -> int -> unit = "ts_sleep_cv"
external ts_defer : tsdev -> int -> int -> bool = "ts_defer"
external ts_undefer : tsdev -> int -> int = "ts_undefer"
external ts_write_back : tsdev -> cdev -> bool -> unit = "ts_write_back"

(* mode bits of blindts_stubs.c *)
let m_sublock = 1
let m_wait_sleepers = 2
let m_shadow = 4
let m_defer = 8
let m_shared_cv = 16

(* ---------------------------------------------------------- constants *)

let capacity = Hostmem.capacity
let page = 4096
let round_up x k = (x + k - 1) / k * k

(* ------------------------------------------------------------- images *)

type kind = Nop | Spin | Fault_fn | Hang | Refuse

let kind_code = function Nop -> 0 | Spin -> 1 | Fault_fn -> 2 | Hang -> 3 | Refuse -> 4

let kind_of_string = function
  | "nop" -> Some Nop
  | "spin" -> Some Spin
  | "fault" -> Some Fault_fn
  | "hang" -> Some Hang
  | "refuse" -> Some Refuse
  | _ -> None

let header = "hostmem-image 1"

let parse b =
  match String.split_on_char '\n' b with
  | h :: lines when String.trim h = header ->
      let rec go acc = function
        | [] -> Ok (List.rev acc)
        | l :: rest -> (
            match List.filter (( <> ) "") (String.split_on_char ' ' (String.trim l)) with
            | [] -> go acc rest
            | [ name; k; n ] -> (
                match (kind_of_string k, int_of_string_opt n) with
                | None, _ -> Error (Printf.sprintf "blindts: function %S has unknown kind %S" name k)
                | _, None -> Error (Printf.sprintf "blindts: function %S has a bad scratch size %S" name n)
                | _, Some n when n < 0 -> Error (Printf.sprintf "blindts: function %S has a negative scratch size" name)
                | _ when List.mem_assoc name acc -> Error (Printf.sprintf "blindts: function %S appears twice" name)
                | Some k, Some n -> go ((name, (k, n)) :: acc) rest)
            | _ -> Error (Printf.sprintf "blindts: bad image line %S" l))
      in
      go [] lines
  | _ -> Error (Printf.sprintf "blindts: not a hostmem image (no %S header)" header)

(* ------------------------------------------------------------ variants *)

type sleep_kind = Sleep_hostmem | Sleep_sublock | Sleep_registered | Sleep_poll | Sleep_cv
type stop_kind = Stop_hostmem | Stop_grace_drain | Stop_inband_fence | Stop_writeback_none | Stop_flush_own | Stop_ack
type entry_kind = Entry_hostmem | Entry_nocache_big | Entry_at_submit
type prepare_kind = Prepare_nothing | Prepare_eager

type variant = {
  vname : string;
  mode : int;
  sleep_k : sleep_kind;
  stop_k : stop_kind;
  entry_k : entry_kind;
  prepare_k : prepare_kind;
}

let base name =
  { vname = name; mode = 0; sleep_k = Sleep_hostmem; stop_k = Stop_hostmem; entry_k = Entry_hostmem; prepare_k = Prepare_nothing }

let now () = Unix.gettimeofday ()

(* A wait's step that blocks for ms milliseconds, without the runtime. *)
let pause ms = Prim.wait (fun () -> Thread.delay (float_of_int ms /. 1000.))

module Make (V : sig
  val v : variant
end) =
struct
  let v = V.v

  module D = struct
    type t = {
      c : cdev;
      ts : tsdev;
      id : int;
      name : string;
      queue : queue;
      mutable word : region option;
    }

    and region = { owner : t; h : int; size : int; kind : rkind }
    and rkind = Mem | Mapping | Word

    type image = {
      dev : t;
      fns : (string * (kind * int)) list;
      lock : Prim.Lock.t;
      entries : (string, int) Hashtbl.t;
      mutable extra : int list;  (* entries made outside the table (ts-entry-nocache-big) *)
    }

    exception Fault of string

    let key = v.vname

    let facts d =
      { may_block = true; host_addresses = true; maps_host = true; own_word = d.word; queue = d.queue }

    let access r = function
      | Read { off; into } ->
          let len = Bytes.length into in
          if off < 0 || off + len > r.size then invalid_arg "blindts: read out of the region";
          if not (c_access r.owner.c r.h off into 0 len false) then raise (Fault "blindts: read of a freed region")
      | Write { off; from } ->
          let len = String.length from in
          if off < 0 || off + len > r.size then invalid_arg "blindts: write out of the region";
          if not (c_access r.owner.c r.h off (Bytes.unsafe_of_string from) 0 len true) then
            raise (Fault "blindts: write of a freed region")

    let locate _ r =
      { handle = Int64.of_int r.h; size = r.size; reach = (match r.kind with Word -> None | _ -> Some (access r)) }

    let peer _ _ = true

    let alloc d m n =
      if n <= 0 then invalid_arg "blindts: alloc of a non-positive size";
      let h = c_alloc d.c (m = Device) n in
      if h = 0 then None else Some { owner = d; h; size = n; kind = Mem }

    let free _ r =
      match r.kind with
      | Word -> ()
      | Mem | Mapping -> if not (c_free r.owner.c r.h) then invalid_arg "blindts: free of a region that is not live"

    let map_peer d _ r =
      let h = c_map_peer d.c r.owner.c r.h in
      if h = 0 then raise (Fault "blindts: map_peer of a region that is not live");
      { owner = d; h; size = r.size; kind = Mapping }

    let map d p n =
      let h = c_map d.c p n in
      if h = 0 then raise (Fault "blindts: no host memory for the mapping");
      { owner = d; h; size = n; kind = Mapping }

    let map_host d p n = map d p (round_up n page)

    let dma _ _ ~fn =
      Error (Printf.sprintf "blindts: the host has no bus: no PCI function reaches its memory (fn %S)" fn)

    let image d b =
      match parse b with
      | Error e -> Error e
      | Ok fns -> Ok { dev = d; fns; lock = Prim.Lock.create (v.vname ^ ".image"); entries = Hashtbl.create 8; extra = [] }

    let fits f n =
      if n > capacity then
        invalid_arg (Printf.sprintf "blindts: %s needs %d bytes of scratch, the device has %d in all" f n capacity)

    (* What one entry makes, by variant; the slot of f is 0 in the table
       while it is made (hostmem's way, for asynchronous exceptions). *)
    let make_entry i f k n =
      let code = kind_code k and bytes = round_up n word in
      match v.entry_k with
      | Entry_hostmem | Entry_nocache_big ->
          Hashtbl.replace i.entries f 0;
          let h = c_entry i.dev.c code bytes in
          Hashtbl.replace i.entries f h;
          if h = 0 then begin
            Hashtbl.remove i.entries f;
            No_memory (max n word)
          end
          else Entry (Int64.of_int h)
      | Entry_at_submit ->
          (* the budget is checked, not taken: the scratch is made at the
             first launch, by submit *)
          let probe = if bytes = 0 then -1 else c_alloc i.dev.c true bytes in
          if probe = 0 then No_memory (max n word)
          else begin
            if probe > 0 then ignore (c_free i.dev.c probe);
            Hashtbl.replace i.entries f 0;
            let h = c_entry i.dev.c code 0 in
            Hashtbl.replace i.entries f h;
            if h = 0 then begin
              Hashtbl.remove i.entries f;
              No_memory (max n word)
            end
            else begin
              ignore (ts_defer i.dev.ts h bytes);
              Entry (Int64.of_int h)
            end
          end

    let entry i f =
      Prim.Lock.protect i.lock (fun () ->
          match List.assoc_opt f i.fns with
          | None -> Absent
          | Some (k, n) when v.entry_k = Entry_nocache_big && n >= 256 -> (
              fits f n;
              (* "transient": made for this call, kept until unload *)
              let h = c_entry i.dev.c (kind_code k) (round_up n word) in
              if h = 0 then No_memory (max n word)
              else begin
                i.extra <- h :: i.extra;
                Entry (Int64.of_int h)
              end)
          | Some (k, n) -> (
              match Hashtbl.find_opt i.entries f with
              | Some h when h <> 0 -> Entry (Int64.of_int h)
              | _ ->
                  fits f n;
                  make_entry i f k n))

    let prepare i f =
      match v.prepare_k with
      | Prepare_nothing -> ()
      | Prepare_eager -> (
          (* made now; whatever it answers is for the next entry to tell *)
          try ignore (entry i f) with Invalid_argument _ -> ())

    let unload i =
      Prim.Lock.protect i.lock (fun () ->
          Hashtbl.iter
            (fun _ h ->
              if h <> 0 then begin
                if v.entry_k = Entry_at_submit then begin
                  let s = ts_undefer i.dev.ts h in
                  if s <> 0 then ignore (c_free i.dev.c s)
                end;
                ignore (c_free i.dev.c h)
              end)
            i.entries;
          Hashtbl.reset i.entries;
          List.iter (fun h -> ignore (c_free i.dev.c h)) i.extra;
          i.extra <- [])

    let grow d = match c_grow d.c with 0 -> Grown | n -> Short n
    let signaled d = c_signaled d.c
    let check_fault d = match c_fault d.c with Some why -> raise (Fault why) | None -> ()

    let sleep d ~seen ~still_ms =
      check_fault d;
      if c_signaled d.c = seen && still_ms > 0 then begin
        (match v.sleep_k with
        | Sleep_hostmem -> Prim.wait (fun () -> c_wait d.c seen still_ms)
        | Sleep_sublock -> Prim.wait (fun () -> ts_sleep_sublock d.ts d.c seen still_ms)
        | Sleep_registered -> Prim.wait (fun () -> ts_sleep_registered d.ts d.c seen still_ms)
        | Sleep_poll ->
            let until = now () +. (float_of_int still_ms /. 1000.) in
            let rec go () =
              let left = int_of_float ((until -. now ()) *. 1000.) in
              if left > 0 && c_signaled d.c = seen && c_fault d.c = None then begin
                pause (min 1 left);
                go ()
              end
            in
            go ()
        | Sleep_cv ->
            let until = now () +. (float_of_int still_ms /. 1000.) in
            let rec go () =
              let left = int_of_float ((until -. now ()) *. 1000.) in
              if left > 0 && c_signaled d.c = seen && c_fault d.c = None then begin
                Prim.wait (fun () -> ts_sleep_cv d.ts seen (min 5 left));
                go ()
              end
            in
            go ());
        check_fault d
      end

    let stop d ~fault =
      match v.stop_k with
      | Stop_hostmem -> c_stop d.c true
      | Stop_grace_drain ->
          let until = now () +. 3.0 in
          while c_busy d.c && now () < until do
            pause 2
          done;
          c_stop d.c true
      | Stop_inband_fence ->
          while c_fault d.c = None && c_signaled d.c < ts_last_committed d.ts do
            pause 2
          done;
          c_stop d.c true
      | Stop_writeback_none ->
          if fault = None then ts_write_back d.ts d.c true;
          c_stop d.c true
      | Stop_flush_own ->
          ts_write_back d.ts d.c false;
          c_stop d.c true
      | Stop_ack ->
          c_stop d.c true;
          let until = now () +. 0.05 in
          while c_signaled d.c < ts_last_submitted d.ts && now () < until do
            pause 1
          done
  end

  let name = v.vname
  let next_id = Atomic.make 0

  let make name () =
    Prim.check_unheld (v.vname ^ ".make");
    Prim.masked (fun () ->
        let c = c_open capacity in
        let ts = ts_open c v.mode in
        let queue = c_queue ~fns:(ts_fns ()) ~dev:(ts_ptr ts) ~may_block:true in
        let d = { D.c; ts; id = Atomic.fetch_and_add next_id 1; name; queue; word = None } in
        d.word <- Some { D.owner = d; h = 0; size = 8; kind = D.Word };
        d)

  let openers () =
    Prim.check_unheld (v.vname ^ ".openers");
    Prim.masked (fun () -> List.map (fun n -> { name = n; make = make n }) [ v.vname ^ "0"; v.vname ^ "1" ])

  let kit = Hostmem.kit
end

let variants =
  [
    { (base "ts-sleep-holds-submit-lock") with mode = m_sublock; sleep_k = Sleep_sublock };
    { (base "ts-commit-waits-sleepers") with mode = m_wait_sleepers; sleep_k = Sleep_registered };
    { (base "ts-stop-grace-drain") with stop_k = Stop_grace_drain };
    { (base "ts-stop-inband-fence") with stop_k = Stop_inband_fence };
    { (base "ts-stop-writeback-on-close") with mode = m_shadow; stop_k = Stop_writeback_none };
    { (base "ts-stop-flush-own-cmdbuf") with mode = m_shadow; stop_k = Stop_flush_own };
    { (base "ts-entry-nocache-big") with entry_k = Entry_nocache_big };
    { (base "ts-entry-scratch-at-submit") with mode = m_defer; entry_k = Entry_at_submit };
    { (base "ts-ok-poll-sleep") with sleep_k = Sleep_poll };
    { (base "ts-ok-stop-ack") with stop_k = Stop_ack };
    { (base "ts-ok-shared-cv") with mode = m_shared_cv; sleep_k = Sleep_cv };
    { (base "ts-ok-eager-prepare") with prepare_k = Prepare_eager };
  ]

(* The clause each driver breaks ("conforming" for none). *)
let clause_of = function
  | "ts-sleep-holds-submit-lock" | "ts-commit-waits-sleepers" -> "TIME-6"
  | "ts-stop-grace-drain" | "ts-stop-inband-fence" -> "STOP-2"
  | "ts-stop-writeback-on-close" | "ts-stop-flush-own-cmdbuf" -> "STOP-4"
  | "ts-entry-nocache-big" | "ts-entry-scratch-at-submit" -> "CODE-2"
  | _ -> "conforming"

let packages : (module Rig_edge.Package) list =
  List.map
    (fun vr ->
      (module Make (struct
        let v = vr
      end) : Rig_edge.Package))
    variants
