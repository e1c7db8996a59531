(** Code probes of the document: CODE-1, CODE-2, CODE-3, CODE-5, CODE-6, CODE-7: image, entry, No_memory, too big, prepare.  Built on {!Probes.Kit};
    names ["probe.<CLAUSE>.<what>"]. *)

(** In clause order. *)
val cases : Case.t list
