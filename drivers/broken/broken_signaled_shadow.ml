(* broken-signaled-shadow: signaled answers a copy of the word that sleep
   refreshes (to spare a read of the device), and the word itself once the
   device is stopped.  Breaks TIME-1: signaled must be the value in the
   word, without a sleep to move it along. *)

(* Per device (by Hostmem.id): the copy, or -1 once stopped.  Read without a
   lock, as signaled must. *)
let shadows : (int * int Atomic.t) list Atomic.t = Atomic.make []

let rec shadow_of d =
  let id = Hostmem.id d in
  let l = Atomic.get shadows in
  match List.assoc_opt id l with
  | Some s -> s
  | None ->
      let s = Atomic.make 0 in
      if Atomic.compare_and_set shadows l ((id, s) :: l) then s else shadow_of d

module D = struct
  include Hostmem.D

  let signaled d =
    let s = Atomic.get (shadow_of d) in
    if s < 0 then Hostmem.D.signaled d else s

  let sleep d ~seen ~still_ms =
    let refresh () =
      let s = shadow_of d in
      if Atomic.get s >= 0 then Atomic.set s (Hostmem.D.signaled d)
    in
    Fun.protect ~finally:refresh (fun () -> Hostmem.D.sleep d ~seen ~still_ms)

  let stop d ~fault =
    Hostmem.D.stop d ~fault;
    Atomic.set (shadow_of d) (-1)
end

let name = "broken-signaled-shadow"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
