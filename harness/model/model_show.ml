(* Counterexamples for people and timelines; see model_show.mli. *)

open Model
open Model_exec

let spf = Printf.sprintf
let str = Model.show_bytes

let statement { id; cmd } =
  match cmd with
  | Open o -> spf "open d%d %d" id o
  | Close { dev; drain } -> spf "close d%d%s" dev (if drain then "" else " now")
  | Alloc { dev; mem; size } -> spf "alloc r%d d%d %s %d" id dev (string_of_memory mem) size
  | Free r -> spf "free r%d" r
  | Map_peer { dev; reg } -> spf "map_peer r%d d%d r%d" id dev reg
  | Map_host { dev; size; over } ->
      spf "map_host r%d d%d %d%s" id dev size (match over with Some o -> spf " over r%d" o | None -> "")
  | Write { reg; off; bytes } -> spf "write r%d %d %s" reg off (str bytes)
  | Read { reg; off; len } -> spf "read r%d %d %s" reg off (str (String.make len '\000'))
  | Load { dev; refused } -> spf "load i%d d%d %s" id dev (if refused then "refused" else "kit")
  | Entry { img; role } -> spf "entry e%d i%d %s" id img (string_of_role role)
  | Prepare { img; role } -> spf "prepare i%d %s" img (string_of_role role)
  | Commit d -> spf "commit d%d" d
  | Submit { dev; parts; commit } ->
      let part = function
        | Fill { reg; off; len; byte } -> spf "fill r%d %d %d %d" reg off len byte
        | Launch { ent; ms } -> spf "launch e%d %d" ent ms
      in
      spf "%s v%d d%d %s" (if commit then "submit" else "encode") id dev (String.concat " ; " (List.map part parts))
  | Wait { dev; sub } -> spf "wait d%d v%d" dev sub
  | Sleep { dev; seen; still_ms } -> spf "sleep d%d %s %d" dev (match seen with Current -> "current" | Other -> "other") still_ms
  | Signaled d -> spf "signaled d%d" d
  | Peer { dev; other } -> spf "peer d%d d%d" dev other

(* A read's statement with the bytes the run read. *)
let statement_seen ev =
  match (ev.step.cmd, ev.answer) with
  | Read { reg; off; len }, Bytes { got; _ } when String.length got = len -> spf "read r%d %d %s" reg off (str got)
  | _ -> statement ev.step

let utf8 = Safe_text.terminal

let table ~title o =
  let b = Buffer.create 1024 in
  Buffer.add_string b (title ^ "\n");
  let columns = 1 + List.fold_left (fun a e -> max a e.column) 0 o.events in
  let cell ev =
    let mark = match o.violation with Some v when v.at = ev.step.id -> "  <-- " ^ v.clause | _ -> "" in
    utf8 (spf "%s  => %s%s" (statement_seen ev) (string_of_answer ev.answer) mark)
  in
  let width =
    List.fold_left (fun a ev -> max a (String.length (cell ev))) 10 o.events |> min 70
  in
  let pad s = if String.length s >= width then s else s ^ String.make (width - String.length s) ' ' in
  let header = List.init columns (fun c -> pad (if c = 0 then "main" else spf "thread %d" c)) in
  Buffer.add_string b ("      " ^ String.concat " | " header ^ "\n");
  let by_phase = Hashtbl.create 16 in
  List.iter (fun ev -> Hashtbl.replace by_phase ev.phase (ev :: Option.value (Hashtbl.find_opt by_phase ev.phase) ~default:[])) o.events;
  let phases = Hashtbl.fold (fun k _ a -> k :: a) by_phase [] |> List.sort compare in
  List.iteri
    (fun n k ->
      let evs = List.rev (Hashtbl.find by_phase k) in
      let marked = match o.violation with Some v -> List.exists (fun e -> e.step.id = v.at) evs | None -> false in
      let row = List.init columns (fun c -> match List.find_opt (fun e -> e.column = c) evs with Some e -> pad (cell e) | None -> pad "") in
      Buffer.add_string b (spf "%s%3d  %s\n" (if marked then ">" else " ") (n + 1) (String.concat " | " row)))
    phases;
  (match o.violation with
  | Some v -> Buffer.add_string b (utf8 (spf "%s: %s" v.clause v.detail) ^ "\n")
  | None -> Buffer.add_string b "no violation\n");
  Buffer.contents b

let scenario ~name ~clause program events =
  let b = Buffer.create 1024 in
  Buffer.add_string b "# A counterexample the model found and shrank (rig-conform's model.* cases).\n";
  Buffer.add_string b (spf "scenario %s\nclauses %s\ndrives driver\n" (str name) clause);
  let seen id = List.find_opt (fun e -> e.step.id = id) events in
  let line step = match seen step.id with Some ev -> statement_seen ev | None -> statement step in
  List.iteri
    (fun k phase ->
      match phase with
      | [ step ] -> Buffer.add_string b (line step ^ "\n")
      | steps ->
          List.iteri (fun c s -> Buffer.add_string b (spf "spawn t%d_%d %s\n" (k + 1) (c + 1) (line s))) steps;
          List.iteri (fun c _ -> Buffer.add_string b (spf "join t%d_%d\n" (k + 1) (c + 1))) steps)
    program;
  Buffer.contents b

let json = Safe_text.json_string

let chrome_trace o =
  let ev e =
    let violated = match o.violation with Some v when v.at = e.step.id -> spf ",\"violation\":%s" (json (v.clause ^ ": " ^ v.detail)) | _ -> "" in
    spf "{\"name\":%s,\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.0f,\"dur\":%.0f,\"args\":{\"answer\":%s%s}}" (json (statement e.step))
      e.column (e.t0 *. 1000.) (max 1. ((e.t1 -. e.t0) *. 1000.)) (json (string_of_answer e.answer)) violated
  in
  let names =
    List.sort_uniq compare (List.map (fun e -> e.column) o.events)
    |> List.map (fun c ->
           spf "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":%s}}" c
             (json (if c = 0 then "main" else spf "thread %d" c)))
  in
  spf "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[%s]}\n" (String.concat ",\n" (names @ List.map ev o.events))

