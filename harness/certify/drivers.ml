(* The bundled drivers; see drivers.mli. *)

type t = {
  package : (module Rig_edge.Package);
  reset : unit -> unit;
  mutants : (string * string * string) list;
  set_mutant : string option -> unit;
}

let fake =
  { package = (module Fake : Rig_edge.Package); reset = Fake.reset; mutants = Fake.mutants;
    set_mutant = Fake.set_mutant }

let table = [ ("fake", fake) ]
let names = List.map fst table
let find name = List.assoc_opt name table
