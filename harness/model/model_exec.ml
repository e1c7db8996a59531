(* Running a model program on a driver; see model_exec.mli. *)

open Model
module Prim = Rig_edge_primitives

type event = { phase : int; column : int; step : Model.step; t0 : float; t1 : float; answer : Model.answer }
type violation = { clause : string; detail : string; at : Model.sym; timing : bool }

type outcome = {
  events : event list;
  violation : violation option;
  extra : Case.finding list;
  applicable : string option;
  judged : string list;
}

let now = Unix.gettimeofday
let absent_function = "rig-conform: a function no image has"

module Make (P : Rig_edge.Package) = struct
  module K = Probes.Kit (P)
  module D = P.D

  (* What a device's submits share: the turn to submit and commit (rig
     gives values in submit order), and how many submits or commits are in
     flight or have started (a sleep that overlapped one is TIME-6's). *)
  type queue_turn = {
    turn : bool Atomic.t;
    inflight : int Atomic.t;
    started : int Atomic.t;
    mutable committed : int;  (* the last value committed (under the turn) *)
    mutable busy_until : float;  (* when the launches submitted so far end, at the latest *)
  }

  type value =
    | Dev of K.dev * queue_turn
    | Reg of K.reg * (Host_pages.t * nativeint) option  (* the host pages of a map_host region, and their address *)
    | Img of K.img
    | Ent of int64
    | Sub of int

  (* The names, shared by a phase's threads (lookups and declarations only:
     no driver call runs under it). *)
  let env : (sym, value) Hashtbl.t = Hashtbl.create 64
  let env_lock = Mutex.create ()
  let bind id v = Mutex.protect env_lock (fun () -> Hashtbl.replace env id v)
  let get id = Mutex.protect env_lock (fun () -> Hashtbl.find_opt env id)

  exception Not_run of string

  let dev id = match get id with Some (Dev (d, q)) -> (d, q) | _ -> raise (Not_run (Printf.sprintf "d%d is not open" id))
  let reg id = match get id with Some (Reg (r, h)) -> (r, h) | _ -> raise (Not_run (Printf.sprintf "r%d is not there" id))
  let img id = match get id with Some (Img i) -> i | _ -> raise (Not_run (Printf.sprintf "i%d is not loaded" id))
  let ent id = match get id with Some (Ent h) -> h | _ -> raise (Not_run (Printf.sprintf "e%d has no entry" id))
  let sub id = match get id with Some (Sub v) -> v | _ -> raise (Not_run (Printf.sprintf "v%d was not submitted" id))

  let function_of = function
    | Spin -> (match P.kit.spin with Some f -> f | None -> raise (Not_run "the kit has no spin"))
    | Fault_fn -> (match P.kit.fault with Some f -> f | None -> raise (Not_run "the kit has no fault"))
    | Hang_fn -> (match P.kit.hang with Some f -> f | None -> raise (Not_run "the kit has no hang"))
    | Absent_fn -> absent_function

  let own_word (kd : K.dev) = if kd.facts.own_word = None then raise (Not_run "the device has no word of its own")

  let host_bytes ba off len = String.init len (fun i -> Bigarray.Array1.get ba (off + i))

  (* room and grow as rig asks them, at most four times, then the turn to
     submit and commit. *)
  let take_turn q =
    while not (Atomic.compare_and_set q.turn false true) do
      Thread.yield ()
    done;
    Atomic.incr q.started;
    Atomic.incr q.inflight

  let give_turn q =
    Atomic.decr q.inflight;
    Atomic.set q.turn false

  let submit (kd : K.dev) q parts ~commit =
    let q_fns = kd.facts.queue in
    let rparts =
      List.map
        (function
          | Fill { reg = r; off; len; byte } -> K.fill_part (fst (reg r)) ~off ~len ~byte
          | Launch { ent = e; ms } -> Rig_edge.Launch { entry = ent e; args = [ Int64.of_int ms ] })
        parts
    in
    let s = Rig_edge.encode rparts in
    let rec ask asks growths grown =
      match K.call kd (fun () -> q_fns.room s) with
      | Rig_edge.Room -> `Room growths
      | Grow when grown -> `Regrow growths
      | Grow -> (
          match K.call kd (fun () -> D.grow kd.d) with
          | Grown -> if asks >= 4 then `Regrow (growths + 1) else ask (asks + 1) (growths + 1) true
          | Short n -> if asks >= 4 then `Short n else ask (asks + 1) growths false)
    in
    match ask 1 0 false with
    | `Regrow n -> Regrow n
    | `Short n -> No_room n
    | `Room growths ->
        take_turn q;
        Fun.protect
          ~finally:(fun () -> give_turn q)
          (fun () ->
            let v = kd.last + 1 in
            kd.keep <- s :: kd.keep;
            let ok = Prim.masked (fun () -> q_fns.submit s ~value:v) in
            kd.last <- v;
            if not ok then (
              kd.lost <- Some "failed submit";
              Submit_failed { value = v; why = "submit failed" })
            else if commit && not (Prim.masked q_fns.commit) then (
              kd.lost <- Some "failed commit";
              Submit_failed { value = v; why = "commit failed" })
            else (
              if commit then q.committed <- v;
              Submitted { value = v; growths }))

  let close s (kd : K.dev) q ~drain =
    (* idle: what was committed has run; what was only encoded never will *)
    let idle =
      drain && kd.lost = None && kd.facts.own_word <> None
      && (match K.wait_value s kd q.committed ~ms:6000 with Reached -> true | _ -> false)
    in
    let t0 = now () in
    (try Prim.masked (fun () -> D.stop kd.d ~fault:kd.lost) with _ -> ());
    kd.stopped <- true;
    let stop_ms = (now () -. t0) *. 1000. in
    if kd.facts.own_word = None then begin
      K.release_dev s kd;
      Closed { idle; stop_ms; word_after_stop = kd.last; settled = Some kd.last; late = None }
    end
    else
      let word_after_stop = D.signaled kd.d in
      (* idle, the word had to read the last value as stop returned: no use waiting *)
      let remaining = int_of_float (Float.max 0. (q.busy_until -. now ()) *. 1000.) in
      let w = if word_after_stop = kd.last || idle then word_after_stop else K.poll_word kd ~ms:(remaining + 1000) (fun w -> w = kd.last) in
      if w <> kd.last then begin
        K.leave s kd;
        Closed { idle; stop_ms; word_after_stop; settled = None; late = None }
      end
      else begin
        (* the word passes on once it reads the last value: nothing may land after *)
        (* until the work submitted so far would have ended, and 30 ms more (the
           probe of STOP-6 watches longer; a close costs this window each time) *)
        let ms = 30 + int_of_float (Float.max 0. (q.busy_until -. now ()) *. 1000.) in
        let after = K.poll_word kd ~ms (fun w -> w <> kd.last) in
        K.release_dev s kd;
        Closed { idle; stop_ms; word_after_stop; settled = Some w; late = (if after <> kd.last then Some after else None) }
      end

  (* A sleep judged late is asked twice more, the same way: the shortest
     counts, so that a loaded machine's one slow wake-up flags nothing. *)
  let rec sleep ?(tries = 3) (kd : K.dev) q ~seen:what ~still_ms =
    own_word kd;
    let w = D.signaled kd.d in
    let seen = match what with Current -> w | Other -> w + 1_000_000 in
    let started = Atomic.get q.started and busy = Atomic.get q.inflight > 0 in
    let q0 = Probes.queued_ms () in
    let t0 = now () in
    let r = try Ok (Prim.masked (fun () -> D.sleep kd.d ~seen ~still_ms)) with e -> Error e in
    let ms = (now () -. t0) *. 1000. in
    let cpu_wait_ms = Float.max 0. (Float.min ms (Probes.queued_ms () -. q0)) in
    let concurrent = busy || Atomic.get q.inflight > 0 || Atomic.get q.started <> started in
    let this = Slept { ms; cpu_wait_ms; concurrent } in
    (* TIME-4's bound holds the time less the CPU wait; TIME-3's "at once" the whole *)
    let judged, bound =
      match what with
      | Current -> (slept_ms, sleep_bound_ms still_ms)
      | Other -> ((function Slept { ms; _ } -> ms | _ -> 0.), other_bound_ms still_ms)
    in
    match r with
    | Ok () when judged this > bound && tries > 1 -> (
        match sleep ~tries:(tries - 1) kd q ~seen:what ~still_ms with
        | Slept again as a ->
            let shorter = if judged a < judged this then a else this in
            (match shorter with
             | Slept s -> Slept { s with concurrent = concurrent && again.concurrent }
             | other -> other)
        | other -> other)
    | Ok () -> this
    | Error (D.Fault why) ->
        if kd.lost = None then kd.lost <- Some why;
        Faulted why
    | Error e -> Raised (Printexc.to_string e)

  let exec s { id; cmd } =
    match cmd with
    | Open o -> (
        match List.nth_opt (K.openers ()) o with
        | None -> Skipped (Printf.sprintf "no opener %d" o)
        | Some op ->
            let kd = K.open_dev s op in
            bind id (Dev (kd, { turn = Atomic.make false; inflight = Atomic.make 0; started = Atomic.make 0; committed = 0; busy_until = 0. }));
            Made)
    | Close { dev = d; drain } ->
        let kd, q = dev d in
        close s kd q ~drain
    | Alloc { dev = d; mem; size } -> (
        match K.alloc s (fst (dev d)) mem size with
        | Some r ->
            bind id (Reg (r, None));
            Made
        | None -> Nothing)
    | Free r ->
        K.free_reg (fst (reg r));
        Made
    | Map_peer { dev = d; reg = r } ->
        let m = K.map_peer s (fst (dev d)) (fst (reg r)) in
        bind id (Reg (m, None));
        Made
    | Map_host { dev = d; size; over } ->
        let kd, _ = dev d in
        if not kd.facts.maps_host then raise (Not_run "the device does not declare maps_host");
        let ba, addr =
          match over with
          | Some o -> ( match reg o with _, Some pages -> pages | _, None -> raise (Not_run "not a host mapping"))
          | None ->
              let addr, ba = K.host_pages s (Probes.round_up size 4096) in
              Bigarray.Array1.fill ba '\000';
              (ba, addr)
        in
        let m = K.map_host s kd addr size in
        bind id (Reg (m, Some (ba, addr)));
        Made
    | Write { reg = r; off; bytes } -> (
        match reg r with
        | _, Some (ba, _) ->
            String.iteri (fun i c -> Bigarray.Array1.set ba (off + i) c) bytes;
            Made
        | kr, None -> if K.write kr ~off bytes then Made else Unreachable)
    | Read { reg = r; off; len } -> (
        let kr, host = reg r in
        let host = Option.map (fun (ba, _) -> host_bytes ba off len) host in
        match (K.read kr ~off ~len, host) with
        | Some got, host -> Bytes { got; host }
        | None, Some h -> Bytes { got = h; host = None }
        | None, None -> Unreachable)
    | Load { dev = d; refused } -> (
        let bin =
          if refused then match P.kit.refused_binary with Some b -> b | None -> raise (Not_run "the kit has no refused_binary")
          else P.kit.binary
        in
        match K.image s (fst (dev d)) bin with
        | Ok i ->
            bind id (Img i);
            Made
        | Error why -> Refused why)
    | Entry { img = i; role } -> (
        let f = function_of role in
        match K.entry (img i) f with
        | Rig_edge.Entry h ->
            bind id (Ent h);
            Entry_answer (`Entry h)
        | Absent -> Entry_answer `Absent
        | No_memory n -> Entry_answer (`No_memory n))
    | Prepare { img = i; role } ->
        let im = img i in
        let f = function_of role in
        K.call im.idev (fun () -> D.prepare im.image f);
        Made
    | Commit d ->
        let kd, q = dev d in
        take_turn q;
        Fun.protect ~finally:(fun () -> give_turn q) (fun () ->
            if Prim.masked kd.facts.queue.commit then (
              q.committed <- kd.last;
              Made)
            else (
              kd.lost <- Some "failed commit";
              Submit_failed { value = kd.last; why = "commit failed" }))
    | Submit { dev = d; parts; commit } -> (
        let kd, q = dev d in
        let spins = List.fold_left (fun a -> function Launch { ms; _ } -> a + ms | Fill _ -> a) 0 parts in
        q.busy_until <- Float.max q.busy_until (now ()) +. (float_of_int spins /. 1000.);
        match submit kd q parts ~commit with
        | Submitted { value; _ } as a ->
            bind id (Sub value);
            a
        | Submit_failed { value; _ } as a ->
            bind id (Sub value);
            a
        | a -> a)
    | Wait { dev = d; sub = v } -> (
        let kd, _ = dev d in
        own_word kd;
        match K.wait_value s kd (sub v) ~ms:6000 with
        | Reached -> Reached (D.signaled kd.d)
        | Timed_out w -> Timed_out w
        | Fault_seen why -> Faulted why)
    | Sleep { dev = d; seen; still_ms } ->
        let kd, q = dev d in
        sleep kd q ~seen ~still_ms
    | Signaled d ->
        let kd, _ = dev d in
        own_word kd;
        Word (D.signaled kd.d)
    | Peer { dev = a; other = b } -> Bool (D.peer (fst (dev a)).d (fst (dev b)).d)

  let answer_of s step =
    try exec s step with
    | Not_run why -> Skipped why
    | D.Fault why -> Faulted why
    | e -> Raised (Printexc.to_string e)

  let run program =
    Hashtbl.reset env;
    let events = ref [] and violation = ref None and judged = ref [] in
    let start = now () in
    let ms () = (now () -. start) *. 1000. in
    let judge st ev =
      events := ev :: !events;
      judged := List.sort_uniq compare (Model.judged st ev.step ev.answer @ !judged);
      (if !violation = None then
         match postcond st ev.step ev.answer with
         | Some (clause, detail) ->
             violation := Some { clause; detail; at = ev.step.id; timing = Model.rests_on_time ev.answer }
         | None -> ());
      next_state st ev.step ev.answer
    in
    let body s =
      let _ =
        List.fold_left
          (fun (st, k) phase ->
            if !violation <> None then (st, k + 1)
            else
              match phase with
              | [ step ] ->
                  let t0 = ms () in
                  let answer = if precond st step then answer_of s step else Skipped "its precondition no longer holds" in
                  (judge st { phase = k; column = 0; step; t0; t1 = ms (); answer }, k + 1)
              | steps ->
                  let runnable = List.map (fun step -> (step, precond st step)) steps in
                  let cells =
                    List.mapi
                      (fun column (step, ok) ->
                        let cell = ref None in
                        let work () =
                          let t0 = ms () in
                          let answer = if ok then answer_of s step else Skipped "its precondition no longer holds" in
                          cell := Some { phase = k; column = column + 1; step; t0; t1 = ms (); answer }
                        in
                        (Thread.create work (), cell))
                      runnable
                  in
                  let evs = List.map (fun (t, cell) -> Thread.join t; Option.get !cell) cells in
                  (* In the order they ended, but what only looks (signaled,
                     peer, sleep, read) after what changes: a signaled that
                     ran beside a submit may read its value before that
                     submit returned. *)
                  let looks e = match e.step.cmd with Signaled _ | Peer _ | Sleep _ | Read _ -> 1 | _ -> 0 in
                  let evs = List.stable_sort (fun a b -> compare (looks a, a.t1) (looks b, b.t1)) evs in
                  (List.fold_left judge st evs, k + 1))
          (initial, 0) program
      in
      ()
    in
    let result = K.run ~clause:"MODEL" ~seed:0 body in
    let extra, applicable =
      match result with
      | Case.Ran fs -> (fs, None)
      | Case.Not_applicable why -> ([], Some why)
    in
    { events = List.rev !events; violation = !violation; extra; applicable; judged = !judged }
end
