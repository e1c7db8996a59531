(** Bytes from outside (what a driver wrote, a scenario file's name, a
    scenario's strings) made safe for a terminal or a report: valid UTF-8,
    no control characters.

    Invalid UTF-8 is decoded by OCaml's [String.get_utf_8_uchar], which
    follows Unicode's "substitution of maximal subparts" (Unicode 15, 3.9,
    U+FFFD Substitution; also the WHATWG Encoding Standard): each maximal
    subpart of an ill-formed sequence (a lone continuation byte, a truncated
    sequence, an overlong form or an encoded surrogate, byte by byte as far
    as it could start a valid sequence) is one invalid piece.  So "\xe2\x82"
    (a truncated euro sign) is one piece, "\xff\xfe" two. *)

(** [iter ~valid ~invalid s] walks [s]: [valid u bytes] for each well-formed
    character (its code point and its bytes in [s]), [invalid bytes] for
    each maximal invalid subpart. *)
val iter : valid:(Uchar.t -> string -> unit) -> invalid:(string -> unit) -> string -> unit

(** [map ~valid ~invalid s]: the same walk, each piece written to a buffer
    by [valid b u bytes] or [invalid b bytes]; answers the buffer. *)
val map : valid:(Buffer.t -> Uchar.t -> string -> unit) -> invalid:(Buffer.t -> string -> unit) -> string -> string

(** U+FFFD REPLACEMENT CHARACTER, in UTF-8. *)
val replacement : string

(** C0 controls (U+0000..U+001F, tab and line feed included), DEL and the
    C1 controls (U+007F..U+009F). *)
val is_control : Uchar.t -> bool

(** [visible b u]: a character written as text: ["\\n"], ["\\r"], ["\\t"],
    ["\\xHH"] below U+0080, ["\\u{HHHH}"] above. *)
val visible : Buffer.t -> Uchar.t -> unit

(** For a terminal: valid UTF-8 with no byte that moves the cursor, recolours
    or reorders the text.  Controls and the bidirectional overrides and
    isolates (U+202A..U+202E, U+2066..U+2069) are shown by {!visible}; each
    byte of an invalid piece as ["\\xHH"]; the rest is kept as it is. *)
val terminal : string -> string

(** Valid UTF-8: each invalid piece replaced by one U+FFFD, the rest kept
    (controls included). *)
val utf8 : string -> string

(** [prefix ~max s]: [Some p] with the first [max] characters of [s] (an
    invalid piece counts as one) when [s] has more, else [None]; never cuts
    a character. *)
val prefix : max:int -> string -> string option

(** [json_string s]: [s] as a JSON string literal, quotes included: valid
    UTF-8 (each maximal invalid subpart becomes \ufffd), control characters
    and U+2028/U+2029 escaped. *)
val json_string : string -> string
