let () =
  match Array.to_list Sys.argv with
  | [ _; "list" ] -> List.iter (fun (n, ex, _, _) -> Printf.printf "%s\t%s\n" n ex) Rg2_rigs.all
  | [ _; "run"; name ] -> (
    match List.find_opt (fun (n, _, _, _) -> n = name) Rg2_rigs.all with
    | None -> prerr_endline ("unknown rig " ^ name); exit 2
    | Some (_, _, bug, program) ->
      Rg2.bug := bug;
      let outcome = match program () with () -> None | exception e -> Some (Printexc.to_string e) in
      let vs = Rg2.V.finish () in
      if Sys.getenv_opt "RG2_EVENTS" <> None then
        List.iter (fun (e : Validate.event) ->
            Printf.eprintf "%d t%d %s %s%s %s\n" e.seq e.thread e.device e.fn (if e.counted then "" else "(u)")
              (match e.phase with Start -> "start" | Return s -> "ret " ^ s | Raise s -> "raise " ^ s)) (Rg2.V.events ());
      List.iter (fun (v : Validate.violation) ->
          let one = String.map (function '\n' | '\t' -> ' ' | c -> c) v.detail in
          Printf.printf "%s\t%s\n" v.clause one) vs;
      match outcome with
      | None -> exit 0
      | Some e -> Printf.printf "ERROR\t%s\n" e; exit 1)
  | _ -> prerr_endline "usage: rg2_check.exe list | run NAME"; exit 2
