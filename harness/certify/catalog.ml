(* The clause catalog; see catalog.mli. *)

type clause = { id : string; side : string; section : string; text : string }

let all =
  String.split_on_char '\n' Catalog_data.tsv
  |> List.filter (fun l -> l <> "" && not (String.starts_with ~prefix:"id\t" l))
  |> List.map (fun l ->
         match String.split_on_char '\t' l with
         | [ id; side; section; text ] -> { id; side; section; text }
         | _ -> failwith ("spec/clauses.tsv: malformed line: " ^ l))

let find id = List.find_opt (fun c -> c.id = id) all

(* A glob of '*' only: enough for "STOP-*" and "*-3". *)
let glob_matches pattern s =
  let parts = String.split_on_char '*' pattern in
  let rec go pos first = function
    | [] -> pos = String.length s
    | [ last ] when not first ->
        String.length s - pos >= String.length last
        && String.sub s (String.length s - String.length last) (String.length last) = last
    | p :: rest ->
        let n = String.length p in
        if first then String.length s >= n && String.sub s 0 n = p && go n false rest
        else
          let rec find i =
            if i + n > String.length s then false
            else if String.sub s i n = p then go (i + n) false rest
            else find (i + 1)
          in
          find pos
  in
  go 0 true parts

let select patterns =
  let unmatched = List.find_opt (fun p -> not (List.exists (fun c -> glob_matches p c.id) all)) patterns in
  match unmatched with
  | Some p -> Error p
  | None -> Ok (List.filter (fun c -> List.exists (fun p -> glob_matches p c.id) patterns) all)
