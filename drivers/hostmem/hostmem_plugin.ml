(* Loading this library (rig-conform --plugin rig_hostmem.cmxs) registers
   the driver under the name "hostmem". *)
let () = Rig_edge_registry.register ~more:Hostmem.kit_more (module Hostmem : Rig_edge.Package)
