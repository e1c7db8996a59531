(* Verdicts and reports; see report.mli. *)

type verdict = Pass | Fail | Na | Unchecked

let verdict_name = function Pass -> "pass" | Fail -> "fail" | Na -> "n/a" | Unchecked -> "unchecked"

type line = { clause : Catalog.clause; verdict : verdict; evidence : string; repro : string option }

let checks (c : Catalog.clause) (case : Case.t) = List.mem c.id case.clauses

(* What a result says against a clause, if anything. *)
let against (c : Catalog.clause) (r : Runner.result) =
  match r.outcome with
  | Findings fs ->
      List.find_map
        (fun (f : Case.finding) ->
          if f.clause = c.id then Some (Printf.sprintf "%s (case %s, seed %d)" f.detail r.job.case.name r.job.seed)
          else None)
        fs
  | Crashed how when checks c r.job.case -> Some (Printf.sprintf "case %s crashed: %s" r.job.case.name how)
  | Timed_out { limit; running } when checks c r.job.case ->
      Some
        (Printf.sprintf "case %s did not end within %.0f s%s and was killed" r.job.case.name limit
           (match running with Some w -> " (" ^ w ^ ")" | None -> ""))
  | _ -> None

(* Every clause of the catalog has a case now; a clause added to the
   catalog without one is said to be unchecked, never passed. *)
let why_unchecked _ = "no check of this clause yet"

let verdicts ~cases ~selected results =
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
            let ran = List.filter (fun (r : Runner.result) -> checks c r.job.case) results in
            let applicable = List.filter (fun (r : Runner.result) -> match r.outcome with Not_applicable _ -> false | _ -> true) ran in
            match (ran, applicable) with
            | [], _ -> line Unchecked "its cases did not run (interrupted)" None
            | r :: _, [] ->
                let why = match r.outcome with Not_applicable w -> w | _ -> "" in
                line Na why None
            | _ ->
                let names = List.sort_uniq compare (List.map (fun (r : Runner.result) -> r.job.case.name) applicable) in
                line Pass
                  (Printf.sprintf "no violation in %d run(s) of %s" (List.length applicable) (String.concat ", " names))
                  None))
    Catalog.all

let flagged results =
  Catalog.all
  |> List.filter (fun c -> List.exists (fun r -> against c r <> None) results)
  |> List.map (fun (c : Catalog.clause) -> c.id)

let print_table ~color lines =
  let paint code s = if color then Printf.sprintf "\027[%sm%s\027[0m" code s else s in
  List.iter
    (fun l ->
      let v = verdict_name l.verdict in
      let v =
        match l.verdict with
        | Pass -> paint "32" v | Fail -> paint "31;1" v | Na -> paint "36" v | Unchecked -> paint "33" v
      in
      let ev = if String.length l.evidence > 110 then String.sub l.evidence 0 107 ^ "..." else l.evidence in
      Printf.printf "%-8s %-9s %s\n" l.clause.id v ev;
      Option.iter (fun r -> Printf.printf "%-8s %-9s replay: %s\n" "" "" r) l.repro)
    lines;
  let count v = List.length (List.filter (fun l -> l.verdict = v) lines) in
  Printf.printf "%d clauses: %d pass, %d fail, %d n/a, %d unchecked\n%!" (List.length lines) (count Pass)
    (count Fail) (count Na) (count Unchecked)

let json_string s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  String.iter
    (fun c ->
      match c with
      | '"' -> Buffer.add_string b "\\\""
      | '\\' -> Buffer.add_string b "\\\\"
      | '\n' -> Buffer.add_string b "\\n"
      | c when Char.code c < 0x20 -> Buffer.add_string b (Printf.sprintf "\\u%04x" (Char.code c))
      | c -> Buffer.add_char b c)
    s;
  Buffer.add_char b '"';
  Buffer.contents b

let xml_escape s =
  let b = Buffer.create (String.length s) in
  String.iter
    (function
      | '&' -> Buffer.add_string b "&amp;"
      | '<' -> Buffer.add_string b "&lt;"
      | '>' -> Buffer.add_string b "&gt;"
      | '"' -> Buffer.add_string b "&quot;"
      | c when Char.code c < 0x20 && c <> '\n' && c <> '\t' -> Buffer.add_string b " "
      | c -> Buffer.add_char b c)
    s;
  Buffer.contents b

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
    | Timed_out _ -> ("timeout", r.job.case.clauses)
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
    let name = Printf.sprintf "name=\"%s\" classname=\"rig-conform.%s.%s\"" (xml_escape l.clause.id)
        (xml_escape driver) (xml_escape l.clause.side) in
    match l.verdict with
    | Pass -> Printf.sprintf "    <testcase %s/>\n" name
    | Fail ->
        Printf.sprintf "    <testcase %s>\n      <failure message=\"%s\">%s\nreplay: %s</failure>\n    </testcase>\n" name
          (xml_escape l.evidence) (xml_escape l.clause.text) (xml_escape (Option.value l.repro ~default:""))
    | Na | Unchecked ->
        Printf.sprintf "    <testcase %s>\n      <skipped message=\"%s: %s\"/>\n    </testcase>\n" name
          (verdict_name l.verdict) (xml_escape l.evidence)
  in
  write_atomically path
    (Printf.sprintf
       "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"rig-conform %s\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\">\n%s  </testsuite>\n</testsuites>\n"
       (xml_escape driver) (List.length lines) (count Fail lines)
       (count Na lines + count Unchecked lines)
       (String.concat "" (List.map case lines)))

let md_cell s = String.concat "\\|" (String.split_on_char '|' (String.map (function '\n' -> ' ' | c -> c) s))

let write_markdown path ~driver lines =
  let row l =
    Printf.sprintf "| %s | %s | **%s** | %s | %s |\n" l.clause.id (md_cell l.clause.text) (verdict_name l.verdict)
      (md_cell l.evidence)
      (match l.repro with Some r -> "`" ^ md_cell r ^ "`" | None -> "")
  in
  write_atomically path
    (Printf.sprintf
       "# Conformance of driver `%s`\n\n%d clauses: %d pass, %d fail, %d n/a, %d unchecked.\n\n| clause | the document | verdict | evidence | replay |\n|---|---|---|---|---|\n%s"
       driver (List.length lines) (count Pass lines) (count Fail lines) (count Na lines) (count Unchecked lines)
       (String.concat "" (List.map row lines)))
