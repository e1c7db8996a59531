(** Verdicts per clause from the results of a run, and the reports: the
    console table and out/certify/report.json (format in docs/report-format.md). *)

type verdict = Pass | Fail | Na | Unchecked

val verdict_name : verdict -> string

(** [clause_of_hang ?inside case fn]: the clause a call of [fn] that never
    returned fails, whatever [case] checked ([inside]: the driver call it
    was made from, on the same thread); [None]: the case's own clauses. *)
val clause_of_hang : ?inside:string -> Case.t -> string -> string option

type line = {
  clause : Catalog.clause;
  verdict : verdict;
  evidence : string;
  repro : string option;  (** for a fail: the command line that replays it *)
}

(** [verdicts ~cases ~selected results]: one line per catalog clause.  A
    clause no case checks, or not [selected], is [Unchecked]; one with a
    finding, a crash or a timeout of a case that checks it is [Fail]; one
    whose cases were all not applicable is [Na]; otherwise [Pass].  Findings
    that rest on a premise another check finds broken are not judged: where
    TIME-1 fails, those of other clauses in runs that asked signaled (they
    rest on signaled reading the word); where probe.MEM-2.given-back fails,
    those of other clauses in runs that called free. *)
val verdicts : cases:Case.t list -> selected:Catalog.clause list -> Runner.result list -> line list

(** Why a clause no case checks is unchecked (what is missing, or where
    else it is checked). *)
val why_unchecked : string -> string

(** The clauses each result flagged (findings, crashes and timeouts),
    under the same premises as {!verdicts}. *)
val flagged : Runner.result list -> string list

(** The table on stdout; evidence and replay lines through {!for_terminal}. *)
val print_table : color:bool -> line list -> unit

(** [for_terminal ?max s]: [s] safe to print on a terminal
    ({!Safe_text.terminal}: no control byte, no invalid UTF-8, shown as
    [\x1b]...), cut to [max] characters (the last three "...") when longer. *)
val for_terminal : ?max:int -> string -> string

(** [write_json path ~driver ~seeds ~interrupted ~runs lines]: the verdicts,
    and every run with its outcome (so that shards' reports can be joined). *)
val write_json :
  ?declared:(string * bool) list ->
  ?load_error:string ->
  string -> driver:string -> seeds:int list -> interrupted:bool -> runs:Runner.result list -> line list -> unit
(** [declared]: what the driver's kit offers (each item, present or not), so
    that a reader sees why a clause came out n/a.  [load_error]: how the
    driver's plugin failed to load, when it did (every clause then fails). *)

(** JSON string literal of any bytes, valid UTF-8 JSON: each maximal
    invalid subpart of ill-formed UTF-8 ({!Safe_text}) is one [\ufffd];
    controls (C0, DEL, C1), U+2028 and U+2029 are [\u] escapes. *)
val json_string : string -> string

(** [write_junit path ~driver lines]: JUnit XML for CI systems, one
    testcase per clause: a failure (evidence and replay line) for a fail,
    skipped (with the reason) for n/a and unchecked.  Well-formed XML 1.0
    whatever the bytes: invalid UTF-8, U+FFFE and U+FFFF become U+FFFD,
    controls are shown as text ([\x1b]), attribute values keep their tabs
    and line ends as character references. *)
val write_junit : string -> driver:string -> line list -> unit

(** [write_markdown path ~driver lines]: the conformance matrix: clause,
    the document's words, verdict, evidence, replay.  Valid UTF-8 with no
    control byte whatever the bytes; one row a line; pipes escaped in
    cells; no HTML from the evidence. *)
val write_markdown : string -> driver:string -> line list -> unit
