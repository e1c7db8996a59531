(* lkcheck: one line per lk-* driver: what the check saw, and whether that
   is the bug the table of blindlk.ml names (BUG SHOWN) or the conforming
   behaviour (OK).  Each driver runs in a child process of its own. *)

open Rig_edge
module Prim = Rig_edge_primitives

let sprintf = Printf.sprintf

module Str_find = struct
  let has s sub =
    let n = String.length s and m = String.length sub in
    let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
    go 0
end

(* ------------------------------------------------------------ threads *)

let my_tid () =
  let l = Unix.readlink "/proc/thread-self" in
  int_of_string (List.nth (String.split_on_char '/' l) 2)

(* The blocked-signal mask of a task of this process, from /proc. *)
let sigblk tid =
  let ic = open_in (sprintf "/proc/self/task/%d/status" tid) in
  let r = ref 0L in
  (try
     while true do
       let l = input_line ic in
       if String.length l > 7 && String.sub l 0 7 = "SigBlk:" then
         r := Int64.of_string ("0x" ^ String.trim (String.sub l 7 (String.length l - 7)))
     done
   with End_of_file -> ());
  close_in ic;
  !r

(* rig_mask blocks SIGUSR1 (10) among others *)
let blocks_usr1 m = Int64.logand m (Int64.shift_left 1L 9) <> 0L

let tasks () =
  Sys.readdir "/proc/self/task" |> Array.to_list |> List.map int_of_string |> List.sort compare

(* ------------------------------------------------------------ memprof *)

(* [observing f cb]: runs f with every allocation of the calling thread
   sampled; cb runs at each (an exception it raises comes out of the
   allocation, as an asynchronous one does). *)
let observing f cb =
  let self = Thread.id (Thread.self ()) in
  let active = ref false in
  let on _ =
    if !active && Thread.id (Thread.self ()) = self then cb ();
    None
  in
  let tracker = { Gc.Memprof.null_tracker with alloc_minor = on; alloc_major = on } in
  ignore (Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:0 tracker);
  match
    active := true;
    f ()
  with
  | r ->
      active := false;
      Gc.Memprof.stop ();
      r
  | exception e ->
      active := false;
      Gc.Memprof.stop ();
      raise e

(* ------------------------------------------------------------ helpers *)

let open_nth (type t) (module M : Blindlk.S with type D.t = t) k : t =
  let o = List.nth (M.openers ()) k in
  o.make ()

let rig f = Prim.masked f  (* a call as rig makes it: signals blocked *)

let time_ms f =
  let t0 = Unix.gettimeofday () in
  let r = f () in
  (r, int_of_float ((Unix.gettimeofday () -. t0) *. 1000.))

let own_inversions name =
  List.filter
    (fun (a, b) ->
      let p s = String.length s >= String.length name && String.sub s 0 (String.length name) = name in
      p a || p b)
    (Prim.Lock.order_inversions ())

let pp_pairs l = String.concat ", " (List.map (fun (a, b) -> a ^ "/" ^ b) l)

(* ------------------------------------------------------------- checks *)

