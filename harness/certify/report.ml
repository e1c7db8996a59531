(* Verdicts and reports; see report.mli. *)

type verdict = Pass | Fail | Na | Unchecked

let verdict_name = function Pass -> "pass" | Fail -> "fail" | Na -> "n/a" | Unchecked -> "unchecked"

type line = { clause : Catalog.clause; verdict : verdict; evidence : string; repro : string option }

let checks (c : Catalog.clause) (case : Case.t) = List.mem c.id case.clauses

(* The clause that bounds a call, for a call that never returned: a
   hanging sleep is TIME-4's, a hanging stop STOP-2's, whatever the case
   checked.  A hang of another function fails the clauses of its case.
   Of the others, one the LOCK-3 probe called from an allocation inside
   another call of the same thread, where rig_holds () was 0, that never
   returns waits for a lock its own thread holds uncounted (a C mutex does
   not refuse its owner as OCaml's do): LOCK-3's.  An entry that never
   answers otherwise is CODE-6's, the clause that has entry answer (it may
   block, on what a prepare started, but it answers). *)
let clause_of_hang ?inside (case : Case.t) fn =
  match (fn, inside) with
  | "sleep", _ -> Some "TIME-4"
  | "stop", _ -> Some "STOP-2"
  | "signaled", _ -> Some "TIME-1"
  | ("locate" | "peer"), _ -> Some "LOCK-6"
  | _, Some _ when List.mem "LOCK-3" case.clauses -> Some "LOCK-3"
  | "entry", None -> Some "CODE-6"
  | _ -> None

(* Whether a hang of [fn] in run [r] fails clause [c]. *)
let hang_fails ?inside (c : Catalog.clause) (r : Runner.result) fn =
  match clause_of_hang ?inside r.job.case fn with Some k -> k = c.id | None -> checks c r.job.case

(* A run killed at its time limit hung in a call if that call had been in
   flight for half the limit at least, and a second; otherwise it was only
   slow (calls that each take a while, many of them, or a limit shorter
   than the work), which breaks no clause. *)
let stuck_call limit = function Some (fn, s) when s >= Float.max 1. (limit /. 2.) -> Some fn | _ -> None

