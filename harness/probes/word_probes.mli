(** Driver-side probe of what signaled answers: the word itself, read by
    signaled alone, with no sleep to move it along (TIME-1). *)

val cases : Case.t list

(** [signaled_wrong (module P) ~seed]: TIME-1's finding where this probe
    shows that signaled does not read the word, else [None]: the premise
    of every finding read through signaled (STOP-3's, the model's). *)
val signaled_wrong : (module Rig_edge.Package) -> seed:int -> Case.finding option
