(* scn_check FILE...: parses each scenario file with Scenario_syntax and
   prints its header and statements (one per line, as the language writes
   them), or the first error; exits 1 if any file has an error. *)

let () =
  let files = List.tl (Array.to_list Sys.argv) in
  if files = [] then (
    prerr_endline "usage: scn_check FILE.scn...";
    exit 2);
  let bad = ref false in
  List.iter
    (fun f ->
      match Scenario_syntax.parse_file f with
      | Error e -> prerr_endline e; bad := true
      | Ok t ->
          Printf.printf "%s: scenario %S clauses %s%s\n" f t.name
            (String.concat "," t.clauses)
            (if t.needs_fake then " needs fake" else "");
          List.iter
            (fun (s : Scenario_syntax.stmt) ->
              Printf.printf "%d:%d: %s\n" s.line s.col (Scenario_syntax.string_of_stmt s))
            t.stmts)
    files;
  exit (if !bad then 1 else 0)
