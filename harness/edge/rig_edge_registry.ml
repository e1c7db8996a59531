(* The driver registry; see rig_edge_registry.mli. *)

let table : (string * ((module Rig_edge.Package) * Rig_edge.kit_more)) list ref = ref []

let register ?(more = Rig_edge.kit_more ()) (module P : Rig_edge.Package) =
  if List.mem_assoc P.name !table then invalid_arg ("a driver named " ^ P.name ^ " is already registered");
  table := !table @ [ (P.name, ((module P : Rig_edge.Package), more)) ]

let find name = Option.map fst (List.assoc_opt name !table)
let more name = match List.assoc_opt name !table with Some (_, m) -> m | None -> Rig_edge.kit_more ()
let names () = List.map fst !table
