(* rig-conform calibrate; see cmd_calibrate.mli. *)

(* The checkout this program was built in, if it was. *)
let checkout_table () =
  let built = "/_build/default/harness/certify/main.exe" in
  let exe = Sys.executable_name in
  if String.ends_with ~suffix:built exe then
    Some (String.sub exe 0 (String.length exe - String.length built) ^ "/harness/certify/case_seconds.tsv")
  else None

let main args =
  let o = Cli.parse_opts args ~allowed:[ "-j"; "--out" ] in
  let out =
    match (o.out, checkout_table ()) with
    | Some p, _ | None, Some p -> p
    | None, None -> Cli.usage_error "calibrate needs --out PATH outside a checkout"
  in
  Cli.writable_or_exit ~what:"table" out;
  Session.start ();
  o.timeout <- Some 120.;
  let jobs =
    List.concat_map
      (fun case -> List.map (fun seed -> { Runner.case; seed; driver = "fake"; plugins = []; mutant = None; inject = None; census = false }) [ 1; 2; 3 ])
      (Known_cases.all_cases ())
  in
  let results = Session.run_jobs ~crowd:false o ~what:"calibrate" jobs in
  Session.exit_if_interrupted ();
  let broken = List.filter (fun (r : Runner.result) -> match r.outcome with Findings [] | Not_applicable _ -> false | _ -> true) results in
  if broken <> [] then begin
    List.iter (fun (r : Runner.result) -> Printf.eprintf "not clean: %s\n" (Runner.replay r.job)) broken;
    Printf.eprintf "%s: the fake driver's clean runs must pass to calibrate\n" Cli.me;
    exit 1
  end;
  let longest = Hashtbl.create 100 in
  List.iter
    (fun (r : Runner.result) ->
      let n = r.job.case.name in
      Hashtbl.replace longest n (Float.max r.seconds (Option.value ~default:0. (Hashtbl.find_opt longest n))))
    results;
  let rows = List.sort compare (Hashtbl.fold (fun n s acc -> (n, s) :: acc) longest []) in
  Out_channel.with_open_bin out (fun oc -> output_string oc (Case_limits.to_tsv rows));
  Printf.printf "%d cases calibrated: %s\n" (List.length rows) out
