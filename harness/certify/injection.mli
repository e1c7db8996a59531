(** One failure injected into one driver call, as a sweep or a replay line
    names it: FN:NTH:KIND, the [nth] call of [fn] answering [kind]. *)

type t = { fn : string; nth : int; kind : string }

(** The failure kinds: "fault" (the driver's Fault, or a failed submit or
    commit), "raise" (another exception), "fail" (a failed submit or commit). *)
val kinds : string list

(** The kinds the document allows from a function, for a sweep. *)
val kinds_for : string -> string list

val of_string : string -> (t, string) result
val to_string : t -> string
