(* broken-watchdog-unmasked: each opener's make also starts a watchdog
   thread for the device, which clears its signal mask at its start (so
   that its own timers' signals reach it) and runs until the device stops.
   Breaks SIG-8: a thread the driver starts must block signals for its
   life (Rig_edge_primitives.spawn), so that a signal sent to the process
   runs its handler on a thread of the program's. *)
let watchdog d =
  ignore (Thread.sigmask Unix.SIG_SETMASK []);
  while not (Hostmem.stopped d) do
    Thread.delay 0.01
  done

let openers () =
  List.map
    (fun (o : Hostmem.D.t Rig_edge.opener) ->
      let make () =
        let d = o.make () in
        ignore (Thread.create watchdog d);
        d
      in
      { o with make })
    (Hostmem.openers ())

let name = "broken-watchdog-unmasked"
let () = Rig_edge_registry.register (module struct module D = Hostmem.D let name = name let openers = openers let kit = Hostmem.kit end : Rig_edge.Package)