(* ------------------------------------------------------------ replay *)

exception Bad of string

let program_of_scenario (stmts : Scenario_syntax.stmt list) =
  let module S = Scenario_syntax in
  let names = Hashtbl.create 16 in
  let next = ref 0 in
  let fresh n =
    incr next;
    Hashtbl.replace names n !next;
    !next
  in
  let sym n = match Hashtbl.find_opt names n with Some s -> s | None -> raise (Bad (n ^ " is not declared")) in
  let bad (st : S.stmt) = raise (Bad (spf "line %d: %s is not a step of the model" st.line (S.string_of_stmt st))) in
  let role st = function
    | S.Word "spin" -> Spin
    | S.Word "fault" -> Fault_fn
    | S.Word "absent" -> Absent_fn
    | S.Word "hang" -> Hang_fn
    | _ -> bad st
  in
  let rec parts st acc = function
    | [] -> List.rev acc
    | S.Sep :: rest -> parts st acc rest
    | S.Word "fill" :: S.Word r :: S.Int off :: S.Int len :: S.Int byte :: rest ->
        parts st (Fill { reg = sym r; off; len; byte } :: acc) rest
    | S.Word "launch" :: S.Word e :: S.Int ms :: rest -> parts st (Launch { ent = sym e; ms } :: acc) rest
    | S.Word "launch" :: S.Word e :: rest -> parts st (Launch { ent = sym e; ms = 0 } :: acc) rest
    | _ -> bad st
  in
  let step (st : S.stmt) verb args =
    let mk cmd = Some (cmd, None) in
    let decl n cmd = Some (cmd, Some n) in
    match (verb, args) with
    | "open", [ S.Word n; S.Int o ] -> decl n (Open o)
    | "close", [ S.Word d ] -> mk (Close { dev = sym d; drain = true })
    | "close", [ S.Word d; S.Word "now" ] -> mk (Close { dev = sym d; drain = false })
    | "alloc", [ S.Word n; S.Word d; S.Word k; S.Int size ] ->
        let mem = match k with "device" -> Rig_edge.Device | "mapped" -> Mapped | _ -> Pinned in
        decl n (Alloc { dev = sym d; mem; size })
    | "free", [ S.Word r ] -> mk (Free (sym r))
    | "map_peer", [ S.Word n; S.Word d; S.Word r ] -> decl n (Map_peer { dev = sym d; reg = sym r })
    | "map_host", [ S.Word n; S.Word d; S.Int size ] -> decl n (Map_host { dev = sym d; size; over = None })
    | "map_host", [ S.Word n; S.Word d; S.Int size; S.Word "over"; S.Word o ] ->
        decl n (Map_host { dev = sym d; size; over = Some (sym o) })
    | "write", [ S.Word r; S.Int off; S.Str bytes ] -> mk (Write { reg = sym r; off; bytes })
    | "read", [ S.Word r; S.Int off; S.Str bytes ] -> mk (Read { reg = sym r; off; len = String.length bytes })
    | "load", [ S.Word n; S.Word d; S.Word k ] when k = "kit" || k = "refused" -> decl n (Load { dev = sym d; refused = k = "refused" })
    | "entry", [ S.Word n; S.Word i; r ] -> decl n (Entry { img = sym i; role = role st r })
    | "prepare", [ S.Word i; r ] -> mk (Prepare { img = sym i; role = role st r })
    | "submit", S.Word n :: S.Word d :: rest -> decl n (Submit { dev = sym d; parts = parts st [] rest; commit = true })
    | "encode", S.Word n :: S.Word d :: rest -> decl n (Submit { dev = sym d; parts = parts st [] rest; commit = false })
    | "commit", [ S.Word d ] -> mk (Commit (sym d))
    | "wait", [ S.Word d; S.Word v ] -> mk (Wait { dev = sym d; sub = sym v })
    | "sleep", [ S.Word d; S.Word seen; S.Int still_ms ] ->
        mk (Sleep { dev = sym d; seen = (if seen = "other" then Other else Current); still_ms })
    | "signaled", [ S.Word d ] -> mk (Signaled (sym d))
    | "peer", [ S.Word a; S.Word b ] -> mk (Peer { dev = sym a; other = sym b })
    | _ -> bad st
  in
  let to_step st verb args =
    match step st verb args with
    | Some (cmd, decl) ->
        let id = match decl with Some n -> fresh n | None -> (incr next; !next) in
        { id; cmd }
    | None -> bad st
  in
  try
    let phases = ref [] and group = ref [] and open_threads = ref [] in
    List.iter
      (fun (st : S.stmt) ->
        match (st.verb, st.args) with
        | "spawn", S.Word t :: S.Word verb :: args ->
            group := to_step st verb args :: !group;
            open_threads := t :: !open_threads
        | "join", [ S.Word t ] ->
            open_threads := List.filter (( <> ) t) !open_threads;
            if !open_threads = [] && !group <> [] then (
              phases := List.rev !group :: !phases;
              group := [])
        | _ ->
            if !group <> [] then raise (Bad (spf "line %d: a statement before the spawned threads were joined" st.line));
            phases := [ to_step st st.verb st.args ] :: !phases)
      stmts;
    if !group <> [] then raise (Bad "spawned threads that are never joined");
    Ok (List.rev !phases)
  with Bad why -> Error why
