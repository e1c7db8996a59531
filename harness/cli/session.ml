(* The shared machinery of the subcommands that run cases; see session.mli. *)

let signal : int option ref = ref None

let start () =
  Stop_signals.install ();
  Child_process.become_subreaper ();
  Cli.temp_dir_or_exit ()

let stopped () =
  match !signal with
  | Some _ -> true
  | None -> (
      match Stop_signals.next ~ours:Runner.is_ours with
      | Some s -> signal := Some s; true
      | None -> false)

let interrupted () = ignore (stopped ()); !signal

let exit_if_interrupted () =
  match interrupted () with
  | Some s ->
      Printf.eprintf "%s: interrupted; the report holds what was done\n%!" Cli.me;
      exit (Stop_signals.exit_code s)
  | None -> ()

(* A plugin's driver is described by a child that loads it: its load code
   never runs in the certifier. *)
let describe_limit o = Option.value o.Cli.timeout ~default:60.

let driver_info (o : Cli.opts) =
  let known infos =
    match List.find_opt (fun (i : Drivers.info) -> i.name = o.driver) infos with
    | Some i -> Ok i
    | None ->
        Cli.usage_error "no driver %S (known: %s; a plugin's with --plugin PATH)" o.driver
          (String.concat ", " (List.map (fun (i : Drivers.info) -> i.name) infos))
  in
  if o.plugins = [] then known (List.filter_map (fun n -> Option.map Drivers.info (Drivers.find n)) (Drivers.names ()))
  else
    let args = "describe" :: List.concat_map (fun p -> [ "--plugin"; p ]) o.plugins in
    match Runner.run_command ~args ~limit:(describe_limit o) with
    | Error how -> Error (Printf.sprintf "loading the plugin%s %s: %s" (if List.length o.plugins > 1 then "s" else "") (String.concat ", " o.plugins) how)
    | Ok records -> (
        match Drivers.read_description records with
        | `Usage why -> Cli.usage_error "%s" why
        | `Load_failed why -> Error why
        | `Ok infos -> known infos)

let driver_info_or_exit o =
  match driver_info o with
  | Ok i -> i
  | Error why ->
      Printf.eprintf "%s: the driver could not be loaded: %s\n" Cli.me why;
      exit 1

let mutants (o : Cli.opts) (drv : Drivers.info) =
  List.map (fun (n, c, w) -> (n, c, w, "rig")) Rig_mutant.all
  @ List.map (fun (n, c, w) -> (n, c, w, "edge")) Rig_edge_primitives.Mutant.all
  @ List.map (fun (n, c, w) -> (n, c, w, "driver " ^ o.driver)) drv.info_mutants

let chosen_mutant ~cmd (o : Cli.opts) drv =
  match o.mutant with
  | None -> None
  | Some m -> (
      match List.find_opt (fun (n, _, _, _) -> n = m) (mutants o drv) with
      | Some _ as found -> found
      | None ->
          Cli.usage_error "%s --mutant %s: no such mutant of the reference rig, the edge or driver %s (see rig-conform list)" cmd m
            o.driver)

let in_shard (o : Cli.opts) jobs =
  match o.shard with
  | None -> jobs
  | Some (i, n) -> List.filteri (fun k _ -> k mod n = i - 1) jobs

(* The progress line: runs done, clauses whose runs have all ended, time.
   Answers the printer and what adds jobs that came later (Runner.run_all's
   [more]): a clause whose runs had all ended is not done again until
   those end. *)
let progress_printer ~what (jobs : Runner.job list) =
  let t0 = Unix.gettimeofday () in
  let total = ref 0 in
  let tty = Unix.isatty Unix.stderr in
  let left = Hashtbl.create 80 in
  let add jobs =
    total := !total + List.length jobs;
    List.iter
      (fun (j : Runner.job) ->
        List.iter (fun c -> Hashtbl.replace left c (1 + Option.value ~default:0 (Hashtbl.find_opt left c))) j.case.clauses)
      jobs
  in
  add jobs;
  let total () = !total in
  ( (fun done_ (j : Runner.job) ->
    List.iter (fun c -> Hashtbl.replace left c (Hashtbl.find left c - 1)) j.case.clauses;
    let decided = Hashtbl.fold (fun _ n acc -> if n = 0 then acc + 1 else acc) left 0 in
    let line () =
      Printf.sprintf "%s: %d/%d runs, %d/%d clauses done, %.0f s" what done_ (total ()) decided (Hashtbl.length left)
        (Unix.gettimeofday () -. t0)
    in
    if tty then begin
      Printf.eprintf "\r%s%!" (line ());
      if done_ = total () then prerr_newline ()
    end
    else if done_ = total () || done_ mod 50 = 0 || done_ = 1 then Printf.eprintf "%s\n%!" (line ())),
    add )

let run_jobs ?batch ?crowd ?(more = fun _ -> []) ?flow ?(limit = fun _ -> None) (o : Cli.opts) ~what jobs =
  let before = Runner.crowd_tally () in
  let progress, add = progress_printer ~what jobs in
  let more r = let js = more r in add js; js in
  let results =
    Runner.run_all ?batch ?crowd ~more ?flow ~parallel:(Cli.jobs o)
      ~cost:(fun (j : Runner.job) -> Option.value ~default:0. (Case_limits.seconds_on_fake j.case.name))
      ~limit:(fun (j : Runner.job) ->
        match limit j with Some l -> l | None -> Known_cases.limit ~timeout:o.timeout j.case.name)
      ~progress ~stop:stopped jobs
  in
  let after = Runner.crowd_tally () in
  let again = after.again - before.again and gone = after.not_again - before.not_again in
  let values_only = after.values_only - before.values_only in
  if again + gone > 0 then
    Printf.eprintf "%s: %d run(s) beside more than -j %d runs found something and ran again with no more beside them: %d found it again, %d did not (the second run's verdict stands, with the first's findings of values, which no load makes)\n%!"
      what (again + gone) (Cli.jobs o) again gone;
  if values_only > 0 then
    Printf.eprintf "%s: %d run(s) beside more than -j %d runs found only values a driver showed, not timings: their verdict stands without a second run\n%!"
      what values_only (Cli.jobs o);
  results
