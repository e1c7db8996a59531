(* The drivers; see drivers.mli. *)

type t = {
  package : (module Rig_edge.Package);
  reset : unit -> unit;
  mutants : (string * string * string) list;
  set_mutant : string option -> unit;
  inject : (Injection.t -> unit) option;
}

let () = Rig_edge_registry.register ~more:Fake.kit_more (module Fake : Rig_edge.Package)

let names () = Rig_edge_registry.names ()

let fake_inject (i : Injection.t) =
  let what =
    match i.kind with
    | _ when Injection.is_answer i -> `Answer
    | "fault" -> `Fault (Printf.sprintf "injected at %s" (Injection.to_string i))
    | "fail" -> `Fail
    | _ -> `Raise (Failure (Printf.sprintf "injected at %s" (Injection.to_string i)))
  in
  Fake.inject ~fn:i.fn ~nth:i.nth what

let find name =
  if name = Fake.name then
    Some { package = (module Fake : Rig_edge.Package); reset = (fun () -> Fake.reset (); Fake.clear_injections ()); mutants = Fake.mutants;
           set_mutant = Fake.set_mutant; inject = Some fake_inject }
  else
    Option.map
      (fun package ->
        { package; reset = ignore; mutants = [];
          set_mutant = (function None -> () | Some m -> invalid_arg ("driver has no mutant " ^ m));
          inject = None })
      (Rig_edge_registry.find name)

let load_plugin_why path =
  if not (Sys.file_exists path) then Error (`Bad_file (path ^ ": no such file"))
  else
    try Ok (Plugin_load.around (fun () -> Dynlink.loadfile (Dynlink.adapt_filename path))) with
    | Dynlink.Error (Dynlink.Library's_module_initializers_failed e) ->
        Error (`Init_failed (path ^ ": its initialisation raised " ^ Printexc.to_string e))
    | Dynlink.Error e -> Error (`Bad_file (path ^ ": " ^ Dynlink.error_message e))
    | e -> Error (`Init_failed (path ^ ": its initialisation raised " ^ Printexc.to_string e))

let load_plugin path = Result.map_error (function `Bad_file w | `Init_failed w -> w) (load_plugin_why path)

type info = {
  name : string;
  kit : (string * bool) list;
  fault_injection : bool;
  info_mutants : (string * string * string) list;
}

let info (d : t) =
  let (module P : Rig_edge.Package) = d.package in
  let k = P.kit and more = Rig_edge_registry.more P.name in
  { name = P.name;
    kit =
      [ ("kit.refused_binary", k.refused_binary <> None); ("kit.spin", k.spin <> None); ("kit.fault", k.fault <> None);
        ("kit.hang", k.hang <> None); ("kit.scratch", k.scratch <> None); ("kit.bus_function", k.bus_function <> None);
        ("kit.bus_agent", k.bus_agent <> None);
        ("kit.refused_launch", Rig_edge.refused_launch more <> None);
        ("kit.scratch_functions", Rig_edge.scratch_functions more <> None) ];
    fault_injection = d.inject <> None;
    info_mutants = d.mutants }

let one_line s = String.map (function '\t' | '\n' | '\r' -> ' ' | c -> c) s

let describe plugins =
  let rec load acc = function
    | [] -> Ok (List.rev acc)
    | p :: rest -> (
        let before = names () in
        match load_plugin_why p with
        | Error (`Bad_file why) -> Error (Printf.sprintf "BAD_PLUGIN\t%s" (one_line why))
        | Error (`Init_failed why) -> Error (Printf.sprintf "LOAD_FAILED\t%s" (one_line why))
        | Ok () ->
            let added = List.filter (fun n -> not (List.mem n before)) (names ()) in
            load (Printf.sprintf "PLUGIN\t%s\t%s" (one_line p) (String.concat "," added) :: acc) rest)
  in
  match load [] plugins with
  | Error record -> [ record ]
  | Ok loaded ->
      let drivers =
        List.concat_map
          (fun n ->
            match find n with
            | None -> []
            | Some d ->
                let i = info d in
                (Printf.sprintf "DRIVER\t%s\t%b" (one_line i.name) i.fault_injection
                :: List.map (fun (k, b) -> Printf.sprintf "KIT\t%s\t%b" k b) i.kit)
                @ List.map (fun (m, c, w) -> Printf.sprintf "MUTANT\t%s\t%s\t%s" (one_line m) c (one_line w)) i.info_mutants)
          (names ())
      in
      loaded @ drivers

let read_description records =
  let fields = List.map (String.split_on_char '\t') records in
  let empty_plugin =
    List.find_map (function [ "PLUGIN"; p; "" ] -> Some p | _ -> None) fields
  in
  let field tag = List.find_map (function [ t; why ] when t = tag -> Some why | _ -> None) fields in
  match (field "BAD_PLUGIN", field "LOAD_FAILED", empty_plugin) with
  | Some why, _, _ -> `Usage ("cannot load the driver plugin " ^ why)
  | _, Some why, _ -> `Load_failed why
  | _, _, Some p -> `Usage (Printf.sprintf "the plugin %s registered no driver (it must call Rig_edge_registry.register when it is loaded)" p)
  | None, None, None ->
      let rec go acc = function
        | [ "DRIVER"; name; inj ] :: rest ->
            go ({ name; kit = []; fault_injection = inj = "true"; info_mutants = [] } :: acc) rest
        | [ "KIT"; k; b ] :: rest -> (
            match acc with
            | d :: acc -> go ({ d with kit = d.kit @ [ (k, b = "true") ] } :: acc) rest
            | [] -> go acc rest)
        | [ "MUTANT"; m; c; w ] :: rest -> (
            match acc with
            | d :: acc -> go ({ d with info_mutants = d.info_mutants @ [ (m, c, w) ] } :: acc) rest
            | [] -> go acc rest)
        | _ :: rest -> go acc rest
        | [] -> List.rev acc
      in
      `Ok (go [] fields)
