(* broken-sleep-keeps-runtime: sleep's blocking step polls the word in C
   (broken_sleep_keeps_runtime_stubs.c) without releasing the OCaml
   runtime, inside Rig_edge_primitives.wait as it should.  No other OCaml
   thread runs while it blocks.  Breaks SIG-3: a wait's blocking step
   releases the OCaml runtime while it blocks, as a blocking stub does. *)
external wait_keeping_runtime : Hostmem.D.t -> int -> int -> unit = "broken_skr_wait"

module D = struct
  include Hostmem.D

  let sleep d ~seen ~still_ms =
    (* still_ms 0: raises a recorded fault and returns, as hostmem does. *)
    Hostmem.D.sleep d ~seen ~still_ms:0;
    if Hostmem.D.signaled d = seen && still_ms > 0 then begin
      Rig_edge_primitives.wait (fun () -> wait_keeping_runtime d seen still_ms);
      Hostmem.D.sleep d ~seen ~still_ms:0
    end
end

let name = "broken-sleep-keeps-runtime"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
