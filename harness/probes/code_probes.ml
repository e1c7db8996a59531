(* Code probes (CODE-1, CODE-2, CODE-3, CODE-5, CODE-6, CODE-7); see
   code_probes.mli. *)

open Rig_edge
open Probes
module Prim = Rig_edge_primitives

(* CODE-1: image takes kit.binary and refuses kit.refused_binary with Error. *)
let code1_image (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-1" ~seed (fun s ->
      let dev = K.open_first s in
      (match K.image s dev P.kit.binary with
      | Ok _ -> ()
      | Error why -> K.flag_value s "image refuses kit.binary: %s" why);
      match P.kit.refused_binary with
      | None -> ()
      | Some b -> (
          match K.image s dev b with
          | Error _ -> ()
          | Ok _ -> K.flag_value s "image takes kit.refused_binary instead of answering Error"
          | exception e -> K.flag_value s "image of kit.refused_binary raised %s instead of answering Error" (Printexc.to_string e)))

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
      | Entry h' -> K.flag_value s "a second entry of %S answered a new handle (%Ld, then %Ld)" f h h'
      | Absent -> K.flag_value s "a second entry of %S answered Absent" f
      | No_memory k -> K.flag_value s "a second entry of %S answered No_memory %d" f k);
      if after <> before then
        K.flag s "a second entry of %S changed free Device memory from %d to %d bytes" f before after;
      let absent = spf "probe-absent-%d" (K.int s 100000) in
      (match K.entry i absent with
      | Absent -> ()
      | Entry _ -> K.flag_value s "entry of %S, which the image lacks, answered Entry" absent
      | No_memory k -> K.flag_value s "entry of %S, which the image lacks, answered No_memory %d" absent k);
      (* Nor after a prepare of another function of an image: kit.binary's
         spin, then the prepare of another of its functions, then spin's
         entry again. *)
      (match (P.kit.spin, List.filter_map Fun.id [ P.kit.hang; P.kit.fault ]) with
      | Some spin, other :: _ -> (
          let bi = K.binary_image s dev in
          match K.entry bi spin with
          | Entry e1 -> (
              (* the handle only: what the prepare started may take memory
                 meanwhile *)
              (try Prim.masked (fun () -> P.D.prepare bi.image other) with _ -> ());
              match K.entry bi spin with
              | Entry e2 when e2 = e1 -> ()
              | Entry e2 -> K.flag_value s "entry of %S after a prepare of %S answered a new handle (%Ld, then %Ld)" spin other e1 e2
              | Absent -> K.flag_value s "entry of %S after a prepare of %S answered Absent, having answered Entry" spin other
              | No_memory k -> K.flag_value s "entry of %S after a prepare of %S answered No_memory %d, having answered Entry" spin other k)
          | _ -> ())
      | _ -> ());
      let launch = [ Launch { entry = h; args = [] } ] in
      (* The first launch of f with the Device memory full, the queues
         holding a launch already (kit.spin's, run to its end): room takes
         it, so a submit that then fails needed memory to launch f ("so that
         the driver's submit allocates nothing to launch f").  A room or
         grow that needs memory is the queues', not this clause's. *)
      let first_full =
        match P.kit.spin with
        | None -> `Not_tried
        | Some spin -> (
            let bi = K.binary_image s dev in
            match K.entry bi spin with
            | Entry g -> (
                ignore (K.run_or_skip s dev [ Launch { entry = g; args = [ 1L ] } ] "a launch of kit.spin for 1 ms");
                let fillers = K.take s dev max_int in
                let outcome =
                  match K.submit dev launch with
                  | Error ("submit failed" | "commit failed" as why) ->
                      K.flag s "the first launch of %S, with the Device memory full and the queues holding a launch already, could not be made: %s (its entry was made before): the driver's submit needed memory to launch it" f why;
                      `Lost
                  | Error _ -> `Not_tried
                  | Ok v -> (
                      match K.wait_value s dev v ~ms:3000 with
                      | Reached -> `Ran
                      | w -> K.flag s "the first launch of %S with the Device memory full: %s" f (K.describe_wait w); `Lost)
                in
                List.iter K.free_reg fillers;
                outcome)
            | _ -> `Not_tried)
      in
      if first_full <> `Lost then begin
      (* A launch with the device's memory full must still run. *)
      if first_full = `Not_tried then ignore (K.run_or_skip s dev launch "a first launch of the scratch function");
      let fillers = K.take s dev max_int in
      (match K.submit dev launch with
      | Error _ -> () (* queues may need memory: not this clause *)
      | Ok v -> (
          match K.wait_value s dev v ~ms:3000 with
          | Reached -> ()
          | w -> K.flag s "a launch of %S with the Device memory full: %s" f (K.describe_wait w)));
      if dev.lost = None then ignore (K.wait_value s dev dev.last ~ms:3000);
      List.iter K.free_reg fillers
      end)

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
      | No_memory k -> K.flag_value s "entry with %d bytes free answered No_memory %d, fewer than the %d bytes %S needs" before k need f
      | Entry _ ->
          (* The document does not say that f's scratch is memory alloc
             gives: a driver with a pool of its own for it has the bytes. *)
          raise
            (Skip
               (spf "entry of %S, which needs %d bytes, answered Entry with %d bytes of Device memory free: its scratch is not the memory alloc gives, which the probe can fill" f need before))
      | Absent -> K.flag_value s "entry of %S answered Absent" f);
      if after <> before then
        K.flag s "entry answering No_memory changed free Device memory from %d to %d bytes" before after;
      List.iter K.free_reg fillers;
      (* a No_memory answered to each of rig's asks with the memory free
         is the clause's *)
      (match K.entry_as_rig_asks i f with
      | Entry _ -> ()
      | No_memory k -> K.flag_value s "with the memory freed again, entry of %S still answers No_memory %d, to 4 asks in a row" f k
      | Absent -> K.flag_value s "with the memory freed again, entry of %S answers Absent" f);
      (* The other side of the boundary: with what a new function needs
         left free, an entry that answers No_memory k says the device has no
         memory for k bytes, so an alloc of k bytes right after must fail. *)
      let i2, g = K.scratch_image s dev need in
      let fillers = K.take s dev (K.free_bytes s dev - need) in
      let before = K.free_bytes s dev in
      (match K.entry_as_rig_asks i2 g with
      | No_memory k ->
          let left = K.free_bytes s dev in
          if left < before then
            (* every ask answered No_memory: none may have made anything *)
            K.flag s "entry of %S answered No_memory %d to 4 asks in a row with %d bytes free before, and left %d: it made something"
              g k before left
          else if before >= need then (
            match K.alloc s dev Device k with
            | Some r ->
                K.flag_value s "entry of %S, which needs %d bytes, answered No_memory %d with %d bytes free (to 4 asks in a row), yet an alloc of %d bytes of Device memory right after got them" g need k before k;
                K.free_reg r
            | None -> ())
      | _ -> ());
      List.iter K.free_reg fillers)

