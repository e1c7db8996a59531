(** Stopping probes of the document: STOP-2, STOP-3, STOP-4, STOP-5, STOP-6, STOP-8: stop with work hanging, running or encoded, the word after stop, frees after it.  Built on {!Probes.Kit};
    names ["probe.<CLAUSE>.<what>"]. *)

(** In clause order. *)
val cases : Case.t list
