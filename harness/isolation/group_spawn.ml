(* Starting a child in a group of its own; see group_spawn.mli. *)
external spawn : string -> string array -> string array -> Unix.file_descr array -> int = "rig_iso_spawn"
