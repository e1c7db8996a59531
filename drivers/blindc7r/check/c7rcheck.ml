(* c7rcheck [DRIVER...]: the author's own check, outside any certifier, that
   each broken c7r-* driver's bug is real and the conforming ones do not
   have it.  Every driver call goes through Prim.masked, as rig makes it.

   Device memory is measured by what alloc of Device memory can still get
   (a binary search).  The image: work, work2 (nop, 64 KiB of scratch each)
   and fault.  f = work, g = work2.

   S0 clean: prepare g; settle; a0; prepare f; settle: p0 = charge; entry f:
      e0 = charge; entry f again: same handle, nothing new; prepare f again
      (after the entry): nothing new; a launch of the entry runs; unload:
      everything back.  (p0, e0: what the driver does on a fresh image.)
   S1 two prepares of f on two threads at once, then entry: one scratch
      charged (5 runs).
   S2 exception at the k-th allocation (Gc.Memprof callback, on the calling
      thread, anywhere: driver code, or the edge's, Prim.Lock/spawn/wait) of
      prepare f, k = 1, 2, ... until prepare returns; each time on a fresh
      device with g prepared first:
        M  charge right after the raise = 0
        M' charge after the driver's threads had time (settle: 0.2 s, then
           until alloc's answer is stable over 0.15 s) = 0
        P  a clean prepare f then charges p0 (as on a fresh image)
        E  entry f answers within 3 s, charge then e0, its launch runs
        U  (another fresh device) unload right after the raise, settle:
           everything back
   S3 the same with the exception raised by a SIGUSR2 handler at the n-th
      wait of prepare (Prim.signal_at_wait n).
   S4 the device faulted first (launch of fault; sleep raises Fault), then
      prepare f: if it raises Fault, the charge must be 0.
   S5 Device memory short (less than a scratch left): S2 and S3's
      injections, then M, M' and: entry answers No_memory within 3 s having
      made nothing.

   A line per driver and scenario, BUG where a check fails, then a summary
   against the expected clause of each driver (Blindc7r.expected). *)

open Rig_edge
module Prim = Rig_edge_primitives

exception Injected

let n = 64 lsl 10
let bin = "hostmem-image 1\nwork nop 65536\nwork2 nop 65536\nfault fault 0\n"
let f = "work"
let g = "work2"
let settle () = Thread.delay 0.2
let debug = Sys.getenv_opt "C7R_DEBUG" <> None
let () = Sys.set_signal Sys.sigusr2 (Sys.Signal_handle (fun _ -> raise Injected))
let m f = Prim.masked f
let sc b = float_of_int b /. float_of_int n

(* Inside a memprof callback: whose code allocates, the driver's ("drv") or
   the edge's ("edge"): the first frame out from the allocation that is of
   Blindc7r or of Rig_edge_primitives. *)
let classify () =
  let starts p s = String.length s >= String.length p && String.sub s 0 (String.length p) = p in
  match Printexc.backtrace_slots (Printexc.get_callstack 80) with
  | None -> "?"
  | Some sl ->
      let names = Array.to_list (Array.map (fun s -> Option.value (Printexc.Slot.name s) ~default:"") sl) in
      let rec go = function
        | [] -> "?"
        | x :: r -> if starts "Blindc7r" x then "drv" else if starts "Rig_edge_primitives" x then "edge" else go r
      in
      go names

module Run (P : Package) = struct
  open P

  let fresh () =
    let d = m (fun () -> (List.hd (openers ())).make ()) in
    let i = match m (fun () -> D.image d bin) with Ok i -> i | Error e -> failwith e in
    (d, i)

  let avail d =
    let ok k =
      k = 0
      ||
      match m (fun () -> D.alloc d Device k) with
      | None -> false
      | Some r ->
          m (fun () -> D.free d r);
          true
    in
    let lo = ref 0 and hi = ref (Blindc7r.capacity / word) in
    while !lo < !hi do
      let mid = (!lo + !hi + 1) / 2 in
      if ok (mid * word) then lo := mid else hi := mid - 1
    done;
    !lo * word

  (* Give the driver's threads time: at least 0.2 s, then until what alloc
     can get stays the same over 0.15 s (at most 3 s more). *)
  let settle_on d =
    settle ();
    let rec go prev k =
      Thread.delay 0.15;
      let a = avail d in
      if a <> prev && k > 0 then go a (k - 1)
    in
    go (avail d) 20

  let prepare i x = m (fun () -> D.prepare i x)
  let prepare_quiet i x = match prepare i x with () -> () | exception _ -> ()
  let unload i = m (fun () -> D.unload i)
  let stop d = m (fun () -> D.stop d ~fault:None)

  (* entry on a thread of its own; None if it has not answered in 3 s. *)
  let entry_timeout i x =
    let r = ref None in
    ignore (Thread.create (fun () -> r := Some (match m (fun () -> D.entry i x) with a -> Ok a | exception e -> Error e)) ());
    let k = ref 0 in
    while Option.is_none !r && !k < 600 do
      Thread.delay 0.005;
      incr k
    done;
    !r

  (* Launch entry h with timeline value v: `Done, `Fault why or `Timeout. *)
  let launch d v h =
    let q = (D.facts d).queue in
    let s = encode [ Launch { entry = h; args = [] } ] in
    let rooms = ref [] in
    let rec room k =
      match q.room s with
      | Room -> rooms := "Room" :: !rooms
      | Grow ->
          rooms := "Grow" :: !rooms;
          ignore (m (fun () -> D.grow d));
          if k > 0 then room (k - 1)
    in
    room 4;
    (* hostmem's submit never looks at the entry handle: a refused submit
       says nothing of prepare or entry (the launch's run does).  Reported
       as the check's, with the thread's lock count. *)
    if not (q.submit s ~value:v) then
      `Refused (Printf.sprintf "room %s, lock count %d" (String.concat "," (List.rev !rooms)) (Prim.holds ()))
    else if not (q.commit ()) then `Refused "commit failed"
    else
      let rec loop k =
        if D.signaled d = v then `Done
        else if k = 0 then `Timeout
        else
          match m (fun () -> D.sleep d ~seen:(D.signaled d) ~still_ms:100) with
          | () -> loop (k - 1)
          | exception D.Fault why -> `Fault why
      in
      loop 30

  let line what ok detail =
    Printf.printf "%-24s %-30s %s%s\n%!" name what (if ok then "ok " else "BUG") (if detail = "" then "" else "  " ^ detail);
    ok

  (* ------------------------------------------------------------ S0 *)
  let s0 () =
    let d, i = fresh () in
    let base = avail d in
    prepare i g;
    settle_on d;
    let a0 = avail d in
    prepare i f;
    settle_on d;
    let p0 = a0 - avail d in
    let fails = ref [] in
    let note s = fails := s :: !fails in
    (match entry_timeout i f with
    | Some (Ok (Entry h)) ->
        let e0 = a0 - avail d in
        (match m (fun () -> D.entry i f) with
        | Entry h' when h' = h && a0 - avail d = e0 -> ()
        | _ -> note "second entry made something new");
        prepare i f;
        settle_on d;
        if a0 - avail d <> e0 then note "prepare after entry started something";
        (match launch d 1 h with
        | `Done -> ()
        | `Fault w -> note ("launch faulted: " ^ w)
        | `Timeout -> note "launch hung"
        | `Refused w -> Printf.printf "%-24s CHECK: submit refused (%s)\n%!" name w);
        unload i;
        settle_on d;
        if avail d <> base then note (Printf.sprintf "after unload %.2f scratches kept" (sc (base - avail d)));
        stop d;
        ignore
          (line "S0 clean" (!fails = [])
             (Printf.sprintf "prepare charges %.2f, entry %.2f%s" (sc p0) (sc e0)
                (String.concat "" (List.map (fun s -> "; " ^ s) !fails))));
        Some (p0, e0)
    | _ ->
        ignore (line "S0 clean" false "entry did not answer an Entry");
        None)

  (* ------------------------------------------------------------ S1 *)
  let s1 () =
    let bad = ref 0 in
    for _ = 1 to 5 do
      let d, i = fresh () in
      let a0 = avail d in
      let t = Thread.create (fun () -> prepare i f) () in
      prepare i f;
      Thread.join t;
      settle_on d;
      (match entry_timeout i f with Some (Ok (Entry _)) when a0 - avail d = n -> () | _ -> incr bad);
      unload i;
      stop d
    done;
    line "S1 two prepares at once" (!bad = 0) (Printf.sprintf "%d/5 runs wrong" !bad)

  (* ---------------------------------------------- the injections *)

  (* Exception at the k-th allocation of the calling thread inside prepare:
     `Raised where | `Returned | `Other e. *)
  let inject_alloc k i x =
    let me = Thread.id (Thread.self ()) in
    let count = ref 0 and armed = ref false and where = ref "?" in
    let hit _ =
      if !armed && Thread.id (Thread.self ()) = me then begin
        incr count;
        if !count = k then begin
          armed := false;
          where := classify ();
          if debug then Printexc.print_raw_backtrace stderr (Printexc.get_callstack 12);
          raise Injected
        end
      end;
      None
    in
    let tracker = { Gc.Memprof.null_tracker with alloc_minor = hit; alloc_major = hit } in
    m (fun () ->
        let prof = Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:0 tracker in
        armed := true;
        let r = match D.prepare i x with () -> `Returned | exception Injected -> `Raised !where | exception e -> `Other e in
        armed := false;
        Gc.Memprof.stop ();
        Gc.Memprof.discard prof;
        r)

  let inject_wait k i x =
    m (fun () ->
        Prim.signal_at_wait k;
        let r = match D.prepare i x with () -> `Returned | exception Injected -> `Raised "wait" | exception e -> `Other e in
        Prim.signal_at_wait 0;
        r)

  (* The S2/S3 loop.  [full]: S5 (memory short). *)
  let sweep label inject ~full (p0, e0) =
    let raised = ref [] and failures = ref [] and others = ref [] and edge_notes = ref [] and inconclusive = ref [] in
    let only = Option.map int_of_string (Sys.getenv_opt "C7R_K") in
    let k = ref 1 and go_on = ref true in
    while !go_on && !k <= 80 do
      (match only with Some j when j < !k -> go_on := false | _ -> ());
      if !go_on && (match only with Some j -> j = !k | None -> true) then begin
      let d, i = fresh () in
      let filler = ref None in
      if not full then begin
        prepare i g;
        settle_on d
      end;
      let base = avail d in
      if full then filler := m (fun () -> D.alloc d Device (base - (n / 2)));
      let a0 = avail d in
      let r = inject !k i f in
      let held = Prim.holds () in
      if held <> 0 then begin
        (* The edge's own state, not the driver's: an exception inside
           Prim's code left the thread's lock count up.  Noted, and put
           back so that the rest of the run is not skewed by it. *)
        edge_notes := Printf.sprintf "k=%d: lock count left at %d" !k held :: !edge_notes;
        for _ = 1 to held do
          Prim.give ()
        done
      end;
      (match r with
      | `Returned -> go_on := false
      | `Other e -> others := Printf.sprintf "k=%d %s" !k (Printexc.to_string e) :: !others
      | `Raised where ->
          raised := (!k, where) :: !raised;
          let fails = ref [] in
          let note s = fails := s :: !fails in
          let ch () = sc (a0 - avail d) in
          if avail d <> a0 then note (Printf.sprintf "M:%+.2f" (ch ()));
          settle_on d;
          if avail d <> a0 then note (Printf.sprintf "M':%+.2f" (ch ()));
          if full then begin
            match entry_timeout i f with
            | None -> note "E:entry waits for good"
            | Some (Ok (No_memory _)) when avail d = a0 -> ()
            | Some (Ok (No_memory _)) -> note "E:No_memory made something"
            | Some (Ok _) -> note "E:not No_memory"
            | Some (Error e) -> note ("E:entry raised " ^ Printexc.to_string e)
          end
          else begin
            prepare_quiet i f;
            settle_on d;
            if a0 - avail d <> p0 then note (Printf.sprintf "P:next prepare charges %.2f not %.2f" (ch ()) (sc p0));
            match entry_timeout i f with
            | None -> note "E:entry waits for good"
            | Some (Error e) -> note ("E:entry raised " ^ Printexc.to_string e)
            | Some (Ok (Entry h)) -> (
                if a0 - avail d <> e0 then note (Printf.sprintf "E:charge %.2f not %.2f" (ch ()) (sc e0));
                match launch d 1 h with
                | `Done -> ()
                | `Fault w -> note ("E:launch faulted (" ^ w ^ ")")
                | `Timeout -> note "E:launch hung"
                | `Refused w -> inconclusive := Printf.sprintf "k=%d: submit refused (%s)" !k w :: !inconclusive)
            | Some (Ok _) -> note "E:not an Entry"
          end;
          if !fails <> [] then failures := (!k, where, List.rev !fails) :: !failures);
      (match !filler with Some r -> m (fun () -> D.free d r) | None -> ());
      unload i;
      stop d;
      (* U: unload right after the raise. *)
      (if (not full) && !go_on then
         let d, i = fresh () in
         let base = avail d in
         prepare i g;
         settle_on d;
         let r = inject !k i f in
         for _ = 1 to Prim.holds () do
           Prim.give ()
         done;
         match r with
         | `Raised where ->
             unload i;
             settle_on d;
             if avail d <> base then
               failures :=
                 (!k, where, [ Printf.sprintf "U:%.2f kept after unload" (sc (base - avail d)) ]) :: !failures;
             stop d
         | _ ->
             unload i;
             stop d)
      end;
      incr k
    done;
    let count w = List.length (List.filter (fun (_, x) -> x = w) !raised) in
    let fails = List.rev !failures in
    let detail =
      Printf.sprintf "raised %d times (drv %d, edge %d, wait %d), changed something at %d%s%s" (List.length !raised)
        (count "drv") (count "edge") (count "wait")
        (List.length (List.sort_uniq compare (List.map (fun (k, _, _) -> k) fails)))
        ((if !others = [] then "" else "; other exceptions: " ^ String.concat ", " !others)
        ^
        (if !edge_notes = [] then ""
         else "\n" ^ Printf.sprintf "%-24s   EDGE (not the driver): " "" ^ String.concat "; " (List.rev !edge_notes))
        ^
        if !inconclusive = [] then ""
        else "\n" ^ Printf.sprintf "%-24s   CHECK (inconclusive): " "" ^ String.concat "; " (List.rev !inconclusive))
        (String.concat ""
           (List.map
              (fun (k, w, l) -> Printf.sprintf "\n%-24s   k=%d(%s): %s" "" k w (String.concat " " l))
              (List.filteri (fun j _ -> j < 6) fails)))
    in
    line label (fails = [] && !others = []) detail

  (* ------------------------------------------------------------ S4 *)
  let s4 () =
    let d, i = fresh () in
    let ok =
      match m (fun () -> D.entry i "fault") with
      | Entry h -> (
          match launch d 1 h with
          | `Fault _ -> (
              let a0 = avail d in
              match prepare i f with
              | () ->
                  settle_on d;
                  line "S4 prepare on a faulted dev" true "returned"
              | exception D.Fault _ ->
                  let a1 = avail d in
                  settle_on d;
                  let a2 = avail d in
                  line "S4 prepare on a faulted dev" (a1 = a0 && a2 = a0)
                    (Printf.sprintf "raised Fault; charge after it %.2f, later %.2f" (sc (a0 - a1)) (sc (a0 - a2)))
              | exception e -> line "S4 prepare on a faulted dev" false ("raised " ^ Printexc.to_string e))
          | _ -> line "S4 prepare on a faulted dev" false "the device did not fault")
      | _ -> line "S4 prepare on a faulted dev" false "no entry for fault"
    in
    unload i;
    stop d;
    ok

  let all () =
    match s0 () with
    | None -> [ false ]
    | Some pe ->
        let r1 = s1 () in
        let r2 = sweep "S2 exception at k-th alloc" inject_alloc ~full:false pe in
        let r3 = sweep "S3 signal at n-th wait" inject_wait ~full:false pe in
        let r4 = s4 () in
        let r5a = sweep "S5 memory short, alloc" inject_alloc ~full:true pe in
        let r5b = sweep "S5 memory short, wait" inject_wait ~full:true pe in
        [ r1; r2; r3; r4; r5a; r5b ]
end

let () =
  let names = List.tl (Array.to_list Sys.argv) in
  let chosen =
    if names = [] then Blindc7r.drivers else List.filter (fun (x, _) -> List.mem x names) Blindc7r.drivers
  in
  let results =
    List.map
      (fun (name, (module P : Package)) ->
        let module R = Run (P) in
        let rs = R.all () in
        (name, List.for_all Fun.id rs))
      chosen
  in
  print_endline "\nSUMMARY (expected: CODE-7 = some BUG above; conforming = none)";
  List.iter
    (fun (name, clean) ->
      let exp = List.assoc name Blindc7r.expected in
      let seen = if clean then "conforming" else "CODE-7" in
      Printf.printf "%-24s expected %-10s observed %-10s %s\n" name exp seen (if exp = seen then "MATCH" else "MISMATCH"))
    results
