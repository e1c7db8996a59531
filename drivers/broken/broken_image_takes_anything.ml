(* broken-image-takes-anything: image loads a binary it cannot read as an
   image with no function, instead of refusing it.  Breaks CODE-1. *)
module D = struct
  include Hostmem.D

  let image d b = match Hostmem.D.image d b with Error _ -> Hostmem.D.image d Hostmem.empty_image | ok -> ok
end

let name = "broken-image-takes-anything"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
