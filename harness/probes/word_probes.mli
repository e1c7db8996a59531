(** Driver-side probe of what signaled answers: the word itself, read by
    signaled alone, with no sleep to move it along (TIME-1). *)

val cases : Case.t list
