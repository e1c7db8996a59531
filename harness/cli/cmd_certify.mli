(** [rig-conform certify]: a verdict per clause of the catalog for a driver,
    printed and written as JSON, JUnit XML and Markdown; always a whole
    report, also when the driver's plugin cannot be loaded (every clause
    fails) or a stop signal comes (what was done). *)

val main : string list -> unit
