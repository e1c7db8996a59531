(* broken-exit-at-load: as its plugin loads, registers an exit handler that
   reports on stderr the devices a program left open (not stopped), a leak
   report at exit.  The handler's body runs unshielded, on whatever thread
   exits.  Breaks SIG-7: exit handlers block signals with rig_shield, so
   that no signal's exception escapes them or skips the handlers after
   them. *)
let opened : Hostmem.D.t list Atomic.t = Atomic.make []

let rec remember d =
  let l = Atomic.get opened in
  if not (Atomic.compare_and_set opened l (d :: l)) then remember d

let () =
  at_exit (fun () ->
      let left = List.filter (fun d -> not (Hostmem.stopped d)) (Atomic.get opened) in
      if left <> [] then prerr_endline (Printf.sprintf "broken-exit-at-load: %d device(s) left open at exit" (List.length left)))

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

let name = "broken-exit-at-load"
let () = Rig_edge_registry.register (module struct module D = Hostmem.D let name = name let openers = openers let kit = Hostmem.kit end : Rig_edge.Package)
