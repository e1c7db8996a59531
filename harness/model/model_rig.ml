(* model.rig: model programs through the reference rig; see model_rig.mli. *)

open Model

let clauses =
  [ "CNT-1"; "CNT-2"; "CNT-3"; "CNT-4"; "CNT-6"; "LOCK-1"; "EXC-1"; "SIG-1"; "GUAR-1"; "GUAR-2"; "GUAR-3"; "GUAR-4";
    "GUAR-5"; "GUAR-6"; "GUAR-7"; "MEM-1"; "MEM-3"; "MEM-6"; "CODE-4"; "QUEUE-4"; "QUEUE-5"; "QUEUE-6"; "TIME-2";
    "STOP-1"; "STOP-7" ]

let rig_program p =
  let keep s =
    match s.cmd with
    | Sleep _ | Signaled _ | Peer _ | Commit _ -> None
    (* no fault launches: a rig mutant that mishandles one call then breaks
       a second clause through the Fault (STOP-1 after CNT-2's
       uncounted-sleep), and a mutant must show as its own clause only *)
    | Entry { role = Fault_fn; _ } -> None
    | Submit sub -> Some { s with cmd = Submit { sub with commit = true } }
    | Close c -> Some { s with cmd = Close { c with drain = true } }
    | _ -> Some s
  in
  List.filter_map (fun ph -> match List.filter_map keep ph with [] -> None | ph -> Some ph) p

