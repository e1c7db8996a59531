(* The model.* cases; see model_cases.mli. *)

let default_sequences = 8
let phases = 30
let spf = Printf.sprintf

let sequences () =
  match Option.bind (Sys.getenv_opt "RIG_CONFORM_SEQUENCES") int_of_string_opt with
  | Some n when n > 0 -> n
  | _ -> default_sequences

let out_dir () = Option.value (Sys.getenv_opt "RIG_CONFORM_COUNTEREXAMPLES") ~default:"out/counterexamples"

let rec mkdir_p d =
  if d <> "" && d <> "." && d <> "/" && not (Sys.file_exists d) then (
    mkdir_p (Filename.dirname d);
    try Sys.mkdir d 0o755 with Sys_error _ -> ())

let write_file path text =
  try Out_channel.with_open_bin path (fun oc -> output_string oc text); true with Sys_error _ -> false

(* The steps of a counterexample on one line, for the report's evidence. *)
let one_line (o : Model_exec.outcome) =
  List.map
    (fun (e : Model_exec.event) ->
      let mark = match o.violation with Some v when v.at = e.step.id -> " <-- " ^ v.clause | _ -> "" in
      let where = if e.column = 0 then "" else spf "[thread %d] " e.column in
      spf "%s%s => %s%s" where (Model_show.statement e.step) (Model.string_of_answer e.answer) mark)
    o.events
  |> String.concat "; "

(* Shrink budget: candidate runs, and seconds (RIG_CONFORM_SHRINK_SECONDS;
   0: report the sequence as drawn). *)
let budget = 200

let shrink_seconds () =
  match Option.bind (Sys.getenv_opt "RIG_CONFORM_SHRINK_SECONDS") float_of_string_opt with
  | Some s when s >= 0. -> s
  | _ -> 30.

(* Programs are drawn until this many seconds have gone by, at least one:
   with the shrinking's 30 s, a run stays well inside the certifier's
   120-s floor of a case's limit on a slow driver.  How many ran is said
   on stdout. *)
let drawing_seconds = 45.

(* The whole run stays under this (the certifier's floor of a case's limit
   is 120 s): shrinking gets what is left, at most its own bound. *)
let run_seconds = 95.

(* The programs wait for work through signaled, and then read what the
   work wrote: every other clause's violation holds only if signaled reads
   the word.  Before one is reported, TIME-1's probe checks that premise
   (work seen done in memory, the word read by signaled alone, never ahead
   of the work); if signaled does not read the word, that is the finding. *)
let rests_on_signaled clause = clause <> "TIME-1"


let driver_case =
  let run (module P : Rig_edge.Package) ~seed =
    let module E = Model_exec.Make (P) in
    let n = sequences () in
    let t0 = Unix.gettimeofday () in
    let judged = ref [] in
    let say_unjudged ran =
      Case.report_unjudged
        (List.filter_map
           (fun c -> if List.mem c !judged then None else Some (c, spf "no step of the %d program(s) that ran gave it anything to judge" ran))
           Model.clauses)
    in
    let rec go i =
      if i >= n || (i > 0 && Unix.gettimeofday () -. t0 > drawing_seconds && Sys.getenv_opt "RIG_CONFORM_SEQUENCES" = None) then (
        if i < n then Printf.printf "model.driver: %d of %d programs ran within %.0f s\n" i n drawing_seconds;
        say_unjudged i;
        Case.Ran [])
      else
        let program = Model_gen.program (Random.State.make [| seed; i |]) ~phases in
        let o = E.run program in
        judged := List.sort_uniq compare (o.judged @ !judged);
        if o.violation <> None then say_unjudged (i + 1);
        (* What the session's own watchdogs saw (a sleep or stop past 9 s):
           in a certification the call watch ends such a run first. *)
        List.iter (fun (f : Case.finding) -> Printf.printf "model.driver: the session: %s\n" f.detail) o.extra;
        if Sys.getenv_opt "RIG_CONFORM_MODEL_TRACE" <> None then
          print_string (Model_show.table ~title:(spf "sequence %d of seed %d" i seed) o);
        (* asked once, and only of a violation that rests on it *)
        let premise = lazy (Word_probes.signaled_wrong (module P) ~seed) in
        match (o.applicable, o.violation) with
        | Some why, _ -> Case.Not_applicable why
        | None, None -> go (i + 1)
        | None, Some v when rests_on_signaled v.clause && Lazy.force premise <> None ->
            let f = Option.get (Lazy.force premise) in
            Case.Ran
              [ Case.finding "TIME-1" "%s (found while judging the model's %s in sequence %d, which rests on signaled reading the word: %s)"
                  f.detail v.clause i v.detail ]
        | None, Some v ->
            let fails p = match (E.run p).violation with Some w -> w.clause = v.clause | None -> false in
            (* nothing after the violating phase ran: those go first, for free *)
            let upto = match List.find_opt (fun (e : Model_exec.event) -> e.step.id = v.at) o.events with Some e -> e.phase | None -> max_int in
            let program = List.filteri (fun k _ -> k <= upto) program in
            let small, runs = Model_shrink.shrink ~fails ~budget
                ~seconds:(Float.min (shrink_seconds ()) (Float.max 0. (run_seconds -. (Unix.gettimeofday () -. t0))))
                program
            in
            let so = E.run small in
            let small, so = if so.violation <> None then (small, so) else (program, o) in
            (* the steps the last run skipped did nothing: without them, and
               with ids in program order, if it still fails so *)
            let skipped = List.filter_map (fun (e : Model_exec.event) -> match e.answer with Model.Skipped _ -> Some e.step.id | _ -> None) so.events in
            let tidy = Model_shrink.renumber (List.filter (( <> ) []) (List.map (List.filter (fun (s : Model.step) -> not (List.mem s.id skipped))) small)) in
            let to_ = E.run tidy in
            let small, so = match to_.violation with Some w when w.clause = v.clause -> (tidy, to_) | _ -> (small, so) in
            let v = Option.get so.violation in
            let title =
              spf "model.driver on %s, seed %d, sequence %d: %s (shrunk from %d steps to %d in %d runs)" P.name seed i
                v.clause (Model_shrink.size program) (Model_shrink.size small) runs
            in
            let table = Model_show.table ~title so in
            print_string table;
            let dir = out_dir () in
            mkdir_p dir;
            let base = Filename.concat dir (spf "%s-seed%d-seq%d-%s" P.name seed i v.clause) in
            let scn = Model_show.scenario ~name:(spf "model: %s, seed %d, sequence %d" P.name seed i) ~clause:v.clause small so.events in
            let written =
              write_file (base ^ ".txt") table && write_file (base ^ ".scn") scn
              && write_file (base ^ ".trace.json") (Model_show.chrome_trace so)
            in
            let files = if written then spf "; counterexample in %s.{txt,scn,trace.json}" base else "" in
            let finding = if v.timing then Case.finding else Case.value_finding in
            Case.Ran
              [ finding v.clause "%s (model sequence %d, shrunk from %d steps to %d%s): %s" v.detail i
                  (Model_shrink.size program) (Model_shrink.size small) files (one_line so) ]
    in
    go 0
  in
  { Case.name = "model.driver"; clauses = Model.clauses; run }

let cases = [ driver_case ]

let replay_scenario (module P : Rig_edge.Package) ~file ~clauses stmts =
  let module E = Model_exec.Make (P) in
  match Model_show.program_of_scenario stmts with
  | Error why -> Case.Ran [ Case.finding (List.hd clauses) "%s: %s" file why ]
  | Ok program -> (
      let o = E.run program in
      print_string (Model_show.table ~title:file o);
      match (o.applicable, o.violation) with
      | Some why, _ -> Case.Not_applicable why
      | None, None -> Case.Ran []
      | None, Some v ->
          let clause = if List.mem v.clause clauses then v.clause else List.hd clauses in
          Case.Ran [ Case.finding clause "%s: %s%s" file v.detail (if clause = v.clause then "" else " (" ^ v.clause ^ ")") ])
