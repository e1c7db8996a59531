(* The cases in use; see known_cases.mli. *)

(* Scenario files are read on first use: a malformed one is a usage error. *)
let scenario_files =
  lazy
    (match Scenario_run.directory () with
    | Error why -> Cli.usage_error "%s" why
    | Ok dir -> ( match Scenario_run.load dir with Ok cases -> cases | Error why -> Cli.usage_error "scenario %s" why))

let rig_cases () = Registry.rig_flow_cases @ Lazy.force scenario_files
let all_cases () = Registry.probe_cases @ Registry.model_cases @ rig_cases () @ Registry.async_cases

let checks_any clauses (c : Case.t) = List.exists (fun (k : Catalog.clause) -> List.mem k.id c.clauses) clauses
let cases_for clauses = List.filter (checks_any clauses) (all_cases ())
let rig_cases_of clauses = List.filter (checks_any clauses) (rig_cases ())

let needs_fake name = Scenario_run.needs_fake name || Registry.needs_fake name

let limit ~timeout name = match timeout with Some t -> t | None -> Case_limits.limit name
