(* OCaml side of the scenario parser: the C stub (scn_stubs.c) builds the
   statements; this module splits off the header (scenario, clauses,
   needs) and reads files. *)

type arg = Word of string | Int of int | Str of string | Sep | Kv of string * string

type stmt = { line : int; col : int; verb : string; args : arg list; expect : string option; cols : int list }

type t = { name : string; clauses : string list; clauses_at : (int * int) list; needs_fake : bool; drives_driver : bool; stmts : stmt list }

external c_parse : string -> string -> (stmt list, string) result = "caml_scn_parse"

let parse ~file text =
  match c_parse file text with
  | Error _ as e -> e
  | Ok all ->
      (* The C parser guarantees: scenario first with one Str, clauses once
         with Words, needs at most once; all before any other statement. *)
      let name = ref "" and clauses = ref [] and clauses_at = ref [] and needs_fake = ref false and drives = ref false in
      let stmts =
        List.filter
          (fun s ->
            match s.verb, s.args with
            | "scenario", [ Str n ] -> name := n; false
            | "clauses", ids ->
                let words = List.filter_map (function Word w, col -> Some (w, (s.line, col)) | _ -> None) (List.combine ids s.cols) in
                clauses := List.map fst words;
                clauses_at := List.map snd words;
                false
            | "needs", _ -> needs_fake := true; false
            | "drives", _ -> drives := true; false
            | _ -> true)
          all
      in
      Ok { name = !name; clauses = !clauses; clauses_at = !clauses_at; needs_fake = !needs_fake; drives_driver = !drives; stmts }

let max_bytes = 1 lsl 20

let kind_name = function
  | Unix.S_DIR -> "a directory"
  | S_CHR -> "a character device"
  | S_BLK -> "a block device"
  | S_FIFO -> "a named pipe"
  | S_SOCK -> "a socket"
  | S_LNK -> "a symbolic link"
  | S_REG -> "a regular file"

(* Opened without blocking (a FIFO's open waits for a writer), then fstat on
   what was opened (no race between a stat and the open): only a regular
   file of at most max_bytes is read, and never more than max_bytes + 1
   bytes, even if it grows meanwhile. *)
let read_bounded path =
  let shown = Safe_text.terminal path in
  match Unix.openfile path [ O_RDONLY; O_NONBLOCK; O_CLOEXEC ] 0 with
  | exception Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: cannot read: %s" shown (Unix.error_message e))
  | fd ->
      Fun.protect
        ~finally:(fun () -> Unix.close fd)
        (fun () ->
          match Unix.fstat fd with
          | exception Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: cannot read: %s" shown (Unix.error_message e))
          | { st_kind = S_REG; st_size; _ } when st_size > max_bytes ->
              Error (Printf.sprintf "%s: too large (%d bytes; a scenario file has at most %d)" shown st_size max_bytes)
          | { st_kind = S_REG; _ } -> (
              (* Read in chunks: a buffer of the largest size allowed, for
                 each file of every run's start, cost more than the parse. *)
              let chunk = Bytes.create 4096 and text = Buffer.create 4096 in
              let rec fill () =
                if Buffer.length text > max_bytes then ()
                else
                  match Unix.read fd chunk 0 (Bytes.length chunk) with
                  | 0 -> ()
                  | k -> Buffer.add_subbytes text chunk 0 k; fill ()
              in
              match fill () with
              | () when Buffer.length text > max_bytes ->
                  Error (Printf.sprintf "%s: too large (over %d bytes; a scenario file has at most %d)" shown max_bytes max_bytes)
              | () -> Ok (Buffer.contents text)
              | exception Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: cannot read: %s" shown (Unix.error_message e)))
          | { st_kind; _ } -> Error (Printf.sprintf "%s: not a regular file (%s)" shown (kind_name st_kind)))

let parse_file path = Result.bind (read_bounded path) (parse ~file:(Safe_text.terminal path))

let escape s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  String.iter
    (fun c ->
      match c with
      | '"' -> Buffer.add_string b "\\\""
      | '\\' -> Buffer.add_string b "\\\\"
      | '\n' -> Buffer.add_string b "\\n"
      | '\t' -> Buffer.add_string b "\\t"
      | c when Char.code c < 0x20 || Char.code c = 0x7f ->
          Buffer.add_string b (Printf.sprintf "\\x%02x" (Char.code c))
      | c -> Buffer.add_char b c)
    s;
  Buffer.add_char b '"';
  Buffer.contents b

let string_of_arg = function
  | Word w -> w
  | Int i -> string_of_int i
  | Str s -> escape s
  | Sep -> ";"
  | Kv (k, v) -> k ^ "=" ^ v

let string_of_stmt s =
  String.concat " "
    ((s.verb :: List.map string_of_arg s.args)
    @ match s.expect with None -> [] | Some o -> [ "=>"; o ])
