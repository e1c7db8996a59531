(* broken-stop-waits: stop drains the queue before it stops the device (for
   at most 3 s), the way a driver that "stops cleanly" does.  Breaks STOP-2:
   stop must not wait for the device's work. *)
module D = struct
  include Hostmem.D

  let stop d ~fault =
    let deadline = Unix.gettimeofday () +. 3.0 in
    while Hostmem.busy d && Unix.gettimeofday () < deadline do
      try sleep d ~seen:(signaled d) ~still_ms:10 with Fault _ -> ()
    done;
    Hostmem.D.stop d ~fault
end

let name = "broken-stop-waits"
let openers = Hostmem.openers
let kit = Hostmem.kit
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = openers let kit = kit end : Rig_edge.Package)