(* What a result says against a clause, if anything. *)
let rec against (c : Catalog.clause) (r : Runner.result) =
  match r.outcome with
  | Crashed_once { again; _ } -> against c { r with outcome = again }
  | Findings fs ->
      List.find_map
        (fun (f : Case.finding) ->
          if f.clause = c.id then Some (Printf.sprintf "%s (case %s, seed %d)" f.detail r.job.case.name r.job.seed)
          else None)
        fs
  | Crashed how when checks c r.job.case -> Some (Printf.sprintf "case %s crashed: %s" r.job.case.name how)
  | Timed_out { limit; running; stuck } when stuck_call limit stuck <> None && hang_fails c r (Option.get (stuck_call limit stuck)) ->
      Some
        (Printf.sprintf "case %s did not end within %.0f s%s and was killed" r.job.case.name limit
           (match running with Some w -> " (" ^ w ^ ")" | None -> ""))
  | Hung { fn; seconds; inside; deadlock } when hang_fails ?inside c r fn ->
      let hung =
        if deadlock then Printf.sprintf "deadlocked (after %.1f s its thread waited for good on a mutex: a chain of owners that comes back on itself)" seconds
        else Printf.sprintf "did not return within %.0f s" seconds
      in
      Some
        (match inside with
        | Some outer when clause_of_hang ~inside:outer r.job.case fn = Some "LOCK-3" ->
            Printf.sprintf
              "%s, called inside %s at an allocation with rig_holds () = 0, %s (case %s, seed %d): the thread held a lock of the driver's there it had not counted (a C mutex waits for its owner for good)"
              fn outer hung r.job.case.name r.job.seed
        | _ -> Printf.sprintf "%s %s (case %s, seed %d)" fn hung r.job.case.name r.job.seed)
  | Blocked { fn; first } when clause_of_hang r.job.case fn = Some c.id ->
      (* cut short for a hang of fn seen before: a hang of the call this
         clause bounds is this clause's, wherever it came first (a sweep's
         point, whose run is no case of the clause's) *)
      Some
        (Printf.sprintf "%s did not return within %.0f s (case %s, seed %d), as it had not before (%s)" fn
           Runner.known_hang_limit r.job.case.name r.job.seed first)
  | _ -> None

(* A run that could not reach its end for a hang that is another clause's:
   it passes none of its case's clauses. *)
let blocked (c : Catalog.clause) (r : Runner.result) =
  if not (checks c r.job.case) then None
  else
    match r.outcome with
    | Crashed_once { how; _ } ->
        Some (Printf.sprintf "case %s crashed once (%s), and not when run again: that says nothing of its clauses"
                r.job.case.name how)
    | Hung { fn; inside; _ } when clause_of_hang ?inside r.job.case fn <> None && clause_of_hang ?inside r.job.case fn <> Some c.id ->
        Some (Printf.sprintf "blocked: %s did not return in case %s (%s)" fn r.job.case.name
                (Option.get (clause_of_hang ?inside r.job.case fn)))
    | Blocked { fn; first } ->
        Some (Printf.sprintf "blocked: %s did not return in case %s, as it had not before (%s)" fn r.job.case.name first)
    | Timed_out { limit; stuck; _ } -> (
        match stuck_call limit stuck with
        | None ->
            Some (Printf.sprintf "case %s did not end within %.0f s, with no driver call hung: too slow to judge (--timeout)"
                    r.job.case.name limit)
        | Some fn when not (hang_fails c r fn) ->
            Some (Printf.sprintf "blocked: %s did not return in case %s (%s)" fn r.job.case.name
                    (Option.value (clause_of_hang r.job.case fn) ~default:"its case"))
        | Some _ -> None)
    | _ -> None

(* Every clause of the catalog has a case now; a clause added to the
   catalog without one is said to be unchecked, never passed. *)
let why_unchecked _ = "no check of this clause yet"

(* What other findings rest on.  A run that asked signaled read the word
   through it; a run that called free measured or reused memory free gave
   back.  Where the premise's own check fails (TIME-1: signaled does not
   read the word; MEM-2's given-back probe: free does not give memory
   back), what such a run found of another clause rests on a false premise
   (a wait that returned on a value the word never showed, free memory
   that never came back), and becomes that clause's "not judged", with the
   premise's evidence: the fix of the premise brings it back if real.
   rig's side has one: a stop while a call was in flight shows that call
   uncounted (CNT-2, CNT-3) only if rig waits for the calls it counts,
   which CNT-1's rig.calls-in-flight may find it does not; and where it
   does not, the rest of a call stopped midway comes after stop (CNT-4).
   And a run that stopped a device goes on using the regions rig made
   there, as rig may until it frees them: where STOP-5 finds stop releases
   them (a probe.STOP-5 case's finding, or its crash after the stop), a
   crash once stop was called may be a use of freed memory, rig's or the
   driver's own work's (blind bs-stop-frees-regions: heap corruption that
   aborted a later flow; blind sr-stop-unmaps-host-pages: the driver's
   worker writing host pages its stop had unmapped), which says nothing of
   its case's clauses. *)
type premise = {
  check : string;  (** the clause that checks the premise *)
  shown_by : Runner.result -> bool;  (** the runs whose finding of [check] breaks it (or, with [crash_rests], whose crash after [rests]) *)
  rests : string;                     (** the driver function whose call makes a run rest on it *)
  resting : string -> bool;           (** the clauses whose findings rest on it *)
  crash_rests : bool;                 (** whether a crash of such a run rests on it too *)
  says : string;
}

let premises =
  [ { check = "TIME-1"; shown_by = (fun _ -> true); rests = "signaled"; resting = (fun _ -> true);
      crash_rests = false; says = "its run read the word through signaled, which TIME-1 finds does not read it" };
    { check = "MEM-2"; shown_by = (fun r -> r.job.case.name = "probe.MEM-2.given-back"); rests = "free"; resting = (fun _ -> true);
      crash_rests = false; says = "its run rests on memory that free gives back, which MEM-2 finds free does not" };
    { check = "CNT-1"; shown_by = (fun r -> r.job.case.name = "rig.calls-in-flight"); rests = "stop";
      resting = (fun c -> List.mem c [ "CNT-2"; "CNT-3"; "CNT-4" ]); crash_rests = false;
      says = "its run rests on rig waiting for the calls it counts before stop, which CNT-1 finds it does not" };
    { check = "STOP-5"; shown_by = (fun r -> String.starts_with ~prefix:"probe.STOP-5." r.job.case.name); rests = "stop";
      resting = (fun _ -> false); crash_rests = true;
      says = "its run crashed once it had called stop, and STOP-5 finds stop releases what rig made, which rig and the driver's own work may still use" } ]

(* A crash "in stop" is stop's own: no evidence that stop released what
   later calls used (a crash there of another case may still be, as the
   driver's own work can meet what its stop released). *)
let crashed_after_stop how = not (Substring.contains ~sub:" in stop" how)

let under_premise results (p : premise) =
  let broken =
    List.find_map
      (fun (r : Runner.result) ->
        match r.outcome with
        | Crashed how when p.crash_rests && p.shown_by r && List.mem_assoc p.rests r.traced && crashed_after_stop how ->
            (* its own check of what the run did after stop died there *)
            Some (Printf.sprintf "case %s crashed after %s, seed %d: %s" r.job.case.name p.rests r.job.seed how)
        | Findings fs when p.shown_by r ->
            List.find_map
              (fun (f : Case.finding) ->
                if f.clause = p.check then Some (Printf.sprintf "%s (case %s, seed %d)" f.detail r.job.case.name r.job.seed) else None)
              fs
        | _ -> None)
      results
  in
  match broken with
  | None -> results
  | Some evidence ->
      List.map
        (fun (r : Runner.result) ->
          match r.outcome with
          | Findings fs when List.mem_assoc p.rests r.traced && not (p.shown_by r && List.exists (fun (f : Case.finding) -> f.clause = p.check) fs) ->
              let kept, resting = List.partition (fun (f : Case.finding) -> f.clause = p.check || not (p.resting f.clause)) fs in
              let unjudged =
                List.map (fun (f : Case.finding) -> (f.clause, Printf.sprintf "%s (%s); it found: %s" p.says evidence f.detail)) resting
              in
              { r with outcome = Findings kept; unjudged = r.unjudged @ unjudged }
          | Crashed how when p.crash_rests && List.mem_assoc p.rests r.traced && not (p.shown_by r) ->
              let unjudged = List.map (fun c -> (c, Printf.sprintf "%s (%s); it crashed: %s" p.says evidence how)) r.job.case.clauses in
              { r with outcome = Findings []; unjudged = r.unjudged @ unjudged }
          | _ -> r)
        results

let on_premises results = List.fold_left under_premise results premises

let verdicts ~cases ~selected results =
  let results = on_premises results in
  List.map
    (fun (c : Catalog.clause) ->
      let mine = List.filter (checks c) cases in
      let line verdict evidence repro = { clause = c; verdict; evidence; repro } in
      if not (List.exists (fun (s : Catalog.clause) -> s.id = c.id) selected) then
        line Unchecked "not selected by --only" None
      else if mine = [] then line Unchecked (why_unchecked c.id) None
      else
        match List.find_map (fun r -> Option.map (fun e -> (e, r)) (against c r)) results with
        | Some (evidence, r) -> line Fail evidence (Some (Runner.replay r.job))
        | None -> (
            match List.find_map (blocked c) results with
            | Some why -> line Unchecked why None
            | None ->
            let ran = List.filter (fun (r : Runner.result) -> checks c r.job.case) results in
            let applicable = List.filter (fun (r : Runner.result) -> match r.outcome with Not_applicable _ -> false | _ -> true) ran in
            (* a run that found nothing of the clause to judge passes nothing *)
            let unjudged, applicable = List.partition (fun (r : Runner.result) -> List.mem_assoc c.id r.unjudged) applicable in
            match (ran, applicable) with
            | [], _ -> line Unchecked "its cases did not run (interrupted)" None
            | _, [] -> (
                (* a run a false premise kept from its verdict had something
                   to judge: it says more than a run with nothing to judge *)
                let not_judged (r : Runner.result) =
                  line Unchecked
                    (Printf.sprintf "not judged: %s (case %s, seed %d)" (List.assoc c.id r.unjudged) r.job.case.name r.job.seed)
                    None
                in
                let on_a_premise (r : Runner.result) =
                  List.exists (fun p -> String.starts_with ~prefix:p.says (List.assoc c.id r.unjudged)) premises
                in
                match (List.find_opt on_a_premise unjudged, List.find_map (fun (r : Runner.result) -> match r.outcome with Not_applicable w -> Some w | _ -> None) ran) with
                | Some r, _ -> not_judged r
                | None, Some why -> line Na why None
                | None, None -> not_judged (List.hd unjudged))
            | _ ->
                let names = List.sort_uniq compare (List.map (fun (r : Runner.result) -> r.job.case.name) applicable) in
                line Pass
                  (Printf.sprintf "no violation in %d run(s) of %s" (List.length applicable) (String.concat ", " names))
                  None))
    Catalog.all

let flagged results =
  let results = on_premises results in
  Catalog.all
  |> List.filter (fun c -> List.exists (fun r -> against c r <> None) results)
  |> List.map (fun (c : Catalog.clause) -> c.id)

(* For a terminal: what a driver wrote must not move the cursor or recolour
   it (Safe_text.terminal); cut by characters, never inside one. *)
let for_terminal ?max s =
  let s = Safe_text.terminal s in
  match max with
  | Some m when Safe_text.prefix ~max:m s <> None -> Option.get (Safe_text.prefix ~max:(m - 3) s) ^ "..."
  | _ -> s

let print_table ~color lines =
  let paint code s = if color then Printf.sprintf "\027[%sm%s\027[0m" code s else s in
  List.iter
    (fun l ->
      let v = verdict_name l.verdict in
      let v =
        match l.verdict with
        | Pass -> paint "32" v | Fail -> paint "31;1" v | Na -> paint "36" v | Unchecked -> paint "33" v
      in
      Printf.printf "%-8s %-9s %s\n" l.clause.id v (for_terminal ~max:110 l.evidence);
      Option.iter (fun r -> Printf.printf "%-8s %-9s replay: %s\n" "" "" (for_terminal r)) l.repro)
    lines;
  let count v = List.length (List.filter (fun l -> l.verdict = v) lines) in
  Printf.printf "%d clauses: %d pass, %d fail, %d n/a, %d unchecked\n%!" (List.length lines) (count Pass)
    (count Fail) (count Na) (count Unchecked)

(* Valid UTF-8 JSON from any bytes: an invalid piece (a maximal invalid
   subpart, Safe_text) is one \ufffd; controls (C0, DEL, C1) and U+2028,
   U+2029 (line ends to JavaScript) are \u escapes. *)
let json_string = Safe_text.json_string

(* Well-formed XML 1.0 from any bytes: an invalid piece is one U+FFFD, as
   are U+FFFE and U+FFFF; the controls XML 1.0 has no place for (C0 but
   tab, LF, CR) and the discouraged ones (DEL, C1) are shown as text
   (\x1b, Safe_text.visible); &, <, > and double quotes are references.  In an attribute,
   tab, LF and CR are character references too, which attribute-value
   normalisation keeps; in text, CR is (a parser would turn it into LF). *)
let xml_escape ~attr s =
  Safe_text.map s
    ~invalid:(fun b _ -> Buffer.add_string b Safe_text.replacement)
    ~valid:(fun b u bytes ->
      match Uchar.to_int u with
      | 0x26 -> Buffer.add_string b "&amp;"
      | 0x3c -> Buffer.add_string b "&lt;"
      | 0x3e -> Buffer.add_string b "&gt;"
      | 0x22 -> Buffer.add_string b "&quot;"
      | 0x0d -> Buffer.add_string b "&#13;"
      | (0x09 | 0x0a) as c when attr -> Printf.bprintf b "&#%d;" c
      | 0x09 | 0x0a -> Buffer.add_string b bytes
      | 0xfffe | 0xffff -> Buffer.add_string b Safe_text.replacement
      | _ when Safe_text.is_control u -> Safe_text.visible b u
      | _ -> Buffer.add_string b bytes)

let xml_attr = xml_escape ~attr:true
let xml_text = xml_escape ~attr:false

let rec mkdir_p dir =
  if dir <> "" && dir <> "." && dir <> "/" && not (Sys.file_exists dir) then begin
    mkdir_p (Filename.dirname dir);
    try Sys.mkdir dir 0o755 with Sys_error _ when Sys.file_exists dir -> ()
  end

let run_json (r : Runner.result) =
  let outcome, flagged =
    match r.outcome with
    | Findings [] -> ("pass", [])
    | Findings fs -> ("fail", List.sort_uniq compare (List.map (fun (f : Case.finding) -> f.clause) fs))
    | Not_applicable _ -> ("n/a", [])
    | Crashed _ -> ("crash", r.job.case.clauses)
    | Timed_out { limit; stuck; _ } ->
        ( "timeout",
          match stuck_call limit stuck with
          | Some fn -> ( match clause_of_hang r.job.case fn with Some k -> [ k ] | None -> r.job.case.clauses)
          | None -> [] )
    | Hung { fn; inside; _ } -> ("hang", match clause_of_hang ?inside r.job.case fn with Some k -> [ k ] | None -> r.job.case.clauses)
    | Blocked _ -> ("blocked", [])
    | Crashed_once _ -> ("crash-once", [])
  in
  let opt = function Some s -> json_string s | None -> "null" in
  Printf.sprintf
    "    {\"case\": %s, \"seed\": %d, \"mutant\": %s, \"inject\": %s, \"outcome\": %s, \"flagged\": [%s], \"seconds\": %.3f}"
    (json_string r.job.case.name) r.job.seed (opt r.job.mutant)
    (opt (Option.map Injection.to_string r.job.inject))
    (json_string outcome)
    (String.concat ", " (List.map json_string flagged))
    r.seconds

let write_json ?(declared = []) ?load_error path ~driver ~seeds ~interrupted ~runs lines =
  mkdir_p (Filename.dirname path);
  let clause l =
    Printf.sprintf "    {\"id\": %s, \"side\": %s, \"verdict\": %s, \"evidence\": %s%s}" (json_string l.clause.id)
      (json_string l.clause.side)
      (json_string (verdict_name l.verdict))
      (json_string l.evidence)
      (match l.repro with Some r -> ", \"repro\": " ^ json_string r | None -> "")
  in
  let tmp = path ^ ".tmp" in
  Out_channel.with_open_bin tmp (fun oc ->
      Printf.fprintf oc
        "{\n  \"format\": \"rig-conform-report/1\",\n  \"driver\": %s,\n  \"declared\": {%s},\n  \"seeds\": [%s],\n  \"interrupted\": %b,\n  \"load_error\": %s,\n  \"clauses\": [\n%s\n  ],\n  \"runs\": [\n%s\n  ]\n}\n"
        (json_string driver)
        (String.concat ", " (List.map (fun (k, v) -> Printf.sprintf "%s: %b" (json_string k) v) declared))
        (String.concat ", " (List.map string_of_int seeds))
        interrupted
        (match load_error with Some e -> json_string e | None -> "null")
        (String.concat ",\n" (List.map clause lines))
        (String.concat ",\n" (List.map run_json runs)));
  Sys.rename tmp path

(* Written beside, then renamed: a reader never sees half a report. *)
let write_atomically path text =
  mkdir_p (Filename.dirname path);
  let tmp = path ^ ".tmp" in
  Out_channel.with_open_bin tmp (fun oc -> output_string oc text);
  Sys.rename tmp path

let count v lines = List.length (List.filter (fun l -> l.verdict = v) lines)

let write_junit path ~driver lines =
  let case l =
    let name = Printf.sprintf "name=\"%s\" classname=\"rig-conform.%s.%s\"" (xml_attr l.clause.id)
        (xml_attr driver) (xml_attr l.clause.side) in
    match l.verdict with
    | Pass -> Printf.sprintf "    <testcase %s/>\n" name
    | Fail ->
        Printf.sprintf "    <testcase %s>\n      <failure message=\"%s\">%s\nreplay: %s</failure>\n    </testcase>\n" name
          (xml_attr l.evidence) (xml_text l.clause.text) (xml_text (Option.value l.repro ~default:""))
    | Na | Unchecked ->
        Printf.sprintf "    <testcase %s>\n      <skipped message=\"%s: %s\"/>\n    </testcase>\n" name
          (verdict_name l.verdict) (xml_attr l.evidence)
  in
  write_atomically path
    (Printf.sprintf
       "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"rig-conform %s\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\">\n%s  </testsuite>\n</testsuites>\n"
       (xml_attr driver) (List.length lines) (count Fail lines)
       (count Na lines + count Unchecked lines)
       (String.concat "" (List.map case lines)))

(* Markdown from any bytes: valid UTF-8 (an invalid piece is one U+FFFD),
   line ends and tabs as spaces (a row is one line), other controls shown
   as text (\x1b), and a table cell's pipes escaped (\|, which GFM reads
   as a pipe, in a code span too).  Outside code, & < > are references (no
   HTML from a driver's bytes). *)
let md_escape ~code s =
  Safe_text.map s
    ~invalid:(fun b _ -> Buffer.add_string b Safe_text.replacement)
    ~valid:(fun b u bytes ->
      match Uchar.to_int u with
      | 0x7c -> Buffer.add_string b "\\|"
      | 0x0a | 0x0d | 0x09 -> Buffer.add_char b ' '
      | 0x26 when not code -> Buffer.add_string b "&amp;"
      | 0x3c when not code -> Buffer.add_string b "&lt;"
      | 0x3e when not code -> Buffer.add_string b "&gt;"
      | _ when Safe_text.is_control u -> Safe_text.visible b u
      | _ -> Buffer.add_string b bytes)

let md_cell = md_escape ~code:false

(* A code span whose fence is longer than any run of backticks inside it. *)
let md_code s =
  let s = md_escape ~code:true s in
  let longest, _ =
    String.fold_left (fun (m, run) c -> if c = '`' then (max m (run + 1), run + 1) else (m, 0)) (0, 0) s
  in
  let fence = String.make (longest + 1) '`' in
  let pad = if longest > 0 then " " else "" in
  fence ^ pad ^ s ^ pad ^ fence

let write_markdown path ~driver lines =
  let row l =
    Printf.sprintf "| %s | %s | **%s** | %s | %s |\n" l.clause.id (md_cell l.clause.text) (verdict_name l.verdict)
      (md_cell l.evidence)
      (match l.repro with Some r -> md_code r | None -> "")
  in
  write_atomically path
    (Printf.sprintf
       "# Conformance of driver %s\n\n%d clauses: %d pass, %d fail, %d n/a, %d unchecked.\n\n| clause | the document | verdict | evidence | replay |\n|---|---|---|---|---|\n%s"
       (md_code driver) (List.length lines) (count Pass lines) (count Fail lines) (count Na lines) (count Unchecked lines)
       (String.concat "" (List.map row lines)))
