(* The drivers; see drivers.mli. *)

type t = {
  package : (module Rig_edge.Package);
  reset : unit -> unit;
  mutants : (string * string * string) list;
  set_mutant : string option -> unit;
  inject : (Injection.t -> unit) option;
}

let () = Rig_edge_registry.register (module Fake : Rig_edge.Package)

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

let load_plugin path =
  if not (Sys.file_exists path) then Error (path ^ ": no such file")
  else
    try Ok (Dynlink.loadfile (Dynlink.adapt_filename path)) with
    | Dynlink.Error e -> Error (path ^ ": " ^ Dynlink.error_message e)
    | e -> Error (path ^ ": its initialisation raised " ^ Printexc.to_string e)
