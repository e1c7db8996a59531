let () = List.iter Rig_edge_registry.register Blindset.packages
