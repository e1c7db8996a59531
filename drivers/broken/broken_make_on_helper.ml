(* broken-make-on-helper: each opener's make opens the device on a helper
   thread of the driver's (so that a slow open runs off the caller's
   thread) and waits for it.  The helper holds no lock, so hostmem's check
   of rig_holds passes there, whatever the caller holds.  Breaks LOCK-4:
   make must raise Invalid_argument, having opened nothing, while the
   calling thread holds a lock. *)
module Prim = Rig_edge_primitives

let openers () =
  List.map
    (fun (o : Hostmem.D.t Rig_edge.opener) ->
      let make () =
        let got = ref (Error Not_found) in
        Thread.join (Prim.spawn (fun () -> got := (try Ok (o.make ()) with e -> Error e)));
        match !got with Ok d -> d | Error e -> raise e
      in
      { o with make })
    (Hostmem.openers ())

let name = "broken-make-on-helper"
let () = Rig_edge_registry.register (module struct module D = Hostmem.D let name = name let openers = openers let kit = Hostmem.kit end : Rig_edge.Package)
