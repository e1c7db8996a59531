(* run and describe; see cmd_run.mli. *)

let load_plugins_or_exit plugins =
  List.iter
    (fun p ->
      match Drivers.load_plugin p with
      | Ok () -> ()
      | Error why ->
          prerr_endline (Cli.me ^ ": cannot load the driver plugin " ^ why);
          exit 2)
    plugins

let driver_here (o : Cli.opts) =
  load_plugins_or_exit o.plugins;
  match Drivers.find o.driver with
  | Some d -> d
  | None ->
      Cli.usage_error "no driver %S (known: %s; a plugin's with --plugin PATH)" o.driver (String.concat ", " (Drivers.names ()))

let apply_mutant (drv : Drivers.t) = function
  | None -> ()
  | Some m ->
      if List.exists (fun (n, _, _) -> n = m) Rig_mutant.all then Rig_mutant.set (Some m)
      else if List.exists (fun (n, _, _) -> n = m) Rig_edge_primitives.Mutant.all then
        Rig_edge_primitives.Mutant.set (Some m)
      else if List.exists (fun (n, _, _) -> n = m) drv.mutants then drv.set_mutant (Some m)
      else Cli.usage_error "no mutant %S of the reference rig or of this driver (see rig-conform list)" m

let run args =
  let o =
    Cli.parse_opts args ~allowed:[ "--driver"; "--plugin"; "--case"; "--seed"; "--mutant"; "--inject"; "--sequences"; "--scenario"; "--census" ]
  in
  (* The scenarios are read before the driver's code can move the directory. *)
  let case, seed =
    match (o.case, o.scenario) with
    | Some _, Some _ -> Cli.usage_error "run: give --case NAME or --scenario FILE, not both"
    | None, Some file -> (
        match Scenario_run.load_file file with
        | Ok c -> (c, (match o.seeds with [ s ] -> s | _ -> 1))
        | Error why -> Cli.usage_error "scenario %s" why)
    | None, None -> Cli.usage_error "run needs --case NAME (or --scenario FILE)"
    | Some name, None -> (
        let seed = match o.seeds with [ s ] -> s | _ -> Cli.usage_error "run needs --seed N" in
        match List.find_opt (fun (c : Case.t) -> c.name = name) (Known_cases.all_cases ()) with
        | Some c -> (c, seed)
        | None -> Cli.usage_error "no case %S (see rig-conform list)" name)
  in
  let name = case.name in
  (* Before the plugin loads: it may start threads, and fork wants none. *)
  Run_watch.fork_watched case;
  let drv = driver_here o in
  let arm inject =
    drv.reset ();
    apply_mutant drv o.mutant;
    Case.report_calls [];
    Case.report_unjudged [];
    match (inject, drv.inject) with
    | None, _ -> ()
    | Some i, _ when Injection.async_at i <> None || Injection.wait_at i <> None ->
        (* An asynchronous exception (async.* cases): the wrapper raises it, for any driver. *)
        if not (Async_cases.is_async_case name) then
          Cli.usage_error "--inject %s: only for the async.* cases" (Injection.to_string i);
        let on, at =
          match Injection.async_at i with
          | Some at -> (Async_inject.Allocation, at)
          | None -> (Wait, Option.get (Injection.wait_at i))
        in
        Async_inject.target := Some { Async_inject.fn = i.fn; nth = i.nth; at; on }
    | Some i, Some inject -> (
        Case.injecting := true;
        try inject i with Invalid_argument why -> Cli.usage_error "--inject %s: %s" (Injection.to_string i) why)
    | Some _, None -> Cli.usage_error "driver %S has no fault injection" o.driver
  in
  Case.counting := o.census;
  let job inject = { Runner.case; seed; driver = o.driver; plugins = o.plugins; mutant = o.mutant; inject; census = o.census } in
  match o.injects with
  | [] | [ _ ] ->
      let inject = match o.injects with [ i ] -> Some i | _ -> None in
      arm inject;
      exit (Runner.child drv (job inject))
  | several ->
      (* A batch: each point in turn in this process, each point's records
         after a POINT record (Runner's batches). *)
      let worst =
        List.fold_left
          (fun worst i ->
            Channel.start_point (Injection.to_string i);
            arm (Some i);
            max worst (Runner.child drv (job (Some i))))
          0 several
      in
      exit worst

let describe args =
  let o = Cli.parse_opts args ~allowed:[ "--plugin" ] in
  if o.plugins = [] then Cli.usage_error "describe needs --plugin PATH";
  List.iter Channel.say (Drivers.describe o.plugins);
  Channel.say_done ();
  exit 0
