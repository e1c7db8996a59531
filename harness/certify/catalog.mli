(** The clause catalog (spec/clauses.tsv, compiled in): IDs, sides and the
    document's words, in the catalog's order. *)

type clause = { id : string; side : string; section : string; text : string }

val all : clause list
val find : string -> clause option

(** [select patterns] is the clauses matching any pattern: an exact ID or a
    glob with [*] ("STOP-*").  [Error p] names the first pattern that
    matches nothing. *)
val select : string list -> (clause list, string) result
