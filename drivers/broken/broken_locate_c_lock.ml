(* broken-locate-c-lock: locate reads the region's handle through a C stub
   (broken_locate_c_lock_stubs.c) that takes the driver's table mutex
   around the read, "so that a concurrent free cannot tear it".  The mutex
   is a plain pthread one, uncounted (it is given back before the stub
   returns) and never held long, so locate never blocks and checks
   nothing.  Breaks LOCK-5: locate must take no lock. *)
external handle_locked : int -> int = "broken_lcl_handle" [@@noalloc]

module D = struct
  include Hostmem.D

  let locate d r =
    let a = Hostmem.D.locate d r in
    { a with handle = Int64.of_int (handle_locked (Int64.to_int a.handle)) }
end

let name = "broken-locate-c-lock"
let () = Rig_edge_registry.register (module struct module D = D let name = name let openers = Hostmem.openers let kit = Hostmem.kit end : Rig_edge.Package)
