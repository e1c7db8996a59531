(* OCaml side of the scenario parser: the C stub (scn_stubs.c) builds the
   statements; this module splits off the header (scenario, clauses,
   needs) and reads files. *)

type arg = Word of string | Int of int | Str of string | Sep | Kv of string * string

type stmt = { line : int; col : int; verb : string; args : arg list; expect : string option }

type t = { name : string; clauses : string list; needs_fake : bool; stmts : stmt list }

external c_parse : string -> string -> (stmt list, string) result = "caml_scn_parse"

let parse ~file text =
  match c_parse file text with
  | Error _ as e -> e
  | Ok all ->
      (* The C parser guarantees: scenario first with one Str, clauses once
         with Words, needs at most once; all before any other statement. *)
      let name = ref "" and clauses = ref [] and needs_fake = ref false in
      let stmts =
        List.filter
          (fun s ->
            match s.verb, s.args with
            | "scenario", [ Str n ] -> name := n; false
            | "clauses", ids ->
                clauses := List.filter_map (function Word w -> Some w | _ -> None) ids;
                false
            | "needs", _ -> needs_fake := true; false
            | _ -> true)
          all
      in
      Ok { name = !name; clauses = !clauses; needs_fake = !needs_fake; stmts }

let parse_file path =
  match In_channel.with_open_bin path In_channel.input_all with
  | text -> parse ~file:path text
  | exception Sys_error msg -> Error (Printf.sprintf "%s: cannot read: %s" path msg)

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
