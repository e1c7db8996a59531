(* The driver registry; see rig_edge_registry.mli. *)

let table : (string * (module Rig_edge.Package)) list ref = ref []

let register (module P : Rig_edge.Package) =
  if List.mem_assoc P.name !table then invalid_arg ("a driver named " ^ P.name ^ " is already registered");
  table := !table @ [ (P.name, (module P : Rig_edge.Package)) ]

let find name = List.assoc_opt name !table
let names () = List.map fst !table
