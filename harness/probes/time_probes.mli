(** Timeline probes of the document: TIME-3, TIME-4, TIME-5, TIME-6: sleep on the word (early return, bound, faults, sleep during a submit).  Built on {!Probes.Kit};
    names ["probe.<CLAUSE>.<what>"]. *)

(** In clause order. *)
val cases : Case.t list
