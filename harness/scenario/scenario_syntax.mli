(** The scenario language's syntax (docs/scenario-language.md): a binding to
    the C parser scn_parse.c, which checks each verb, the shape of its
    arguments and the names (declared before use, of the right sort, never
    twice).  What the statements do is the interpreter's business
    (harness/certify/scenario_run.ml). *)

(** One argument, as written.  [Str] holds the bytes after escapes (it may
    contain NUL); [Int] is decimal or 0x hex; [Kv (key, value)] is a
    configure word [KEY=VALUE], the value kept as written ("65536", "0x100",
    "true"); [Sep] is the [;] between the parts of a submit. *)
type arg = Word of string | Int of int | Str of string | Sep | Kv of string * string

(** One statement.  [line] and [col] are those of the verb (1-based, [col]
    counts bytes).  [args] is everything after the verb up to [=>] or the
    end of the line; for [spawn] it is the thread's name, the spawned verb
    (a [Word]) and that statement's arguments.  [expect] is the outcome
    after [=>] ([None]: none written, which means ok). *)
type stmt = { line : int; col : int; verb : string; args : arg list; expect : string option; cols : int list }
(** [cols]: the column of each of [args], in order (all on [line]). *)

(** A scenario: its name (from [scenario "..."]), its clause IDs (from
    [clauses]), whether it says [needs fake], whether it says [drives driver] (its statements call the driver directly, run by the model's executor), and its other statements in
    file order. *)
type t = { name : string; clauses : string list; clauses_at : (int * int) list; needs_fake : bool; drives_driver : bool; stmts : stmt list }
(** [clauses_at]: the line and column of each of [clauses], in order (for
    messages about a clause ID, such as one not in the catalog). *)

(** [parse ~file text] parses [text]; [file] is only used in messages.  The
    error is the C parser's ["FILE:LINE:COL: expected WHAT, found WHAT"]. *)
val parse : file:string -> string -> (t, string) result

(** [parse_file path] reads and parses [path]; it never blocks and never
    reads more than {!max_bytes} + 1 bytes.  [path] is opened without
    blocking (O_NONBLOCK) and checked on what was opened: [Error "PATH: not
    a regular file (a named pipe)"] (a FIFO, a device such as /dev/zero
    behind a symbolic link, a directory...), [Error "PATH: too large (N
    bytes; ...)"], [Error "PATH: cannot read: REASON"].  In every message,
    and as the parser's FILE, PATH is shown with {!Safe_text.terminal}: no
    control byte of a file name reaches a terminal. *)
val parse_file : string -> (t, string) result

(** The size cap of a scenario file: 1 MiB (the bundled ones are under 1 KiB). *)
val max_bytes : int

(** The argument as written in a scenario (strings re-escaped), for
    messages and for printing a statement back. *)
val string_of_arg : arg -> string

(** The statement as one line of the language (without comments). *)
val string_of_stmt : stmt -> string
