(* Each case's time limit; see case_limits.mli. *)

let table =
  lazy
    (String.split_on_char '\n' Case_seconds_data.tsv
    |> List.filter_map (fun l ->
           if l = "" || l.[0] = '#' then None
           else
             match String.split_on_char '\t' l with
             | [ name; s ] -> Option.map (fun s -> (name, s)) (float_of_string_opt s)
             | _ -> None))

let seconds_on_fake name = List.assoc_opt name (Lazy.force table)

let limit name =
  match seconds_on_fake name with Some s -> Float.max 120. (40. *. s) | None -> 120.

let to_tsv rows =
  "# The wall time of each case's clean run on the conforming fake driver (the\n\
   # longest of seeds 1-3), from which its time limit on any driver is derived\n\
   # (Case_limits).  Written by: rig-conform calibrate\n"
  ^ String.concat "" (List.map (fun (n, s) -> Printf.sprintf "%s\t%.2f\n" n (Float.ceil (s *. 100.) /. 100.)) rows)
