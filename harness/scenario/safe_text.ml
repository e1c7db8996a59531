(* Text from outside (a driver's bytes, a file name) made safe to print or to
   put in a report; see safe_text.mli. *)

let iter ~valid ~invalid s =
  let n = String.length s in
  let rec go i =
    if i < n then begin
      let d = String.get_utf_8_uchar s i in
      let len = Uchar.utf_decode_length d in
      if Uchar.utf_decode_is_valid d then valid (Uchar.utf_decode_uchar d) (String.sub s i len)
      else invalid (String.sub s i len);
      go (i + len)
    end
  in
  go 0

let map ~valid ~invalid s =
  let b = Buffer.create (String.length s + 8) in
  iter ~valid:(valid b) ~invalid:(invalid b) s;
  Buffer.contents b

let replacement = "\xef\xbf\xbd" (* U+FFFD in UTF-8 *)

let is_control u =
  let c = Uchar.to_int u in
  c < 0x20 || (c >= 0x7f && c <= 0x9f)

(* Bidirectional overrides and isolates: they reorder what a terminal or an
   editor shows (a line reads other than it is). *)
let is_bidi u =
  let c = Uchar.to_int u in
  (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)

let hex_bytes b bytes = String.iter (fun c -> Printf.bprintf b "\\x%02x" (Char.code c)) bytes

(* A control or a bidi character, shown as text. *)
let visible b u =
  match Uchar.to_int u with
  | 0x0a -> Buffer.add_string b "\\n"
  | 0x0d -> Buffer.add_string b "\\r"
  | 0x09 -> Buffer.add_string b "\\t"
  | c when c < 0x80 -> Printf.bprintf b "\\x%02x" c
  | c -> Printf.bprintf b "\\u{%x}" c

let terminal s =
  map s ~invalid:hex_bytes ~valid:(fun b u bytes ->
      if is_control u || is_bidi u then visible b u else Buffer.add_string b bytes)

let utf8 s = map s ~invalid:(fun b _ -> Buffer.add_string b replacement) ~valid:(fun b _ bytes -> Buffer.add_string b bytes)

let prefix ~max s =
  let count = ref 0 and stop = ref (String.length s) in
  (try
     let i = ref 0 in
     while !i < String.length s do
       if !count = max then (stop := !i; raise Exit);
       incr count;
       i := !i + Uchar.utf_decode_length (String.get_utf_8_uchar s !i)
     done
   with Exit -> ());
  if !stop = String.length s then None else Some (String.sub s 0 !stop)

(* A JSON string literal: valid UTF-8 (U+FFFD for invalid bytes), controls escaped. *)
let json_string s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  iter s
    ~invalid:(fun _ -> Buffer.add_string b "\\ufffd")
    ~valid:(fun u bytes ->
      match Uchar.to_int u with
      | 0x22 -> Buffer.add_string b "\\\""
      | 0x5c -> Buffer.add_string b "\\\\"
      | 0x0a -> Buffer.add_string b "\\n"
      | 0x09 -> Buffer.add_string b "\\t"
      | 0x0d -> Buffer.add_string b "\\r"
      | c when is_control u || c = 0x2028 || c = 0x2029 -> Printf.bprintf b "\\u%04x" c
      | _ -> Buffer.add_string b bytes);
  Buffer.add_char b '"';
  Buffer.contents b
