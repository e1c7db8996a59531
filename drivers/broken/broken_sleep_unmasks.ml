(* broken-sleep-unmasks: sleep clears the thread's signal mask for its whole
   run (so that Ctrl-C can interrupt a long sleep) and puts it back at the
   end.  Its wait is still hostmem's, but a signal that came before it now
   runs its handler in the driver's own code, outside the wait.  Breaks
   SIG-2: a signal's handler runs in a driver only inside its waits. *)
module D = struct
  include Hostmem.D

  let sleep d ~seen ~still_ms =
    let old = Thread.sigmask Unix.SIG_SETMASK [] in
    Fun.protect
      ~finally:(fun () -> ignore (Thread.sigmask Unix.SIG_SETMASK old))
      (fun () -> Hostmem.D.sleep d ~seen ~still_ms)
end

let name = "broken-sleep-unmasks"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
