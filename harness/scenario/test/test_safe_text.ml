(* Safe_text and Report.json_string on hostile bytes: the pieces of invalid
   UTF-8 (maximal subparts), what a terminal is shown, and, on random bytes,
   valid UTF-8 with no control byte out of every escaper. *)

let failures = ref 0

let check what ok =
  if not ok then begin
    incr failures;
    Printf.printf "FAIL %s\n" what
  end

let pieces s =
  let acc = ref [] in
  Safe_text.iter s ~valid:(fun _ b -> acc := `V b :: !acc) ~invalid:(fun b -> acc := `I b :: !acc);
  List.rev !acc

let show = String.escaped

let () =
  (* One invalid piece per maximal subpart. *)
  check "truncated euro sign is one piece" (pieces "a\xe2\x82b" = [ `V "a"; `I "\xe2\x82"; `V "b" ]);
  check "two bytes that start nothing are two pieces" (pieces "\xff\xfe" = [ `I "\xff"; `I "\xfe" ]);
  check "overlong slash is two pieces" (pieces "\xc0\xaf" = [ `I "\xc0"; `I "\xaf" ]);
  check "encoded surrogate is three pieces" (pieces "\xed\xa0\x80" = [ `I "\xed"; `I "\xa0"; `I "\x80" ]);
  check "valid UTF-8 is kept" (pieces "\xc3\xa9\xf0\x9f\x98\x80" = [ `V "\xc3\xa9"; `V "\xf0\x9f\x98\x80" ]);
  let t s expect =
    let got = Safe_text.terminal s in
    check (Printf.sprintf "terminal %s = %s (got %s)" (show s) (show expect) (show got)) (got = expect)
  in
  t "\x1b[31mred\x1b[0m" "\\x1b[31mred\\x1b[0m";
  t "a\nb\tc\rd\x7f" "a\\nb\\tc\\rd\\x7f";
  t "csi\xc2\x9b2J" "csi\\u{9b}2J";
  t "\xe2\x80\xaeevil" "\\u{202e}evil";
  t "caf\xc3\xa9 \xff\xe2\x82" "caf\xc3\xa9 \\xff\\xe2\\x82";
  check "utf8 replaces each piece" (Safe_text.utf8 "a\xe2\x82\xffb" = "a\xef\xbf\xbd\xef\xbf\xbdb");
  check "prefix cuts by characters" (Safe_text.prefix ~max:2 "\xc3\xa9\xc3\xa9\xc3\xa9" = Some "\xc3\xa9\xc3\xa9");
  check "prefix of a short string" (Safe_text.prefix ~max:3 "\xc3\xa9\xc3\xa9\xc3\xa9" = None);
  let j s expect =
    let got = Report.json_string s in
    check (Printf.sprintf "json_string %s = %s (got %s)" (show s) (show expect) (show got)) (got = expect)
  in
  j "a\"b\\c\n\x01\xff\xe2\x82\xc3\xa9" "\"a\\\"b\\\\c\\n\\u0001\\ufffd\\ufffd\xc3\xa9\"";
  j "\xc2\x85\xe2\x80\xa8" "\"\\u0085\\u2028\"";
  (* Random bytes: every escaper answers valid UTF-8 without control bytes
     (C0, DEL, C1 encoded as C2 80..9F). *)
  let no_control s =
    String.is_valid_utf_8 s
    &&
    let ok = ref true in
    Safe_text.iter s ~invalid:(fun _ -> ok := false) ~valid:(fun u _ -> if Safe_text.is_control u then ok := false);
    !ok
  in
  let st = Random.State.make [| 13 |] in
  for _ = 1 to 20000 do
    let s = String.init (Random.State.int st 12) (fun _ -> Char.chr (Random.State.int st 256)) in
    check ("terminal " ^ show s) (no_control (Safe_text.terminal s));
    check ("json_string " ^ show s) (no_control (Report.json_string s));
    check ("utf8 " ^ show s) (String.is_valid_utf_8 (Safe_text.utf8 s));
    check ("terminal keeps valid text " ^ show s)
      ((not (String.is_valid_utf_8 s)) || String.exists (fun c -> Char.code c < 0x20 || Char.code c >= 0x7f) s
      || Safe_text.terminal s = s)
  done;
  if !failures > 0 then (Printf.printf "%d failures\n" !failures; exit 1);
  print_endline "safe_text: ok"
