(* broken-prepare-raises: prepare makes the entry at once and reports a
   function the image lacks with Not_found.  Breaks CODE-6: prepare must
   report nothing, failures included. *)
module D = struct
  include Hostmem.D

  let prepare i f = match Hostmem.D.entry i f with Rig_edge.Absent -> raise Not_found | _ -> ()
end

let name = "broken-prepare-raises"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