(* LOCK-5, LOCK-6: counted locks and waits taken by locate, peer, signaled *)
let lockfree (module M : Blindlk.S) =
  let d = open_nth (module M) 0 and d' = open_nth (module M) 1 in
  Thread.delay 0.3 (* link probes done *);
  let r = Option.get (rig (fun () -> M.D.alloc d Device 64)) in
  let act f =
    let a = Prim.activity () in
    ignore (f ());
    Prim.activity () - a
  in
  let s = act (fun () -> M.D.signaled d) in
  let l = act (fun () -> M.D.locate d r) in
  let p = act (fun () -> M.D.peer d d') in
  (s, l, p)

(* SIG-8: the threads of the process that leave rig's signals unblocked *)
let unblocked_threads main =
  List.filter (fun t -> t <> main && not (blocks_usr1 (sigblk t))) (tasks ())

(* A fault: launch the kit's fault function, sleep until Fault *)
let fault_device (type t) (module M : Blindlk.S with type D.t = t) (d : t) =
  let i = match rig (fun () -> M.D.image d M.kit.binary) with Ok i -> i | Error e -> failwith e in
  let e = match rig (fun () -> M.D.entry i (Option.get M.kit.fault)) with Entry e -> e | _ -> failwith "no entry" in
  let q = (M.D.facts d).queue in
  let s = encode [ Launch { entry = e; args = [] } ] in
  rig (fun () ->
      (match q.room s with Room -> () | Grow -> failwith "room: grow");
      if not (q.submit s ~value:1) then failwith "submit failed";
      if not (q.commit ()) then failwith "commit failed");
  let rec go n =
    if n = 0 then failwith "no fault"
    else
      match rig (fun () -> M.D.sleep d ~seen:0 ~still_ms:200) with
      | () -> go (n - 1)
      | exception M.D.Fault _ -> ()
  in
  go 10

(* SIG-2: the signal mask of a thread blocked in sleep, sampled from
   outside: a wait's blocking step runs with the caller's mask (here: none
   blocked); a blocked step run under rig's mask shows SIGUSR1 blocked. *)
let sleep_samples (module M : Blindlk.S) =
  let d = open_nth (module M) 0 in
  let tid = Atomic.make 0 and took = Atomic.make 0 in
  let t =
    Thread.create
      (fun () ->
        Atomic.set tid (my_tid ());
        let seen = M.D.signaled d in
        let (), ms = time_ms (fun () -> rig (fun () -> M.D.sleep d ~seen ~still_ms:400)) in
        Atomic.set took ms)
      ()
  in
  while Atomic.get tid = 0 do Thread.yield () done;
  let blocked = ref 0 and n = ref 0 in
  for k = 1 to 12 do
    Thread.delay (if k = 1 then 0.012 else 0.03);
    if Atomic.get took = 0 then begin
      incr n;
      if blocks_usr1 (sigblk (Atomic.get tid)) then incr blocked
    end
  done;
  Thread.join t;
  (!blocked, !n, Atomic.get took)

(* SIG-2: allocations of OCaml code inside a sleep made with signals
   unblocked (outside any blocking step: OCaml code that allocates is not
   blocked) — on a faulted device, where sleep's checks allocate the
   fault's report. *)
let sleep_unblocked_allocs (module M : Blindlk.S) =
  let d = open_nth (module M) 0 in
  fault_device (module M) d;
  let bad = ref 0 and all = ref 0 in
  rig (fun () ->
      observing
        (fun () -> try M.D.sleep d ~seen:0 ~still_ms:100 with M.D.Fault _ -> ())
        (fun () ->
          incr all;
          if not (Prim.blocks_rig_set ()) then incr bad));
  (!bad, !all)

(* SIG-6, SIG-9: a make (or openers) called as another caller calls it,
   from a thread whose signals are unblocked and whose mask the primitives
   set before *)
let mask_trace f =
  let out = ref None in
  let t =
    Thread.create
      (fun () ->
        Prim.masked ignore;
        let tr = ref [] in
        observing
          (fun () -> ignore (f ()))
          (fun () -> tr := (Prim.blocks_rig_set (), Prim.mask_as_left (), Prim.holds ()) :: !tr);
        if Sys.getenv_opt "LKDEBUG" <> None then
          List.iter (fun (b, a, h) -> Printf.eprintf "[%b %b %d]" b a h) (List.rev !tr);
        out := Some (List.rev !tr))
      ()
  in
  Thread.join t;
  Option.get !out

(* allocations with signals unblocked after the first blocked one and before the last *)
let unblocked_inside tr =
  let arr = Array.of_list tr in
  let n = Array.length arr in
  let first = ref n and last = ref (-1) in
  Array.iteri
    (fun k (b, _, _) ->
      if b then begin
        if k < !first then first := k;
        last := k
      end)
    arr;
  let c = ref 0 in
  for k = !first to !last do
    let b, _, _ = arr.(k) in
    if not b then incr c
  done;
  (!c, n)

(* ASYNC-2: an asynchronous exception at the n-th allocation of a call and
   at every allocation after it, until the call is over; what the thread
   still holds after the call ended is a lock given back never. *)
let inject f =
  let leak = ref None in
  let n = ref 1 in
  while !leak = None && !n <= 80 do
    let k = !n in
    let held = ref 0 in
    let t =
      Thread.create
        (fun () ->
          let prep = f () in
          let count = ref 0 in
          let what = (try observing prep (fun () -> incr count; if !count >= k then raise Exit); "returned" with e -> Printexc.to_string e) in
          held := Prim.holds ();
          if Sys.getenv_opt "LKDEBUG" <> None then Printf.eprintf "[k=%d %s allocs=%d held=%d]\n%!" k what !count !held)
        ()
    in
    Thread.join t;
    if !held <> 0 then leak := Some (k, !held);
    incr n
  done;
  !leak

(* -------------------------------------------------------- per driver *)

let line name clause verdict detail = Printf.printf "%-24s %-10s %-10s %s\n%!" name clause verdict detail

let bug b = if b then "BUG SHOWN" else "NOT SHOWN"
let ok b = if b then "OK" else "NOT OK"

let entry_unload_pair (type t) (module M : Blindlk.S with type D.t = t) (d : t) =
  let i = match rig (fun () -> M.D.image d M.kit.binary) with Ok i -> i | Error e -> failwith e in
  ignore (rig (fun () -> M.D.entry i "nop"));
  rig (fun () -> M.D.unload i)

let async_entry (type t) (module M : Blindlk.S with type D.t = t) (d : t) () =
  let i = match rig (fun () -> M.D.image d M.kit.binary) with Ok i -> i | Error e -> failwith e in
  fun () -> ignore (rig (fun () -> M.D.entry i "nop"))

let async_unload (type t) (module M : Blindlk.S with type D.t = t) (d : t) () =
  let i = match rig (fun () -> M.D.image d M.kit.binary) with Ok i -> i | Error e -> failwith e in
  ignore (rig (fun () -> M.D.entry i "nop"));
  fun () -> rig (fun () -> M.D.unload i)

let pp_leak = function None -> "none" | Some (k, h) -> sprintf "from allocation %d on: %d lock(s) still held" k h

let one name =
  let _, var, clause, (module M : Blindlk.S) = List.find (fun (n, _, _, _) -> n = name) Blindlk.packages in
  let main = my_tid () in
  let line = line name clause in
  match (var : Blindlk.variant) with
  | Signaled_locks ->
      let s, l, p = lockfree (module M) in
      line (bug (s > 0)) (sprintf "counted locks/waits taken: signaled %d, locate %d, peer %d" s l p)
  | Locate_faulted ->
      let d = open_nth (module M) 0 in
      let r = Option.get (rig (fun () -> M.D.alloc d Device 64)) in
      let before = match M.D.locate d r with _ -> "answers" | exception M.D.Fault _ -> "Fault" in
      fault_device (module M) d;
      let after = match M.D.locate d r with _ -> "answers" | exception M.D.Fault w -> "raises Fault " ^ w in
      line (bug (after <> "answers")) (sprintf "locate before the fault %s; after it %s" before after)
  | Peer_waits_link ->
      let d = open_nth (module M) 0 and d' = open_nth (module M) 1 in
      let p, ms = time_ms (fun () -> M.D.peer d d') in
      line (bug (ms >= 50)) (sprintf "peer right after the opens blocked %d ms (answer %b)" ms p)
  | Entry_unload_order | Alloc_grow_order ->
      let d = open_nth (module M) 0 in
      entry_unload_pair (module M) d;
      ignore (rig (fun () -> M.D.alloc d Device 64));
      ignore (rig (fun () -> M.D.grow d));
      let inv = own_inversions name in
      line (bug (inv <> [])) (sprintf "lock pairs taken in both orders: [%s]" (pp_pairs inv))
  | Locate_cache ->
      let d = open_nth (module M) 0 in
      let al () = Option.get (rig (fun () -> M.D.alloc d Device 64)) in
      let r1 = al () and r2 = al () and r3 = al () in
      let h1 = (M.D.locate d r1).handle and h2 = (M.D.locate d r2).handle in
      ignore (M.D.locate d r3);
      let fired = ref false in
      let p1 =
        observing
          (fun () -> M.D.locate d r1)
          (fun () ->
            if not !fired then begin
              fired := true;
              ignore (M.D.locate d r2)
            end)
      in
      let p2 = M.D.locate d r2 in
      line
        (bug (p2.handle <> h2))
        (sprintf "locate r2 from a callback inside locate r1: then r1 -> %Lx (want %Lx), r2 -> %Lx (want %Lx)" p1.handle
           h1 p2.handle h2)
  | Sleep_retry_masked ->
      let b, n, ms = sleep_samples (module M) in
      line (bug (b > 0)) (sprintf "sleep 400 ms on an idle device (%d ms): %d of %d samples found the waiting thread with rig's signals blocked" ms b n)
  | Sleep_wide_wait ->
      let bad, all = sleep_unblocked_allocs (module M) in
      line (bug (bad > 0)) (sprintf "sleep on a faulted device: %d of %d allocations of its OCaml code ran with signals unblocked" bad all)
  | Make_half_masked ->
      let o = List.hd (M.openers ()) in
      let c, n = unblocked_inside (mask_trace o.make) in
      line (bug (c > 0)) (sprintf "make: %d of %d allocations ran with signals unblocked between its first and last blocked one" c n)
  | Openers_unmasked ->
      let tr = mask_trace M.openers in
      let c = List.length (List.filter (fun (b, _, h) -> (not b) && h > 0) tr) in
      line (bug (c > 0)) (sprintf "openers: %d of %d allocations ran inside its lock with signals unblocked" c (List.length tr))
  | Make_sigmask ->
      let o = List.hd (M.openers ()) in
      let tr = mask_trace o.make in
      let c = List.length (List.filter (fun (_, a, _) -> not a) tr) in
      let unb, _ = unblocked_inside tr in
      line (bug (c > 0))
        (sprintf "make: %d of %d allocations under a mask the primitives did not set (blocked throughout: %b)" c
           (List.length tr) (unb = 0))
  | Fin_unshielded | Ok_shielded | Exit_unshielded -> (
      let shielded f =
        let tr = ref [] in
        observing f (fun () -> tr := (Prim.blocks_rig_set (), true, 0) :: !tr);
        let tr = List.rev !tr in
        let blocked = List.length (List.filter (fun (b, _, _) -> b) tr) in
        let between, n = unblocked_inside tr in
        (blocked, between, n)
      in
      let has s = List.exists (fun l -> Str_find.has l s) (Atomic.get Blindlk.trace_log) in
      (* the finaliser: a device dropped after its stop, then a full major GC *)
      let fin () =
        let d = open_nth (module M) 0 in
        rig (fun () -> M.D.stop d ~fault:None);
        let d = ref (Some d) in
        d := None;
        ignore (Sys.opaque_identity !d);
        let b, u, n = shielded Gc.full_major in
        (has "dropped", b, u, n)
      in
      (* the exit handler: the process's exit handlers, run as a program's exit runs them *)
      let ex () =
        if var = Exit_unshielded then ignore (open_nth (module M) 0);
        let b, u, n = shielded Stdlib.do_at_exit in
        (has "devices opened", b, u, n)
      in
      let pp what (ran, b, u, n) =
        sprintf "%s ran %b: of %d allocations %d with rig's signals blocked, %d unblocked between the first and last blocked one" what ran n b u
      in
      match var with
      | Fin_unshielded ->
          let ((ran, b, u, _) as f) = fin () in
          line (bug (ran && (b = 0 || u > 0))) (pp "finaliser" f)
      | Exit_unshielded ->
          let ((ran, b, u, _) as e) = ex () in
          line (bug (ran && (b = 0 || u > 0))) (pp "exit handler" e)
      | _ ->
          let ((fr, fb, fu, _) as f) = fin () in
          let ((er, eb, eu, _) as e) = ex () in
          line (ok (fr && er && fb > 0 && eb > 0 && fu = 0 && eu = 0)) (pp "finaliser" f ^ "; " ^ pp "exit handler (with a wait)" e))
  | Ticker_clean_mask | Ok_helper -> (
      let d = open_nth (module M) 0 and d' = open_nth (module M) 1 in
      let p, pms = time_ms (fun () -> M.D.peer d d') in
      let rec tid n = match M.ticker_tid d with Some t when t <> 0 -> t | _ when n = 0 -> 0 | _ -> Thread.delay 0.005; tid (n - 1) in
      let t = tid 200 in
      let tb = t <> 0 && blocks_usr1 (sigblk t) in
      let un = unblocked_threads main in
      let detail =
        sprintf "ticker thread %d blocks rig's signals: %b; threads other than main with them unblocked: [%s]; peer %b in %d ms" t tb
          (String.concat "," (List.map string_of_int un)) p pms
      in
      match var with
      | Ticker_clean_mask -> line (bug (not tb)) detail
      | _ ->
          let s, l, pa = lockfree (module M) in
          line (ok (tb && un = [] && pms < 50 && s + l + pa = 0)) detail)
  | Entry_cleanup_first ->
      let d = open_nth (module M) 0 in
      let l = inject (async_entry (module M) d) in
      line (bug (l <> None)) (sprintf "asynchronous exceptions in entry: %s" (pp_leak l))
  | Unload_take_early ->
      let d = open_nth (module M) 0 in
      let l = inject (async_unload (module M) d) in
      line (bug (l <> None)) (sprintf "asynchronous exceptions in unload: %s" (pp_leak l))
  | Ok_extra_lock ->
      let d = open_nth (module M) 0 in
      let ts =
        List.init 2 (fun _ ->
            Thread.create
              (fun () ->
                for _ = 1 to 20 do
                  entry_unload_pair (module M) d;
                  ignore (rig (fun () -> M.D.alloc d Device 64));
                  ignore (rig (fun () -> M.D.grow d))
                done)
              ())
      in
      List.iter Thread.join ts;
      let inv = own_inversions name in
      let le = inject (async_entry (module M) d) and lu = inject (async_unload (module M) d) in
      let s, l, p = lockfree (module M) in
      line
        (ok (inv = [] && le = None && lu = None && s + l + p = 0))
        (sprintf "two threads x20 entry/unload/alloc/grow: inversions [%s]; async in entry: %s, in unload: %s; locks in signaled/locate/peer: %d" (pp_pairs inv)
           (pp_leak le) (pp_leak lu) (s + l + p))
  | Ok_sliced ->
      let b, n, ms = sleep_samples (module M) in
      let bad, all = sleep_unblocked_allocs (module M) in
      line
        (ok (b = 0 && ms >= 390 && ms < 1000 && bad = 0))
        (sprintf "sleep 400 ms in 20-ms slices (%d ms): %d of %d samples blocked in a wait with rig's signals blocked; faulted: %d of %d allocations unblocked" ms b n bad all)

let () =
  match Sys.argv with
  | [| _; "--one"; name |] ->
      ignore (Unix.alarm 30);
      one name;
      exit 0
  | _ ->
      List.iter
        (fun (name, _, clause, _) ->
          let ic = Unix.open_process_args_in Sys.executable_name [| Sys.executable_name; "--one"; name |] in
          let out = In_channel.input_all ic in
          match Unix.close_process_in ic with
          | Unix.WEXITED 0 -> print_string out
          | _ -> line name clause "CRASHED" (String.escaped out))
        Blindlk.packages