module Run (P : Rig_edge.Package) = struct
  module E = Scenarios.Env (P)
  module R = E.R

  type value = Dev of R.device | Buf of R.buffer | Img of R.image | Ent of int64 | Sub of int

  let env : (sym, value) Hashtbl.t = Hashtbl.create 64
  let env_lock = Mutex.create ()
  let bind id v = Mutex.protect env_lock (fun () -> Hashtbl.replace env id v)
  let get id = Mutex.protect env_lock (fun () -> Hashtbl.find_opt env id)

  exception Not_run of string

  let dev id = match get id with Some (Dev d) -> d | _ -> raise (Not_run "no device")
  let buf id = match get id with Some (Buf b) -> b | _ -> raise (Not_run "no buffer")
  let host_pages = ref []  (* kept alive: a driver may map them until the end *)
  let pages_of : (sym, nativeint) Hashtbl.t = Hashtbl.create 8

  let function_of = function
    | Spin -> (match P.kit.spin with Some f -> f | None -> raise (Not_run "the kit has no spin"))
    | Fault_fn -> (match P.kit.fault with Some f -> f | None -> raise (Not_run "the kit has no fault"))
    | Hang_fn -> (match P.kit.hang with Some f -> f | None -> raise (Not_run "the kit has no hang"))
    | Absent_fn -> Model_exec.absent_function

  let exec { id; cmd } =
    match cmd with
    | Open o -> ( match E.open_ o with d -> bind id (Dev d); Made | exception Exit -> Skipped "no such opener")
    | Close { dev = d; _ } -> E.close (dev d); Closed { idle = true; stop_ms = 0.; word_after_stop = 0; settled = Some 0; late = None }
    | Alloc { dev = d; mem; size } -> bind id (Buf (R.alloc (dev d) mem size)); Made
    | Free r -> R.free (buf r); Made
    | Map_peer { dev = d; reg } -> bind id (Buf (R.map_peer (dev d) (buf reg))); Made
    | Map_host { dev = d; size; over } ->
        let addr =
          match Option.bind over (fun o -> Hashtbl.find_opt pages_of o) with
          | Some addr -> addr
          | None ->
              let addr, mem = Host_pages.alloc ((size + 4095) / 4096 * 4096) in
              host_pages := mem :: !host_pages;
              addr
        in
        Hashtbl.replace pages_of id addr;
        bind id (Buf (R.map_host (dev d) addr size));
        Made
    | Write { reg; off; bytes } -> R.write (buf reg) off bytes; Made
    | Read { reg; off; len } -> Bytes { got = R.read (buf reg) off len; host = None }
    | Load { dev = d; refused } -> (
        let bin =
          if refused then match P.kit.refused_binary with Some b -> b | None -> raise (Not_run "no refused_binary")
          else P.kit.binary
        in
        match R.load (dev d) bin with Ok i -> bind id (Img i); Made | Error why -> Refused why)
    | Entry { img; role } -> (
        match get img with
        | Some (Img i) -> (
            match E.entry i (function_of role) with Some h -> bind id (Ent h); Entry_answer (`Entry h) | None -> Entry_answer `Absent)
        | _ -> raise (Not_run "no image"))
    | Prepare { img; role } -> (
        match get img with Some (Img i) -> R.prepare i (function_of role); Made | _ -> raise (Not_run "no image"))
    | Submit { dev = d; parts; _ } ->
        let part = function
          | Fill { reg; off; len; byte } -> R.Fill (buf reg, off, len, byte)
          | Launch { ent; ms } -> (
              match get ent with Some (Ent h) -> R.Launch (h, [ R.Int ms ]) | _ -> raise (Not_run "no entry"))
        in
        let v = R.submit (dev d) (List.map part parts) in
        bind id (Sub v);
        Submitted { value = v; growths = 0 }
    | Wait { dev = d; sub } -> (
        match get sub with Some (Sub v) -> R.wait (dev d) v; Reached v | _ -> raise (Not_run "no submission"))
    | Sleep _ | Signaled _ | Peer _ | Commit _ -> Skipped "not a call of rig's"

  (* What rig answered, as the model's answers: a lost device and a failed
     request end what the program can do with it. *)
  let answer step =
    try exec step with
    | Not_run why -> Skipped why
    | Rig.Device_lost why -> Faulted why
    | Rig.Out_of_memory n -> Raised (Printf.sprintf "Out_of_memory %d" n)
    | Invalid_argument why -> Raised ("Invalid_argument " ^ why)
    | Validate.Abandoned _ as e -> raise e
    (* a rig that lets a driver's exception through (a mutant of the
       reference rig): what the validation layer saw is the finding *)
    | e -> Raised (Printexc.to_string e)

  let run program =
    Hashtbl.reset env;
    let st = ref initial in
    (try
       List.iter
         (fun phase ->
           let pre = !st in
           let runnable = List.filter (precond pre) phase in
           let results = ref [] in
           let record step a = Mutex.protect env_lock (fun () -> results := (step, a) :: !results) in
           (match runnable with
           | [ s ] -> record s (answer s)
           | steps ->
               List.map (fun s -> Thread.create (fun () -> record s (answer s)) ()) steps |> List.iter Thread.join);
           if Sys.getenv_opt "RIG_CONFORM_MODEL_TRACE" <> None then
             List.iter (fun (s, a) -> Printf.printf "rig: %s => %s\n" (Model_show.statement s) (string_of_answer a)) (List.rev !results);
           st := List.fold_left (fun st (s, a) -> next_state st s a) pre (List.rev !results))
         program
     with Validate.Abandoned _ -> ());
    E.close_all ();
    List.map Scenarios.of_violation (E.V.finish ())
end

let case =
  let run (module P : Rig_edge.Package) ~seed =
    let module M = Run (P) in
    let n = Model_cases.sequences () in
    let t0 = Unix.gettimeofday () in
    let rec go i =
      if i >= n || (i > 0 && Unix.gettimeofday () -. t0 > Model_cases.drawing_seconds && Sys.getenv_opt "RIG_CONFORM_SEQUENCES" = None) then Case.Ran []
      else
        let program = rig_program (Model_gen.program (Random.State.make [| seed; i; 1 |]) ~phases:Model_cases.phases) in
        match M.run program with
        | [] -> go (i + 1)
        | findings ->
            Case.Ran (List.map (fun (f : Case.finding) -> { f with detail = Printf.sprintf "%s (model sequence %d)" f.detail i }) findings)
    in
    go 0
  in
  { Case.name = "model.rig"; clauses; run }
