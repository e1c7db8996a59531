(* broken-thread-at-load: as its plugin loads, starts a housekeeping thread
   that every 50 ms counts the devices still open (for a statistics line),
   with an interval timer of its own: the thread unblocks SIGALRM, the
   timer's signal, for its life.  Breaks SIG-8: a thread the driver starts
   blocks signals for its life (Rig_edge_primitives.spawn), so that a
   signal sent to the process runs its handler on a thread of the
   program's. *)
let opened : Hostmem.D.t list Atomic.t = Atomic.make []
let open_count = Atomic.make 0

let rec remember d =
  let l = Atomic.get opened in
  if not (Atomic.compare_and_set opened l (d :: l)) then remember d

let housekeeping () =
  ignore (Thread.sigmask Unix.SIG_UNBLOCK [ Sys.sigalrm ]);
  while true do
    Thread.delay 0.05;
    Atomic.set open_count (List.length (List.filter (fun d -> not (Hostmem.stopped d)) (Atomic.get opened)))
  done

let () = ignore (Thread.create housekeeping ())

let openers () =
  List.map
    (fun (o : Hostmem.D.t Rig_edge.opener) ->
      let make () =
        let d = o.make () in
        remember d;
        d
      in
      { o with make })
    (Hostmem.openers ())

let name = "broken-thread-at-load"
let () = Rig_edge_registry.register (module struct module D = Hostmem.D let name = name let openers = openers let kit = Hostmem.kit end : Rig_edge.Package)
