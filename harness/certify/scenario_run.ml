(* The scenario interpreter; see scenario_run.mli. *)

open Case
module S = Scenario_syntax

(* Where the bundled scenarios are, seen from the executable: installed
   (make install: PREFIX/bin and PREFIX/share/rig-conform/scenarios), or
   the checkout it was built in (_build/default/harness/certify/main.exe,
   or dune's _build/install/default/bin).  Never the current directory: a
   driver's own project may have a scenarios folder of its own. *)
let bundled_candidates () =
  let bin = Filename.dirname Sys.executable_name in
  let up n = List.fold_left (fun d _ -> Filename.dirname d) bin (List.init n Fun.id) in
  [ Filename.concat (up 1) "share/rig-conform/scenarios"; Filename.concat (up 4) "scenarios" ]

let directory () =
  match Sys.getenv_opt "RIG_CONFORM_SCENARIOS" with
  | Some d when Sys.file_exists d && Sys.is_directory d -> Ok d
  | Some d -> Error (Printf.sprintf "RIG_CONFORM_SCENARIOS=%s is not a directory" d)
  | None -> (
      let found = List.filter (fun d -> Sys.file_exists d && Sys.is_directory d) (bundled_candidates ()) in
      match found with
      | d :: _ -> Ok d
      | [] ->
          Error
            (Printf.sprintf "cannot find the bundled scenarios (looked in %s): set RIG_CONFORM_SCENARIOS to rig-conform's scenarios folder"
               (String.concat ", " (bundled_candidates ()))))

(* The interpreter cannot go on: a name whose statement failed, say. *)
exception Broken of string

let broken fmt = Printf.ksprintf (fun s -> raise (Broken s)) fmt

(* An open the scenario needed ended because the driver's make raised (a
   device busy, a thread refused): what follows judges nothing. *)
exception Open_refused of string

(* A statement ended otherwise than expected because the driver's locate
   or peer raised inside it: that is LOCK-5's or LOCK-6's, judged by
   probe.locate-peer-quiet (which can tell a check of rig_holds from a
   fault), not a failure of the scenario's clauses. *)
exception Quiet_call_raised of string

(* The first locate or peer that raised among [events] after [seq]. *)
let quiet_call_raised ~after (events : Validate.event list) =
  List.find_map
    (fun (e : Validate.event) ->
      match e.phase with
      | Raise r when e.seq > after && (e.fn = "locate" || e.fn = "peer") -> Some (e.fn, r)
      | _ -> None)
    events

module Interp (P : Rig_edge.Package) = struct
  module E = Scenarios.Env (P)
  module R = E.R

  type value =
    | Dev of R.device
    | Buf of R.buffer
    | Img of R.image * string option  (* its scratch function, for role scratch *)
    | Ent of int64 option
    | Sub of int
    | Thread of Thread.t * string Atomic.t * bool Atomic.t  (* outcome, ended *)

  let names : (string, value) Hashtbl.t = Hashtbl.create 16
  let host_pages = ref []  (* kept alive: a driver may map them until the end *)
  let bind name v = Hashtbl.replace names name v

  let lookup name =
    match Hashtbl.find_opt names name with
    | Some v -> v
    | None -> broken "%s is not there: the statement that makes it did not succeed" name

  let dev n = match lookup n with Dev d -> d | _ -> broken "%s is not a device" n
  let buf n = match lookup n with Buf b -> b | _ -> broken "%s is not a buffer" n
  let img n = match lookup n with Img (i, f) -> (i, f) | _ -> broken "%s is not an image" n
  let kit = P.kit
  let need what = function Some x -> x | None -> raise (Scenarios.Needs what)

  let word = function S.Word w -> w | a -> broken "expected a name, found %s" (S.string_of_arg a)
  let int = function S.Int n -> n | a -> broken "expected an integer, found %s" (S.string_of_arg a)

  let memory = function
    | "device" -> Rig_edge.Device
    | "mapped" -> Mapped
    | "pinned" -> Pinned
    | k -> broken "no memory kind %s" k

  let function_of role scratch =
    match role with
    | "spin" -> need "kit.spin" kit.spin
    | "fault" -> need "kit.fault" kit.fault
    | "hang" -> need "kit.hang" kit.hang
    | "scratch" -> ( match scratch with Some f -> f | None -> broken "entry scratch of an image not loaded as scratch N")
    | "absent" -> "rig-conform: a function no image has"
    | role -> raise (Scenarios.Needs ("a kit function for role " ^ role))

  let configure kvs =
    let get key = List.assoc_opt key kvs in
    let num key = Option.map int_of_string (get key) in
    let flag key = Option.map (fun v -> v = "true") (get key) in
    Fake.configure ?device_bytes:(num "device_bytes") ?mapped_bytes:(num "mapped_bytes")
      ?pinned_bytes:(num "pinned_bytes") ?queue_slots:(num "queue_slots") ?may_block:(flag "may_block")
      ?host_addresses:(flag "host_addresses") ?maps_host:(flag "maps_host") ()

  let inject = function
    | [ S.Word fn; S.Int nth; S.Word "fault"; S.Str why ] -> Fake.inject ~fn ~nth (`Fault why)
    | [ S.Word fn; S.Int nth; S.Word "raise"; S.Str text ] -> Fake.inject ~fn ~nth (`Raise (Failure text))
    | [ S.Word fn; S.Int nth; S.Word "fail" ] -> Fake.inject ~fn ~nth `Fail
    | [ S.Word fn; S.Int nth; S.Word "answer" ] -> (
        try Fake.inject ~fn ~nth `Answer with Invalid_argument why -> broken "%s" why)
    | _ -> broken "malformed inject"

  (* The parts of a submit, split at its separators. *)
  let parts args =
    let rec split cur acc = function
      | [] -> List.rev (List.rev cur :: acc)
      | S.Sep :: rest -> split [] (List.rev cur :: acc) rest
      | a :: rest -> split (a :: cur) acc rest
    in
    split [] [] args
    |> List.map (function
         | [ S.Word "fill"; S.Word b; off; len; byte ] -> R.Fill (buf b, int off, int len, int byte)
         | [ S.Word "copy"; S.Word s; soff; S.Word d; doff; len ] -> R.Copy (buf s, int soff, buf d, int doff, int len)
         | S.Word "launch" :: S.Word e :: args ->
             let h = match lookup e with Ent (Some h) -> h | _ -> broken "%s is not an entry that exists" e in
             R.Launch (h, List.map (function S.Int n -> R.Int n | a -> R.Buf (buf (word a))) args)
         | _ -> broken "malformed part")

  let threads () = Hashtbl.fold (fun _ v acc -> match v with Thread (t, o, e) -> (t, o, e) :: acc | _ -> acc) names []

  (* Runs one statement; its outcome is what it raised, or ok. *)
  let rec exec verb args =
    let ok () = "ok" in
    match (verb, args) with
    | "configure", kvs -> configure (List.map (function S.Kv (k, v) -> (k, v) | _ -> broken "configure") kvs); ok ()
    | "inject", args -> inject args; ok ()
    | "open", [ S.Word n; S.Int i ] ->
        (try bind n (Dev (E.open_ i)) with Exit -> raise (Scenarios.Needs (Printf.sprintf "%d devices" (i + 1))));
        ok ()
    | "close", [ S.Word d ] -> E.close (dev d); ok ()
    | "alloc", [ S.Word n; S.Word d; S.Word k; S.Int size ] -> bind n (Buf (R.alloc (dev d) (memory k) size)); ok ()
    | "free", [ S.Word b ] -> R.free (buf b); ok ()
    | "map_peer", [ S.Word n; S.Word d; S.Word b ] -> bind n (Buf (R.map_peer (dev d) (buf b))); ok ()
    | "map_host", [ S.Word n; S.Word d; S.Int size ] ->
        let pages = (size + 4095) / 4096 * 4096 in
        let addr, mem = Host_pages.alloc pages in
        host_pages := mem :: !host_pages;
        bind n (Buf (R.map_host (dev d) addr size));
        ok ()
    | "dma", [ S.Word b; S.Str fn ] -> ( match R.dma (buf b) ~fn with Ok _ -> ok () | Error _ -> "error")
    | "write", [ S.Word b; S.Int off; S.Str s ] -> R.write (buf b) off s; ok ()
    | "read", [ S.Word b; S.Int off; S.Str s ] -> if R.read (buf b) off (String.length s) = s then ok () else "error"
    | "load", S.Word n :: S.Word d :: what -> (
        let bin, scratch =
          match what with
          | [ S.Word "kit" ] -> (kit.binary, None)
          | [ S.Word "refused" ] -> (need "kit.refused_binary" kit.refused_binary, None)
          | [ S.Word "scratch"; S.Int size ] ->
              let bin, f = (need "kit.scratch" kit.scratch) size in
              (bin, Some f)
          | _ -> broken "malformed load"
        in
        match R.load (dev d) bin with Ok i -> bind n (Img (i, scratch)); ok () | Error _ -> "error")
    | "unload", [ S.Word i ] -> R.unload (fst (img i)); ok ()
    | "entry", [ S.Word n; S.Word i; S.Word role ] ->
        let im, scratch = img i in
        let h = E.entry im (function_of role scratch) in
        bind n (Ent h);
        if h = None then "absent" else ok ()
    | "prepare", [ S.Word i; S.Word role ] ->
        let im, scratch = img i in
        R.prepare im (function_of role scratch);
        ok ()
    | "submit", S.Word n :: S.Word d :: rest -> bind n (Sub (R.submit (dev d) (parts rest))); ok ()
    | "wait", [ S.Word d; S.Word s ] ->
        (match lookup s with Sub v -> R.wait (dev d) v | _ -> broken "%s is not a submission" s);
        ok ()
    | "spawn", S.Word n :: S.Word verb :: args ->
        let outcome = Atomic.make "running" and ended = Atomic.make false in
        let t =
          Thread.create
            (fun () ->
              Fun.protect
                ~finally:(fun () -> Atomic.set ended true; E.V.poke ())
                (fun () ->
                  Atomic.set outcome
                    (try attempt verb args with
                     | Broken why -> "broken (" ^ why ^ ")"
                     | Scenarios.Needs what -> "not applicable (needs " ^ what ^ ")")))
            ()
        in
        bind n (Thread (t, outcome, ended));
        ok ()
    | "await_call", [ S.Word fn ] ->
        E.V.await_in_flight ~unless:(fun () -> List.for_all (fun (_, _, e) -> Atomic.get e) (threads ())) fn;
        ok ()
    | "join", [ S.Word n ] -> (
        match lookup n with Thread (t, outcome, _) -> Thread.join t; Atomic.get outcome | _ -> broken "%s is not a thread" n)
    | verb, _ -> broken "the interpreter does not know %s with these arguments" verb

  (* A statement's outcome: what its exception means, in the words of "=>". *)
  and attempt verb args =
    match exec verb args with
    | outcome -> outcome
    | exception (Scenarios.Needs _ as e) -> raise e
    | exception (Broken _ as e) -> raise e
    | exception (Validate.Abandoned _ as e) -> raise e
    | exception Rig.Device_lost _ -> "lost"
    | exception Rig.Out_of_memory _ -> "out_of_memory"
    | exception Invalid_argument _ -> "invalid_argument"
    | exception _ -> "error"

  (* The fuzzer's mutant for the schedules that follow (schedule_mutant). *)
  let schedule_mutant = ref (0, "none")

  (* A run of consecutive schedule lines: one fuzz input, run by the fuzzer's
     interpreter on its own fake device; its violation is a finding under the
     clause it names (a name that is no clause, DEC-QUEUE, goes under the
     scenario's first clause). *)
  let schedule ~file ~clause (first : S.stmt) hex acc =
    (* The parser let only pairs of hex digits through. *)
    let bytes = String.init (String.length hex / 2) (fun i -> Char.chr (int_of_string ("0x" ^ String.sub hex (2 * i) 2))) in
    let trace = match Sys.getenv_opt "RIG_FUZZ_TRACE" with Some ("" | "0") | None -> false | Some _ -> true in
    match Schedule.run ~trace ~mutant:(fst !schedule_mutant) bytes with
    | Error why -> broken "the schedule's fake could not be set up: %s" why
    | Ok None -> ()
    | Ok (Some v) ->
        let id, prefix = if Catalog.find v.clause = None then (clause, v.clause ^ ": ") else (v.clause, "") in
        acc :=
          finding id "%s:%d: schedule (%d bytes%s): VIOLATION %s at step %d: %s%s" file first.line (String.length bytes)
            (if fst !schedule_mutant = 0 then "" else ", mutant " ^ snd !schedule_mutant)
            v.clause v.step prefix v.message
          :: !acc

  (* [acc] gets the fuzzer's findings, [unmet] the statements whose
     outcome was not the expected one (under the first clause). *)
  let run ~file (t : S.t) acc unmet =
    let clause = List.hd t.clauses in
    let finish () =
      E.close_all ();
      List.iter (fun (th, _, _) -> Thread.join th) (threads ())
    in
    let rec go = function
      | [] -> ()
      | (st : S.stmt) :: rest when st.verb = "schedule" ->
          let rec take acc = function
            | ({ S.verb = "schedule"; args = [ S.Str h ]; _ } : S.stmt) :: rest -> take (h :: acc) rest
            | rest -> (String.concat "" (List.rev acc), rest)
          in
          let hex, rest = take [] (st :: rest) in
          (try schedule ~file ~clause st hex acc with Broken why -> broken "%s:%d: %s" file st.line why);
          go rest
      | { S.verb = "schedule_mutant"; args = [ a ]; _ } :: rest ->
          (* load checked the name *)
          schedule_mutant :=
            (match a with S.Int n -> (n, string_of_int n) | a -> (Option.get (Schedule.mutant_code (word a)), word a));
          go rest
      | st :: rest ->
          let expected = Option.value st.expect ~default:"ok" in
          let after = List.fold_left (fun m (e : Validate.event) -> max m e.seq) (-1) (E.V.events ()) in
          (match attempt st.verb st.args with
          | outcome when outcome <> expected -> (
              let events = E.V.events () in
              match (st.verb, expected, Scenarios.make_raised events, quiet_call_raised ~after events) with
              | "open", "ok", Some raised, _ ->
                  raise
                    (Open_refused
                       (Printf.sprintf "%s:%d: %s ended %s: the driver's make raised %s" file st.line (S.string_of_stmt st)
                          outcome raised))
              | _, _, _, Some (fn, raised) ->
                  raise
                    (Quiet_call_raised
                       (Printf.sprintf "%s:%d: %s ended %s: the driver's %s raised %s (LOCK-5's or LOCK-6's)" file st.line
                          (S.string_of_stmt st) outcome fn raised))
              | _ ->
                  unmet :=
                    finding clause "%s:%d: %s ended %s, not %s" file st.line (S.string_of_stmt st) outcome expected
                    :: !unmet)
          | _ -> ()
          | exception Broken why -> broken "%s:%d: %s" file st.line why);
          go rest
    in
    Fun.protect ~finally:finish (fun () -> go t.stmts)
end

(* The loaded scenarios that say `needs fake` (for certify --list). *)
let fake_only : (string, unit) Hashtbl.t = Hashtbl.create 8

let needs_fake name = Hashtbl.mem fake_only name

(* The kit roles of the scenario's entries, spawned statements included. *)
let entry_roles (t : S.t) =
  List.concat_map
    (fun (st : S.stmt) ->
      match (st.verb, st.args) with
      | "entry", [ _; _; S.Word role ] | "spawn", [ _; S.Word "entry"; _; _; S.Word role ] -> [ role ]
      | _ -> [])
    t.stmts

(* Scenarios that launch nothing but the kit's hang take the short hang
   bound (Scenarios.quick_hang_ms). *)
let hang_bound (t : S.t) =
  match entry_roles t with
  | [] -> Scenarios.hang_ms
  | roles -> if List.for_all (( = ) "hang") roles then Scenarios.quick_hang_ms else Scenarios.hang_ms

(* A scenario that drives the driver directly is the model's (a shrunk
   counterexample): it runs as the model runs a program. *)
let case ~file (t : S.t) =
  let name = "scn." ^ Filename.remove_extension (Filename.basename file) in
  if t.needs_fake then Hashtbl.replace fake_only name ();
  let run (module P : Rig_edge.Package) ~seed:_ =
    if t.needs_fake && P.name <> Fake.name then Not_applicable "needs the fake driver's knobs"
    else if t.drives_driver then Model_cases.replay_scenario (module P) ~file ~clauses:t.clauses t.stmts
    else
      let module I = Interp (P) in
      I.E.bound_hangs (hang_bound t);
      let acc = ref [] and unmet = ref [] in
      (* A statement's unmet expectation comes after what rig broke, when
         the validation layer saw a guarantee broken: it rests on that
         (a submission rig gave up on too early did not end ok), and is
         not the first clause's to fail. *)
      let seen ?could_not_go_on () =
        Case.report_calls (I.E.V.calls ());
        let violations = List.map Scenarios.of_violation (I.E.V.finish ()) in
        let unmet =
          List.rev !unmet
          @ Option.to_list (Option.map (fun why -> finding (List.hd t.clauses) "the scenario could not go on: %s" why) could_not_go_on)
        in
        if !Case.injecting then violations
        else
          match violations with
          | broken :: _ when unmet <> [] ->
              Case.report_unjudged
                (List.map
                   (fun (f : Case.finding) ->
                     (f.clause, Printf.sprintf "%s; it rests on rig keeping %s, which the validation layer found broken: %s" f.detail broken.clause broken.detail))
                   unmet);
              List.rev !acc @ violations
          | _ -> List.rev !acc @ unmet @ violations
      in
      match I.run ~file t acc unmet with
      | () | (exception Validate.Abandoned _) -> Ran (seen ())
      | exception Scenarios.Needs what -> Not_applicable ("needs " ^ what)
      | exception _ when !Case.injecting -> Ran (seen ())
      | exception Broken why -> Ran (seen ~could_not_go_on:why ())
      | exception (Open_refused why | Quiet_call_raised why) -> (
          (* as Scenarios.case does after the driver's failure *)
          match seen () with [] -> Not_applicable ("not judged: " ^ why) | fs -> Ran fs)
      | exception e -> Ran (seen () @ [ finding (List.hd t.clauses) "%s raised %s" file (Printexc.to_string e) ])
  in
  { name; clauses = t.clauses; run }

(* The parser takes any word after schedule_mutant; the fuzzer's mutants are
   known here. *)
let check_mutants ~file (t : S.t) =
  match
    List.find_opt
      (fun (st : S.stmt) ->
        match (st.verb, st.args) with "schedule_mutant", [ S.Word w ] -> Schedule.mutant_code w = None | _ -> false)
      t.stmts
  with
  | Some ({ args = [ S.Word w ]; cols = [ col ]; _ } as st) ->
      Error
        (Printf.sprintf "%s:%d:%d: expected a mutant of the fuzzer (%s, or a code), found '%s'" file st.line col
           (String.concat ", " Schedule.mutant_names) w)
  | _ -> Ok ()

(* The parser checks the shape of a clause ID; the catalog is known here. *)
let check_clauses ~file (t : S.t) =
  match List.find_opt (fun (id, _) -> Catalog.find id = None) (List.combine t.clauses t.clauses_at) with
  | Some (id, (line, col)) ->
      Error (Printf.sprintf "%s:%d:%d: expected a clause ID of spec/clauses.tsv, found '%s'" file line col id)
  | None -> Ok ()

(* Scenario_syntax.parse_file reads only regular files of a bounded size,
   without ever blocking on the open: a FIFO, /dev/zero behind a link or a
   huge file named *.scn is an error naming the file, not a hang.  Messages
   show the file name safe for a terminal (Safe_text.terminal); the case
   keeps the name as it is, for its replay line. *)
let load_file file =
  let shown = Safe_text.terminal file in
  Result.bind (S.parse_file file) (fun t ->
      Result.bind (check_clauses ~file:shown t) (fun () -> Result.map (fun () -> case ~file t) (check_mutants ~file:shown t)))

let load dir =
  match Sys.readdir dir with
  | exception Sys_error _ -> Ok []
  | entries ->
      let files = Array.to_list entries |> List.filter (fun f -> Filename.check_suffix f ".scn") |> List.sort compare in
      List.fold_left
        (fun acc f ->
          Result.bind acc (fun cases ->
              let file = Filename.concat dir f in
              let shown = Safe_text.terminal file in
              Result.bind (S.parse_file file) (fun t ->
                  Result.bind (check_clauses ~file:shown t) (fun () ->
                      Result.map (fun () -> cases @ [ case ~file t ]) (check_mutants ~file:shown t)))))
        (Ok []) files