(* CODE-5: Invalid_argument for a function that needs more than the device
   has. *)
let code5_too_big (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-5" ~seed (fun s ->
      let dev = K.open_first s in
      let free0 = K.free_bytes s dev in
      (* entry of a function needing [need], where Invalid_argument is due:
         flags the answer unless [allowed] takes it, with [why] after it. *)
      let ask need ~allowed ~why =
        let i, f = K.scratch_image s dev need in
        let answer = try Ok (Prim.masked (fun () -> P.D.entry i.image f)) with e -> Error e in
        let shown =
          match answer with
          | Error (Invalid_argument _) -> None
          | Error e ->
              i.idev.lost <- Some (Printexc.to_string e);
              Some (spf "raised %s, not Invalid_argument" (Printexc.to_string e))
          | Ok _ when allowed answer -> None
          | Ok (No_memory k) -> Some (spf "answered No_memory %d, not Invalid_argument" k)
          | Ok (Entry _) -> Some "answered Entry"
          | Ok Absent -> Some "answered Absent"
        in
        Option.iter (fun a -> K.flag s "entry of a function needing %d bytes (the device has %d free) %s%s" need free0 a why) shown
      in
      let need = round_up (max (1 lsl 30) ((4 * free0) + 4096 + (4096 * K.int s 16))) 4096 in
      ask need ~allowed:(fun _ -> false) ~why:"";
      (* Nearer the edge: half again what the device has free while rig holds
         none of its memory.  No_memory would say that memory rig could
         reclaim may make it fit, yet rig holds nothing to reclaim: the
         function needs more than the device offers.  Entry and Absent are
         answers too here (scratch from a pool alloc does not reach). *)
      let near = round_up ((3 * free0 / 2) + 4096) 4096 in
      if near < need && dev.lost = None then
        ask near
          ~allowed:(function Ok (Entry _ | Absent) -> true | _ -> false)
          ~why:", with none of its memory held by rig: nothing rig could reclaim makes it fit")

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
      | exception e -> K.flag_value s "prepare of %S, which the image lacks, raised %s" absent (Printexc.to_string e));
      (match K.entry i absent with
      | Absent -> ()
      | Entry _ -> K.flag_value s "entry after prepare of %S, which the image lacks, answered Entry" absent
      | No_memory k -> K.flag_value s "entry after prepare of %S, which the image lacks, answered No_memory %d" absent k);
      (match prepare f with
      | () -> ()
      | exception e -> K.flag_value s "prepare of %S raised %s" f (Printexc.to_string e));
      (* Whether a later entry answers the same handle is CODE-2's. *)
      (match K.entry_as_rig_asks i f with
      | Entry _ -> ()
      | Absent -> K.flag_value s "entry of %S after its prepare answered Absent" f
      | No_memory k -> K.flag_value s "entry of %S after its prepare answered No_memory %d, to 4 asks in a row" f k);
      (* A failure prepare meets is reported by nothing either: a function
         whose scratch does not fit in the memory left free now (not more
         than the device offers, which is CODE-5's). *)
      match P.kit.scratch with
      | None -> ()
      | Some _ ->
          let need = 4096 * (4 + K.int s 8) in
          let i2, g = K.scratch_image s dev need in
          let taken = K.take s dev max_int in
          let prepare2 () = Prim.masked (fun () -> P.D.prepare i2.image g) in
          (match prepare2 () with
          | () -> ()
          | exception e ->
              K.flag_value s "prepare of %S, whose %d bytes of scratch do not fit in the memory left free, raised %s" g need
                (Printexc.to_string e));
          let first = K.entry i2 g in
          List.iter K.free_reg taken;
          match first with
          | Entry _ -> ()
          | Absent -> K.flag_value s "entry of %S after a prepare that found no memory for it answered Absent" g
          | No_memory _ -> (
              (* As entry itself would: once memory is free, it is made. *)
              match K.entry_as_rig_asks i2 g with
              | Entry _ -> ()
              | Absent -> K.flag_value s "entry of %S, once memory was freed after a prepare that found none, answered Absent" g
              | No_memory k ->
                  K.flag_value s "entry of %S, once the memory taken was freed, still answered No_memory %d (what its prepare met), to 4 asks in a row" g k))

(* CODE-7: prepares of a function that has an entry make nothing, also
   after another image of the device was loaded and unloaded.  prepare may
   start its work and return: the memory is measured again once a moment
   has passed, and not through a second entry, whose making nothing new is
   CODE-2's. *)
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
        K.flag s "%d prepares of %S, which had an entry, changed free Device memory from %d to %d bytes" times f before after
      else
        match K.image s dev P.kit.binary with
        | Error _ -> ()
        | Ok other ->
            K.unload_img other;
            let before = K.free_bytes s dev in
            (try Prim.masked (fun () -> P.D.prepare i.image f) with _ -> ());
            Thread.delay 0.1;
            let after = K.free_bytes s dev in
            if after <> before then
              K.flag s "a prepare of %S, which had an entry, after another image of the device was loaded and unloaded, changed free Device memory from %d to %d bytes" f before after)

(* CODE-7, "or a started prepare": prepares of f with no entry, made at
   once (one on a thread of the probe's, two or three back to back on this
   one), must make what one prepare makes, no more: the first starts f's
   making, and the others find it started.  The ones back to back come
   microseconds apart whatever the machine's load, so that a prepare meets
   a started one even where the thread beside comes only after a making
   that takes 50 ms is over (a blind driver's was, under the suite's load).  What one prepare makes is
   measured first, on another image: its scratch must show in free Device
   memory within 1 s (else unjudged: a prepare that starts nothing says
   nothing of a started one), and 0.3 s more are let pass, as each measure
   does, for work a prepare handed to a thread of its own. *)
let code7_prepare_started (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-7" ~seed (fun s ->
      if P.kit.scratch = None then raise (Skip "the kit has no scratch function: a prepare's making is not seen");
      let dev = K.open_first s in
      let need = 4096 * (4 + K.int s 8) in
      let prepare (i : K.img) f () = try Prim.masked (fun () -> P.D.prepare i.image f) with _ -> () in
      (* the bytes [start] took of free Device memory, once its making showed
         and 0.3 s more passed; None if nothing showed within 1 s *)
      let taken start =
        let i, f = K.scratch_image s dev need in
        Option.map (fun t -> (f, t)) (K.taken_by s dev ~shows:need (fun () -> start i f))
      in
      match taken (fun i f -> prepare i f ()) with
      | None ->
          Case.report_unjudged
            [ ("CODE-7", spf "a prepare made no %d bytes of scratch seen in free Device memory within 1 s" need) ]
      | Some (_, one) -> (
          let times = 3 + K.int s 2 in
          (* the thread beside is in place, spinning, before either starts *)
          let at_once i f =
            let ready = Atomic.make false and go = Atomic.make false in
            let beside =
              Thread.create
                (fun () ->
                  Atomic.set ready true;
                  while not (Atomic.get go) do Thread.yield () done;
                  prepare i f ())
                ()
            in
            while not (Atomic.get ready) do Thread.yield () done;
            Atomic.set go true;
            for _ = 2 to times do prepare i f () done;
            Thread.join beside
          in
          (* twice: on a loaded machine the thread beside may come only once
             the other's prepare is over *)
          let rec attempt k =
            match taken at_once with
            | Some (f, all) when all > one ->
                K.flag s
                  "%d prepares of %S at once (one on another thread), with no entry, took %d bytes of Device memory, where one prepare takes %d: a started prepare was started again"
                  times f all one
            | _ -> if k < 2 then attempt (k + 1)
          in
          attempt 1))

(* CODE-7, "a prepare that raises must have changed nothing": rig calls
   prepare masked, so what can end it is an asynchronous exception, after
   which rig calls stop, free and unload, while its other threads may still
   call the image (a prepare or entry of the same f) before that stop comes.
   A prepare of a fresh image's scratch function is ended at each of its
   first 16 allocations of its own (Async_inject's point, a Gc.Memprof
   callback's exception, counting only [drivers_allocation]s), then at each
   of its first 3 waits (SIGUSR2 as the wait blocks).  After each, four
   things are judged:
   - Device memory taken after the raise, with no call made (work the
     prepare started goes on), within a window of 5 times what a prepare
     took and twice what a prepare and the entry after it took (at least
     50 ms);
   - after an ended wait, Device memory held when prepare raised: a wait is
     a point the driver chose mid-work, where it knows an exception comes;
   - a prepare of the same f right after: with what the ended one left, it
     must make what a prepare on a fresh image makes (a mark of "started"
     left with nothing made gets a prepare that starts nothing);
   - Device memory still taken once the image is unloaded (never given
     back), within 1 s.
   A finding stands when one of two more judgements of its point, each on a
   fresh image, finds it again: the evidence says how often it came.
   Memory held right after an ended allocation is no finding: a prepare
   that made and recorded its entry may raise on its way out (hostmem's
   entry boxes its answer after recording it; so does Lock.protect's give),
   and unload gives that back.  An allocation of the primitives' own code is
   no point either: no driver decides anything there. *)

(* The path of the allocation a Memprof callback runs for, when it is the
   driver's: its frames from Alloc_points' down to the injector's [around]
   (as file:line:column).  It is the driver's when the first of those frames
   that is not the standard library's (its files have no directory) is not
   the primitives', the injector's, nor the probe's own. *)
let drivers_allocation_path () =
  let where slot =
    Option.map
      (fun (l : Printexc.location) -> (l.filename, spf "%s:%d:%d" l.filename l.line_number l.start_char))
      (Printexc.Slot.location slot)
  in
  match Printexc.backtrace_slots (Printexc.get_callstack 32) with
  | None -> Some []
  | Some slots ->
      let frames = List.filter_map where (Array.to_list slots) in
      let rec below_hook = function
        | (f, _) :: rest when Filename.basename f = "alloc_points.ml" -> (
            match List.find_opt (fun (f, _) -> String.contains f '/') rest with
            | Some (f, _)
              when List.mem (Filename.basename f) [ "rig_edge_primitives.ml"; "async_inject.ml"; "code_probes.ml"; "probes.ml" ] ->
                None
            | _ ->
                (* up to the call's own frames: the probe's, which differ
                   from one call site of prepare to the next *)
                let rec driver_part = function
                  | (f, _) :: _ when Filename.basename f = "async_inject.ml" -> []
                  | (_, w) :: rest -> w :: driver_part rest
                  | [] -> []
                in
                Some (driver_part rest))
        | _ :: rest -> below_hook rest
        | [] -> Some []
      in
      below_hook frames

let prepare_raises ~beside (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-7" ~seed (fun s ->
      let functions = Rig_edge.scratch_functions (Rig_edge_registry.more P.name) in
      if beside && functions = None then
        raise (Skip "the package registered no scratch_functions (Rig_edge.kit_more): an image has one function");
      if P.kit.scratch = None then raise (Skip "the kit has no scratch function: a prepare's making is not seen");
      let dev = K.open_first s in
      let need = 4096 * (4 + K.int s 8) in
      (* beside: the image's other functions g, h (both prepared before f's
         prepare: a cache of two evicts one) and k (never prepared: a
         prepare that makes f's dependencies makes k's), each a page larger
         than the one before, so that what is given back says whose it was *)
      let need_g = need + 4096 and need_h = need + 8192 and need_k = need + 12288 in
      (* the paths of the last prepare's allocations of its own, the last first *)
      let paths = ref [] in
      let drivers_allocation () =
        match drivers_allocation_path () with
        | Some path ->
            paths := path :: !paths;
            true
        | None -> false
      in
      (* prepare ended at its [at]-th point (never for 0): how it ended
         (the injected exception, or one of the driver's own), its
         allocations of its own, its waits *)
      let prepare ~at ~on_wait (i : K.img) f =
        let on = if on_wait then Async_inject.Wait else Allocation in
        let inject = if at = 0 then None else Some { Async_inject.fn = "prepare"; nth = 1; at; on } in
        paths := [];
        Async_inject.reset ?inject ~counts:drivers_allocation ();
        (* SIGUSR2 open outside the mask, as a program's thread has it: a
           wait gives the thread that mask back while it blocks *)
        let old = Thread.sigmask Unix.SIG_UNBLOCK [ Sys.sigusr2 ] in
        let outcome =
          match Prim.masked (fun () -> Async_inject.around "prepare" (fun () -> P.D.prepare i.image f)) with
          | () -> `Returned
          | exception Async_inject.Async_interrupt _ -> `Ended
          | exception e -> `Raised e
        in
        ignore (Thread.sigmask Unix.SIG_SETMASK old);
        let allocations, waits = match Async_inject.census () with [ (_, _, a, w) ] -> (a, w) | _ -> (0, 0) in
        Async_inject.off ();
        (outcome, allocations, waits)
      in
      (* A clean prepare whose making the probe measures.  One that raised
         of itself (a helper thread the system refused, say) changed
         nothing, as CODE-7 asks, and made nothing to measure: it is made
         again, a little later, at most twice more.  Whether one returned. *)
      let measured_prepare i f =
        let rec attempt left =
          match prepare ~at:0 ~on_wait:false i f with
          | `Raised _, _, _ when left > 1 ->
              Thread.delay 0.05;
              attempt (left - 1)
          | `Raised _, _, _ -> false
          | (`Returned | `Ended), _, _ -> true
        in
        attempt 3
      in
      (* Free Device memory once it stood still for max(20 ms, 3 times
         what it took to move) after it moved [goal] bytes below [from], or
         for 200 ms after it moved otherwise (a making that gave something
         back as it took); at most 1 s in all: the level a clean making
         left. *)
      let settled_below from goal =
        let t0 = Unix.gettimeofday () in
        let rec shown moved =
          let free = K.free_bytes s dev in
          let now = Unix.gettimeofday () in
          if from - free >= goal || now -. t0 > 1. then free
          else
            match moved with
            | Some (level, since) when level = free && now -. since >= 0.2 -> free
            | Some (level, since) when level = free -> Thread.delay 0.005; shown (Some (level, since))
            | _ when free <> from -> Thread.delay 0.005; shown (Some (free, now))
            | _ -> Thread.delay 0.002; shown None
        in
        let free = shown None in
        let still = Float.max 0.02 (3. *. (Unix.gettimeofday () -. t0)) in
        let rec stand free since =
          let now = Unix.gettimeofday () in
          if now -. since >= still || now -. t0 > 1. then free
          else begin
            Thread.delay 0.005;
            let free' = K.free_bytes s dev in
            if free' <> free then stand free' (Unix.gettimeofday ()) else stand free since
          end
        in
        stand free (Unix.gettimeofday ())
      in
      (* An image with f: alone (kit.scratch), or beside g, h and k
         (scratch_functions), g's and h's prepares made, one after the
         other, and seen in Device memory first (h's may drop g's: a clean
         prepare may); the names of the prepared others, and, where the two
         prepares took less than the smaller one's scratch, what they took
         (no other function's program to keep). *)
      let load ?(others_prepared = true) () =
        match (beside, functions) with
        | true, Some functions -> (
            let bin, names = functions [ need; need_g; need_h; need_k ] in
            match (K.image s dev bin, names) with
            | Error why, _ -> raise (Skip (spf "setup: the device refuses the binary of scratch_functions: %s" why))
            | Ok i, [ f; g; h; _ ] ->
                let start = K.free_bytes s dev in
                let prepare_settled (name, n) =
                  let before = K.free_bytes s dev in
                  (try Prim.masked (fun () -> P.D.prepare i.image name) with _ -> ());
                  ignore (settled_below before n)
                in
                if others_prepared then List.iter prepare_settled [ (g, need_g); (h, need_h) ];
                let took = start - K.free_bytes s dev in
                (i, f, (if others_prepared then [ g; h ] else []),
                 if others_prepared && took < need_g then Some (spf "%S and %S" g h, took, need_g) else None)
            | Ok _, _ -> raise (Skip "setup: scratch_functions of four sizes did not name four functions"))
        | _ ->
            let i, f = K.scratch_image s dev need in
            (i, f, [], None)
      in
      (* the census of the image none of whose functions was prepared,
         first: a prepare with no allocation or wait of its own there (one
         that does nothing, as hostmem's) is not ended in any world, and
         the prepares of g and h would wait a second each for nothing *)
      let bare_allocations, bare_waits, bare_paths =
        if not beside then (0, 0, [||])
        else begin
          let i, f, _, _ = load ~others_prepared:false () in
          let _, allocations, waits = prepare ~at:0 ~on_wait:false i f in
          let paths = Array.of_list (List.rev !paths) in
          K.unload_img i;
          (allocations, waits, paths)
        end
      in
      if beside && bare_allocations = 0 && bare_waits = 0 then
        Case.report_unjudged
          [ ("CODE-7", "a prepare on an image of several functions, none prepared, has no allocation or wait of its own: no asynchronous exception can end it") ]
      else
      let census_img, f, _, short = load () in
      match short with
      | Some (others, took, n) ->
          Case.report_unjudged
            [ ("CODE-7", spf "prepares of %s took %d bytes of Device memory in all, less than the %d bytes of the smaller one's scratch, within 1 s each: no other function's prepared program to keep" others took n) ]
      | None ->
      let census_base = K.free_bytes s dev in
      let t0 = Unix.gettimeofday () in
      let _, allocations, waits = prepare ~at:0 ~on_wait:false census_img f in
      let prepare_time = Unix.gettimeofday () -. t0 in
      let census_paths = Array.of_list (List.rev !paths) in
      (* the entry waits for what the prepare started: how long the whole
         making takes, and what it takes in all *)
      (try ignore (K.entry census_img f) with _ -> ());
      let making = Unix.gettimeofday () -. t0 in
      (* long enough for work a prepare started to show, on a helper thread
         too (one whose prepare returns at once) *)
      let window = Float.max 0.05 (Float.max (5. *. prepare_time) (2. *. making)) in
      let entry_takes = census_base - K.free_bytes s dev in
      K.unload_img census_img;
      (* what the entries of [others] on [i] take of free Device memory *)
      let entries_take i others =
        let free = K.free_bytes s dev in
        List.iter (fun g -> try ignore (K.entry i g) with _ -> ()) others;
        free - K.free_bytes s dev
      in
      (* beside: what the prepared others' entries take right after their
         prepares, on an image of its own (nothing where an entry claims the
         prepared program): the state an ended prepare of f must leave them
         in *)
      let others_entries_take =
        if not beside then 0
        else begin
          let i, _, others, _ = load () in
          let took = entries_take i others in
          K.unload_img i;
          took
        end
      in
      (* beside, then: the points again with f's scratch not fitting, and
         on an image where no other function was prepared (a prepare that
         makes the others' programs too, as f's dependencies, makes them
         only where the first prepare of the image is f's); an allocation
         there counts where its path is the census's *)
      let points ?(allocations = allocations) ?(waits = waits) world =
        List.init (min allocations 16) (fun k -> (k + 1, false, world))
        @ List.init (min waits 3) (fun k -> (k + 1, true, world))
      in
      let points =
        points `Others_prepared
        @ if beside then points `Pressed @ points ~allocations:bare_allocations ~waits:bare_waits `None_prepared else []
      in
      let free_once until deadline = K.free_bytes_when s dev ~deadline until in
      (* the least free Device memory seen until [deadline] *)
      let rec lowest low deadline =
        if Unix.gettimeofday () > deadline then low
        else (Thread.delay 0.01; lowest (min low (K.free_bytes s dev)) deadline)
      in
      (* Device memory taken since [from] once it is at least [goal], or at [deadline] *)
      let taken_reaching from goal deadline = from - free_once (fun free -> from - free >= goal) deadline in
      (* What a prepare of f makes on a fresh image, given time for its
         work: the bar a prepare after an ended one must reach.  No more
         than the entry takes: what a prepare holds on its way there (a
         code buffer it gives back as it publishes) is not the bar.  Only
         needed once some prepare was ended. *)
      let horizon = Float.max 0.2 (3. *. making) in
      let fresh_prepare_makes =
        lazy
          (let i, f, _, _ = load () in
           let before = K.free_bytes s dev in
           let made =
             if measured_prepare i f then taken_reaching before entry_takes (Unix.gettimeofday () +. horizon) else 0
           in
           K.unload_img i;
           min made entry_takes)
      in
      (* one point: a finding, or whether prepare was ended there *)
      let judge (at, on_wait, world) =
        let pressed = world = `Pressed in
        let base = K.free_bytes s dev in
        let i, f, others, _ = load ~others_prepared:(world <> `None_prepared) () in
        (* pressed: Device memory taken until f's scratch does not fit, as
           where a prepare makes room by dropping others' programs *)
        let taken = if pressed then K.take s dev (K.free_bytes s dev - (need / 2)) else [] in
        let give_back () = List.iter K.free_reg taken in
        let before = K.free_bytes s dev in
        let where =
          spf "its %s %d%s" (if on_wait then "wait" else "allocation") at
            (match world with
             | `Pressed -> spf ", with %d bytes of Device memory free where it needs %d" before need
             | `None_prepared -> ", on an image of several functions none of which was prepared"
             | `Others_prepared -> "")
        in
        let others_text = String.concat " and " (List.map (spf "%S") others) in
        (* An allocation point is the census prepare's: one ended
           elsewhere took another path (the driver's own handler of a
           helper thread the system refused, say), where its k-th
           allocation is another point. *)
        let on_census_path () =
          let census_paths = if world = `None_prepared then bare_paths else census_paths in
          on_wait || (at <= Array.length census_paths && (match !paths with p :: _ -> p = census_paths.(at - 1) | [] -> false))
        in
        match prepare ~at ~on_wait i f with
        | (`Returned | `Raised _), _, _ -> give_back (); K.unload_img i; `Not_ended
        | `Ended, _, _ when not (on_census_path ()) -> give_back (); K.unload_img i; `Not_ended
        | `Ended, _, _ ->
            let raised = K.free_bytes s dev in
            let later = lowest raised (Unix.gettimeofday () +. window) in
            let finding =
              if later < raised then
                Some
                  (spf "a prepare of %S that an asynchronous exception ended at %s went on: %d more bytes of Device memory were taken within %.2f s after it raised, with no call made"
                     f where (raised - later) window)
              else if beside && raised > before then
                Some
                  (spf "a prepare of %S that an asynchronous exception ended at %s had given back %d bytes of Device memory when it raised, with the prepared programs of %s made before it: it changed another function's state"
                     f where (raised - before) others_text)
              else if on_wait && raised < before then
                Some
                  (spf "a prepare of %S that an asynchronous exception ended at %s held %d bytes of Device memory when it raised" f where
                     (before - raised))
              else
                (* beside: the others' entries must find their programs as
                   their prepares left them, taking no more than right after
                   those (asked before the prepare of f below, which may
                   drop them as a clean prepare may) *)
                let entries_took = if not beside || pressed then 0 else entries_take i others in
                if entries_took > others_entries_take then
                  Some
                    (spf "a prepare of %S that an asynchronous exception ended at %s changed the prepared programs of %s: their entries then took %d bytes of Device memory, where right after their prepares they take %d"
                       f where others_text entries_took others_entries_take)
                else
                (* A prepare of f now, as another thread of rig's may make
                   before rig's stop comes: with what the ended one left, it
                   must make what one on a fresh image makes.  One that made
                   and recorded its entry before it raised left that much
                   already; one that left f marked as started, with nothing
                   made, gets a prepare that starts nothing. *)
                let fresh = if world <> `Others_prepared then 0 else Lazy.force fresh_prepare_makes in
                (* Up to three prepares: a clean prepare may make nothing
                   (rf-ok-give-up's, when the system refuses its helper),
                   while a mark left by the ended one makes every later
                   prepare start nothing. *)
                let rec prepares_after tries =
                  if not (measured_prepare i f) then None
                  else begin
                    let deadline = Unix.gettimeofday () +. Float.max 1. (5. *. horizon) in
                    let made = taken_reaching (before - entries_took) fresh deadline in
                    if made >= fresh then None
                    else if tries < 3 then prepares_after (tries + 1)
                    else
                      Some
                        (spf "a prepare of %S that an asynchronous exception ended at %s changed what a prepare of it makes: three right after, with what the ended one left, made %d bytes of Device memory in all, where one on a fresh image makes %d"
                           f where made fresh)
                  end
                in
                if fresh <= 0 then None else prepares_after 1
            in
            give_back ();
            K.unload_img i;
            match finding with
            | Some why -> `Found why
            | None ->
                let unloaded = free_once (fun free -> free >= base) (Unix.gettimeofday () +. 1.) in
                if unloaded < base then
                  `Found
                    (spf "a prepare of %S that an asynchronous exception ended at %s left %d bytes of Device memory taken for good: still taken 1 s after its image was unloaded"
                       f where (base - unloaded))
                else `Ended
      in
      (* A point's finding is judged twice more, each on a fresh image, and
         stands when it comes again: what the probe sees within its windows
         depends on timing (a helper the system was slow to run or refused
         a thread), and a finding that came once in three says nothing of
         the driver. *)
      let confirmed point =
        let again = List.filter (fun () -> match judge point with `Found _ -> true | _ -> false) [ (); () ] in
        1 + List.length again
      in
      (* the points in order, up to the first finding that stands *)
      let rec try_points ended = function
        | [] ->
            if not ended then
              Case.report_unjudged
                [ ("CODE-7", spf "no asynchronous exception ended a prepare of %S: it has no allocation or wait of its own" f) ]
        | point :: rest -> (
            match judge point with
            | `Found why ->
                let k = confirmed point in
                if k >= 2 then K.flag s "%s (reproduced %d/3)" why k else try_points true rest
            | `Ended -> try_points true rest
            | `Not_ended -> try_points ended rest)
      in
      try_points false points)

(* CODE-7, "a prepare that raises must have changed nothing", where a
   prepare raises of itself: on a device whose work faulted before rig
   learnt of it.  Rig may call prepare then (no call of its has raised
   Fault yet).  The fault function runs, the word is read for a while as
   rig reads it (no sleep, which would tell rig), then f, with no entry, is
   prepared on an image of its own (once more on a new image after 400 ms
   more of reads if it did not raise: the fault may come late on a loaded
   machine).  Judged only when that prepare raises Fault:
   - free Device memory 0.3 s later must be what it was before it;
   - what it left must not change what a prepare of f makes later: rig,
     having lost the device, stops it, and a new device of the same name
     gets an image of f's binary and one of another scratch binary (kit.
     scratch): a prepare of f there that makes nothing while one of the
     other function makes something is CODE-7 (a record of f as "being
     made" that the raise left behind, in the process rather than the
     device).  Measured only once a prepare raised Fault: the history
     without the fault would cost every run two more prepares. *)
let code7_prepare_after_fault (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"CODE-7" ~seed (fun s ->
      let fault = K.need_item "fault" P.kit.fault in
      let need = 4096 * (1 + K.int s 4) in
      let load dev =
        match P.kit.scratch with
        | Some _ -> K.scratch_image s dev need
        | None -> (K.binary_image s dev, K.need_item "scratch or spin" P.kit.spin)
      in
      let free dev =
        try K.free_bytes s dev
        with e -> raise (Skip (spf "setup: alloc on the faulted device raised %s" (Printexc.to_string e)))
      in
      let prepare (i : K.img) f = Prim.masked (fun () -> P.D.prepare i.image f) in
      (* What a prepare of f on [i] takes (0: nothing within 1 s). *)
      let made dev i f = Option.value ~default:0 (K.taken_by s dev ~shows:1 (fun () -> try prepare i f with _ -> ())) in
      let dev = K.open_first s in
      let h = K.kit_entry s dev "fault" fault in
      ignore (K.launch dev h "fault");
      (* The fault may come late on a loaded machine: a prepare that did not
         raise is tried again on a new image once more time has passed. *)
      let rec raised = function
        | [] -> raise (Skip (spf "prepares after a launch of the fault function %S did not raise: nothing to judge" fault))
        | ms :: later -> (
            ignore (K.poll_word dev ~ms (fun _ -> false));
            let i, f = load dev in
            let before = free dev in
            match prepare i f with
            | () -> K.unload_img i; raised later
            | exception P.D.Fault why -> (f, before, why)
            | exception e -> raise (Skip (spf "prepare of %S after the fault raised %s, not Fault (CODE-6's to judge)" f (Printexc.to_string e))))
      in
      let f, before, why = raised [ 100; 400 ] in
      (* what a prepare handed to a thread of its own may still do *)
      Thread.delay 0.3;
      let after = free dev in
      if after <> before then
        K.flag s "prepare of %S, after a launch of the fault function %S, raised Fault (%s) and changed free Device memory from %d to %d bytes" f fault why before after
      else if P.kit.scratch = None then
        Case.report_unjudged [ ("CODE-7", "without kit.scratch, no other function to compare a later prepare of f with") ]
      else begin
        (* rig lost the device: it stops it, then opens its name again *)
        dev.lost <- Some why;
        K.close s dev;
        let dev' = K.open_first s in
        let i', _ = load dev' in
        let later = made dev' i' f in
        let other_need = need + 4096 in
        let j, g = K.scratch_image s dev' other_need in
        let other = made dev' j g in
        if later <= 0 && other > 0 then
          K.flag s "prepare of %S, after a launch of the fault function %S, raised Fault (%s); on a new device of the same name, a prepare of %S on an image of the same binary made nothing, where one of %S (%d bytes of scratch) made %d bytes" f fault why f g other_need other
        else if other <= 0 then
          Case.report_unjudged [ ("CODE-7", spf "a prepare of %S makes nothing that free Device memory shows: what the raised prepare left for later ones is not seen" g) ]
      end)

let cases =
  [
    case "probe.CODE-1.image" "CODE-1" code1_image;
    case "probe.CODE-2.entry-once" "CODE-2" code2_entry;
    case "probe.CODE-3.no-memory" "CODE-3" code3_no_memory;
    case "probe.CODE-5.too-big" "CODE-5" code5_too_big;
    case "probe.CODE-6.prepare-silent" "CODE-6" code6_prepare;
    case "probe.CODE-7.prepare-idle" "CODE-7" code7_prepare_idle;
    case "probe.CODE-7.prepare-started" "CODE-7" code7_prepare_started;
    case "probe.CODE-7.prepare-raises" "CODE-7" (prepare_raises ~beside:false);
    case "probe.CODE-7.prepare-raises-beside" "CODE-7" (prepare_raises ~beside:true);
    case "probe.CODE-7.prepare-after-fault" "CODE-7" code7_prepare_after_fault;
  ]
