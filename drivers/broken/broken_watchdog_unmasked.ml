(* broken-watchdog-unmasked: each opener's make also starts a watchdog
   thread for the device, which clears its signal mask at its start (so
   that its own timers' signals reach it) and runs until the device stops.
   Breaks SIG-8: a thread the driver starts must block signals for its
   life (Rig_edge_primitives.spawn), so that a signal sent to the process
   runs its handler on a thread of the program's. *)
let watchdog (d, started) =
  ignore (Thread.sigmask Unix.SIG_SETMASK []);
  Event.sync (Event.send started ());
  while not (Hostmem.stopped d) do
    Thread.delay 0.01
  done

let openers () =
  List.map
    (fun (o : Hostmem.D.t Rig_edge.opener) ->
      let make () =
        (* make returns once its watchdog runs, as drivers that hand work
           to a thread of their own usually do.  That part, too, runs with
           the caller's signals blocked (SIG-6: for make's whole run). *)
        Rig_edge_primitives.masked (fun () ->
            let d = o.make () in
            let started = Event.new_channel () in
            ignore (Thread.create watchdog (d, started));
            Event.sync (Event.receive started);
            d)
      in
      { o with make })
    (Hostmem.openers ())

let name = "broken-watchdog-unmasked"
let () = Rig_edge_registry.register (module struct module D = Hostmem.D let name = name let openers = openers let kit = Hostmem.kit end : Rig_edge.Package)
