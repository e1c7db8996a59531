(* ldcheck [blindld.cmxs]: for every ld-* driver, a child process of its own
   loads the plugin (Dynlink, so that the driver's load-time code runs
   after the child's own exit sentinel is registered), then does what rig
   would with the driver's devices, every call inside Prim.masked:
     openers, make of both devices; on each an alloc of Device and Mapped
     memory and a free of the first; on hostmem0 a launch of kit.spin
     (400 ms) left running, the device left open (kept to the exit); on
     hostmem1 a stop and the free of its other region; then drops
     everything but hostmem0.
   It observes:
     fin   - Gc.full_major twice, with signals open, Gc.Memprof sampling
             every allocation of the main thread: how many allocations
             (finalisers') run with rig_mask's signals not all blocked
             (Prim.blocks_rig_set; an allocation whose callstack holds
             Prim.shield's or Prim.masked's frame counts as blocked, since
             memprof reports an allocation made in C later, which may be
             after the mask was given back), and, with Prim.signal_at_wait 1 armed,
             whether SIGUSR2's OCaml handler ran inside a wait
             (Prim.in_wait) or only after it;
     between - from the load on, Memprof also samples the check's own code
             (which makes every driver call inside Prim.masked): an
             unblocked allocation with a frame of Blindld on its callstack
             is a finaliser that ran there (a Gc.full_major before
             hostmem1's stop, signal_at_wait armed, collects what is
             garbage by then);
     exit  - the same for the exit handlers: an exit handler registered
             last (it runs first) arms Memprof and signal_at_wait, the
             sentinel registered before the plugin loaded (it runs after the
             plugin's) disarms them;
     threads - every thread that was not there before the load, from
             /proc/self/task/*/status SigBlk after the load, after the
             calls, after fin and at exit (looked at again every 2 ms for
             up to 50 ms, the drivers' tick, while none was seen open): one
             whose mask does not hold every signal rig_mask blocks is open.
   LDCHECK_VERBOSE=1 keeps the children's stderr (the drivers' reports);
   LDCHECK_DEBUG=1 prints each unblocked allocation's callstack and each
   thread snapshot; a second argument runs only the driver it names.
   One line per driver: its name, what its table says (BROKEN clause or
   CONFORMING), what the child observed, and ok or MISMATCH. *)

module P = Rig_edge_primitives

let plugin =
  if Array.length Sys.argv > 1 then Sys.argv.(1)
  else Filename.concat (Filename.dirname (Filename.dirname Sys.executable_name)) "blindld.cmxs"

(* The table of ../blindld.ml. *)
let expected =
  [
    ("ld-exit-leak-report", Some "SIG-7");
    ("ld-exit-drain-wait-outside", Some "SIG-7");
    ("ld-region-fin-unshielded", Some "SIG-7");
    ("ld-registry-fin-at-load", Some "SIG-7");
    ("ld-load-thread-unmask", Some "SIG-8");
    ("ld-alloc-timer-thread", Some "SIG-8");
    ("ld-exit-drain-shielded", None);
    ("ld-exit-several", None);
    ("ld-exit-abort-noalloc", None);
    ("ld-load-spawn-reaper", None);
    ("ld-registry-fin-shielded", None);
    ("ld-load-thread-masked-create", None);
    ("ld-region-fin-shield-wait", None);
  ]

(* ------------------------------------------------------------ child *)

let out_fd = ref Unix.stdout

let out s =
  let s = s ^ "\n" in
  ignore (Unix.write_substring !out_fd s 0 (String.length s))

let sigblk path =
  match open_in path with
  | exception Sys_error _ -> None
  | ic ->
      let rec go () =
        match input_line ic with
        | l when String.length l > 7 && String.sub l 0 7 = "SigBlk:" ->
            Some (Int64.of_string ("0x" ^ String.trim (String.sub l 7 (String.length l - 7))))
        | _ -> go ()
        | exception End_of_file -> None
      in
      let r = go () in
      close_in ic;
      r

let threads () =
  Sys.readdir "/proc/self/task" |> Array.to_list
  |> List.filter_map (fun t ->
         Option.map (fun b -> (int_of_string t, b)) (sigblk (Printf.sprintf "/proc/self/task/%s/status" t)))

(* phases: 0 between (the check's own code and the driver calls it makes,
   from the load on), 1 fin, 2 exit, 3 off *)
let phase = ref 3
let in_sig = ref false
let main_id = Thread.id (Thread.self ())
let blk = Array.make 4 0 and unb = Array.make 4 0
let sig_runs = Array.make 4 0 and sig_in_wait = Array.make 4 0

let debug = Sys.getenv_opt "LDCHECK_DEBUG" <> None

(* Memprof reports an allocation made in C (Bytes.sub's, Thread.create's)
   later, where the mask may be another: an allocation whose callstack holds
   Prim.shield's or Prim.masked's frame was made inside it, blocked. *)
let made_masked cs =
  match Printexc.backtrace_slots cs with
  | None -> false
  | Some slots ->
      Array.exists
        (fun s ->
          match Printexc.Slot.name s with
          | Some ("Rig_edge_primitives.shield" | "Rig_edge_primitives.masked") -> true
          | _ -> false)
        slots

(* Driver code on the stack: between the check's calls (which it makes
   masked), an unblocked allocation of the driver's is a finaliser's run in
   the check's own code. *)
let in_driver cs =
  match Printexc.backtrace_slots cs with
  | None -> false
  | Some slots ->
      Array.exists
        (fun s -> match Printexc.Slot.name s with Some n -> String.starts_with ~prefix:"Blindld." n | None -> false)
        slots

let count (info : Gc.Memprof.allocation) =
  let ph = !phase in
  if ph < 3 && (not !in_sig) && Thread.id (Thread.self ()) = main_id then
    if P.blocks_rig_set () || made_masked info.callstack then blk.(ph) <- blk.(ph) + 1
    else if ph <> 0 || in_driver info.callstack then begin
      unb.(ph) <- unb.(ph) + 1;
      if debug then begin
        prerr_endline "--- unblocked allocation:";
        Printexc.print_raw_backtrace stderr info.callstack
      end
    end

let tracker =
  {
    Gc.Memprof.null_tracker with
    alloc_minor =
      (fun info ->
        count info;
        None);
    alloc_major =
      (fun info ->
        count info;
        None);
  }

let memprof_on () = ignore (Gc.Memprof.start ~sampling_rate:1.0 ~callstack_size:64 tracker)

let on_sigusr2 _ =
  in_sig := true;
  let i = !phase in
  sig_runs.(i) <- sig_runs.(i) + 1;
  if P.in_wait () then sig_in_wait.(i) <- sig_in_wait.(i) + 1;
  in_sig := false

let base = ref []
let rig_set = ref 0L
let new_threads = Hashtbl.create 8
let open_threads = Hashtbl.create 8

let snap where =
  if debug then
    prerr_endline
      (Printf.sprintf "snap %s: %s" where
         (String.concat " " (List.map (fun (t, b) -> Printf.sprintf "%d=%016Lx" t b) (threads ()))));
  List.iter
    (fun (tid, b) ->
      if not (List.mem tid !base) then begin
        Hashtbl.replace new_threads tid ();
        if Int64.logand b !rig_set <> !rig_set && not (Hashtbl.mem open_threads tid) then
          Hashtbl.add open_threads tid (Printf.sprintf "%s:%016Lx" where b)
      end)
    (threads ())

let keep = ref []

let exercise (module Pk : Rig_edge.Package) =
  let module D = Pk.D in
  let m f =
    P.check_unheld "ldcheck";
    P.masked f
  in
  let some = function Some x -> x | None -> failwith "alloc answered None" in
  match List.map (fun (o : D.t Rig_edge.opener) -> m o.make) (m Pk.openers) with
  | d0 :: d1 :: _ ->
      let regions d =
        let a = some (m (fun () -> D.alloc d Rig_edge.Device 4096)) in
        let b = some (m (fun () -> D.alloc d Rig_edge.Mapped 65536)) in
        m (fun () -> D.free d a);
        b
      in
      let _b0 = regions d0 and b1 = regions d1 in
      (match m (fun () -> D.image d0 Pk.kit.binary) with
      | Error e -> failwith e
      | Ok i -> (
          match m (fun () -> D.entry i (Option.get Pk.kit.spin)) with
          | Rig_edge.Entry h ->
              let q = (D.facts d0).queue in
              let s = Rig_edge.encode [ Rig_edge.Launch { entry = h; args = [ 400L ] } ] in
              let rec room () =
                match q.room s with
                | Rig_edge.Room -> ()
                | Grow -> ( match m (fun () -> D.grow d0) with Grown -> room () | Short _ -> failwith "Short")
              in
              m room;
              if not (m (fun () -> q.submit s ~value:1 && q.commit ())) then failwith "submit/commit failed"
          | _ -> failwith "no spin entry"));
      (* what is garbage so far is collected here, unmasked (finalisers
         that run now show under "between"), so that the stop's garbage is
         what fin collects *)
      P.signal_at_wait 1;
      Gc.full_major ();
      P.signal_at_wait 0;
      m (fun () -> D.stop d1 ~fault:None);
      m (fun () -> D.free d1 b1);
      keep := Obj.repr d0 :: !keep
  | _ -> failwith "fewer than two openers"

let child name fd =
  out_fd := fd;
  if Sys.getenv_opt "LDCHECK_VERBOSE" = None then begin
    let null = Unix.openfile "/dev/null" [ Unix.O_WRONLY ] 0 in
    Unix.dup2 null Unix.stderr;
    Unix.close null
  end;
  Thread.join (Thread.create ignore ());
  (* the runtime's own threads, if any, before the load *)
  base := List.map fst (threads ());
  rig_set := P.masked (fun () -> Option.get (sigblk "/proc/thread-self/status"));
  Sys.set_signal Sys.sigusr2 (Sys.Signal_handle on_sigusr2);
  at_exit (fun () ->
      phase := 3;
      Gc.Memprof.stop ();
      P.signal_at_wait 0;
      snap "exit";
      (* a thread started or woken late (the first alloc's, the first
         open's) may not have run yet on a busy machine: give the drivers'
         threads one of their tick periods (50 ms) at most, looking every
         2 ms, and only while no open thread was seen *)
      let tries = ref 25 in
      while Hashtbl.length open_threads = 0 && !tries > 0 do
        decr tries;
        Thread.delay 0.002;
        snap "exit"
      done;
      let ph i = Printf.sprintf "%d %d %d %d" blk.(i) unb.(i) sig_runs.(i) sig_in_wait.(i) in
      out ("between " ^ ph 0);
      out ("fin " ^ ph 1);
      out ("exit " ^ ph 2);
      out
        (Printf.sprintf "threads %d %s" (Hashtbl.length new_threads)
           (String.concat "," (Hashtbl.fold (fun tid w acc -> Printf.sprintf "%d@%s" tid w :: acc) open_threads [])));
      out "END");
  Dynlink.loadfile plugin;
  memprof_on ();
  phase := 0;
  snap "load";
  (match Rig_edge_registry.find name with Some p -> exercise p | None -> failwith ("no driver " ^ name));
  snap "calls";
  P.signal_at_wait 1;
  phase := 1;
  Gc.full_major ();
  Gc.full_major ();
  phase := 0;
  P.signal_at_wait 0;
  snap "fin";
  at_exit (fun () ->
      P.signal_at_wait 1;
      phase := 2);
  exit 0

(* ----------------------------------------------------------- parent *)

let fork_child f =
  flush stdout;
  flush stderr;
  let r, w = Unix.pipe () in
  match Unix.fork () with
  | 0 ->
      Unix.close r;
      (try f w
       with e ->
         out_fd := w;
         out ("ERROR " ^ Printexc.to_string e);
         exit 3);
      exit 0
  | pid ->
      Unix.close w;
      let buf = Buffer.create 256 and b = Bytes.create 4096 in
      let deadline = Unix.gettimeofday () +. 30. in
      let rec read () =
        let left = deadline -. Unix.gettimeofday () in
        if left <= 0. then Unix.kill pid Sys.sigkill
        else
          match Unix.select [ r ] [] [] left with
          | [], _, _ -> read ()
          | _ -> (
              match Unix.read r b 0 4096 with
              | 0 -> ()
              | n ->
                  Buffer.add_subbytes buf b 0 n;
                  read ())
      in
      read ();
      Unix.close r;
      let _, st = Unix.waitpid [] pid in
      (String.split_on_char '\n' (Buffer.contents buf) |> List.filter (( <> ) ""), st)

let list_names () =
  fst
    (fork_child (fun w ->
         out_fd := w;
         Dynlink.loadfile plugin;
         List.iter out (Rig_edge_registry.names ())))

let field key lines =
  List.find_map
    (fun l ->
      match String.index_opt l ' ' with
      | Some k when String.sub l 0 k = key -> Some (String.sub l (k + 1) (String.length l - k - 1))
      | _ -> None)
    lines

let phase_of key lines =
  match Option.map (fun s -> List.map int_of_string (String.split_on_char ' ' s)) (field key lines) with
  | Some [ b; u; s; w ] -> (b, u, s, w)
  | _ -> (-1, -1, -1, -1)

let () =
  let names = list_names () in
  let missing = List.filter (fun (n, _) -> not (List.mem n names)) expected in
  let extra = List.filter (fun n -> not (List.mem_assoc n expected)) names in
  if missing <> [] || extra <> [] then
    Printf.printf "registry differs from the table: missing %s, extra %s\n" (String.concat " " (List.map fst missing))
      (String.concat " " extra);
  let only = if Array.length Sys.argv > 2 then Some Sys.argv.(2) else None in
  let expected = List.filter (fun (n, _) -> only = None || only = Some n) expected in
  let bad = ref 0 in
  List.iter
    (fun (name, exp) ->
      let lines, _st = fork_child (child name) in
      let signal s w =
        if s = 0 then "" else if w > 0 then ", signal ran inside its wait" else ", signal held to after the wait"
      in
      let say (b, u, s, w) = Printf.sprintf "%d allocs, %d unblocked%s" (b + u) u (signal s w) in
      let ((_, fu, _, fw) as fin) = phase_of "fin" lines and ((_, eu, _, ew) as ex) = phase_of "exit" lines in
      let _, bu, bs, bw = phase_of "between" lines in
      let threads = Option.value ~default:"?" (field "threads" lines) in
      let nthreads, opens =
        match String.split_on_char ' ' threads with
        | [ n; o ] -> (n, if o = "" then [] else String.split_on_char ',' o)
        | [ n ] -> (n, [])
        | _ -> ("?", [])
      in
      let ended = List.mem "END" lines in
      let sig7 = fu > 0 || eu > 0 || fw > 0 || ew > 0 || bu > 0 || bw > 0 and sig8 = opens <> [] in
      let shown =
        match (sig7, sig8) with
        | true, true -> Some "SIG-7+SIG-8"
        | true, false -> Some "SIG-7"
        | false, true -> Some "SIG-8"
        | false, false -> None
      in
      let ok = ended && shown = exp in
      if not ok then incr bad;
      Printf.printf "%-29s %-16s fin: %s;%s exit: %s; threads: %s new, %s => %s%s\n" name
        (match exp with Some c -> "BROKEN " ^ c | None -> "CONFORMING")
        (say fin)
        (if bu > 0 || bs > 0 then Printf.sprintf " between calls: %d unblocked in driver code%s;" bu (signal bs bw)
         else "")
        (say ex) nthreads
        (if opens = [] then "all blocked" else "open " ^ String.concat " " opens)
        (match shown with Some c -> "shows " ^ c | None -> "shows none")
        (if ok then " ok" else if ended then " MISMATCH" else " MISMATCH (" ^ String.concat " | " lines ^ ")"))
    expected;
  Printf.printf "%d of %d as the table says\n" (List.length expected - !bad) (List.length expected);
  exit (if !bad = 0 then 0 else 1)
