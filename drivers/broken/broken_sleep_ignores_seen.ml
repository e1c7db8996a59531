(* broken-sleep-ignores-seen: sleep waits for the next change of the word,
   from what it reads now, whatever seen is.  Breaks TIME-3: sleep must
   return at once when the word already differs from seen. *)
module D = struct
  include Hostmem.D

  let sleep d ~seen:_ ~still_ms = Hostmem.D.sleep d ~seen:(Hostmem.D.signaled d) ~still_ms
end

let name = "broken-sleep-ignores-seen"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
