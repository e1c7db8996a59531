(* broken-mutex-uncounted: alloc and free serialise on a plain Mutex of the
   driver's own (Mutex.protect, which gives it back on both paths) but never
   count it with rig_hold, so a thread inside them reads rig_holds () = 0
   while it holds that mutex and runs OCaml code.  Breaks LOCK-3: each lock
   a driver holds while OCaml code runs is counted, from before the take to
   after the give. *)
module D = struct
  include Hostmem.D

  let table = Mutex.create ()
  let alloc d m n = Mutex.protect table (fun () -> Hostmem.D.alloc d m n)
  let free d r = Mutex.protect table (fun () -> Hostmem.D.free d r)
end

let name = "broken-mutex-uncounted"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
