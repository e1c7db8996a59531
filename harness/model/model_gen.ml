(* Drawing programs; see model_gen.mli. *)

open Model

(* The answer generation assumes: success, as far as the state allows. *)
let presumed st { cmd; _ } =
  match cmd with
  | Open _ | Alloc _ | Free _ | Map_peer _ | Map_host _ | Write _ | Prepare _ | Commit _ -> Made
  | Load { refused; _ } -> if refused then Refused "presumed" else Made
  | Entry { role = Absent_fn; _ } -> Entry_answer `Absent
  | Entry _ -> Entry_answer (`Entry 0L)
  | Submit { dev; _ } -> Submitted { value = dev_last st dev + 1; growths = 0 }
  | Wait { dev; _ } when faulting st dev -> Faulted "presumed"
  | Sleep { dev; _ } when faulting st dev -> Faulted "presumed"
  | Wait { sub; _ } -> Reached (Option.value (sub_value st sub) ~default:0)
  | Read _ -> Bytes { got = ""; host = None }
  | Sleep _ -> Slept { ms = 0.; cpu_wait_ms = 0.; concurrent = false }
  | Signaled _ -> Word 0
  | Peer _ -> Bool false
  | Close _ -> Closed { idle = true; stop_ms = 0.; word_after_stop = 0; settled = Some 0; late = None }

(* What the presumed state has, to name in commands. *)
type names = { devs : sym list; regs : sym list; imgs : sym list; ents : sym list; subs : sym list }

let pick rng = function [] -> None | l -> Some (List.nth l (Random.State.int rng (List.length l)))

(* Weighted choice among the candidates that apply. *)
let weighted rng cands =
  let total = List.fold_left (fun a (w, _) -> a + w) 0 cands in
  if total = 0 then None
  else
    let r = Random.State.int rng total in
    let rec go acc = function
      | [] -> None
      | (w, f) :: rest -> if r < acc + w then Some f else go (acc + w) rest
    in
    go 0 cands

let size rng =
  match Random.State.int rng 6 with
  | 0 -> 4
  | 1 -> 4096
  | 2 -> 4 * (1 + Random.State.int rng 1024)
  | _ -> 4 * (1 + Random.State.int rng 32)

(* Letters and digits: patterns a person reads in a counterexample. *)
let alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
let bytes rng n = String.init n (fun _ -> alphabet.[Random.State.int rng (String.length alphabet)])

(* A command of the kind drawn, naming what [st] has; None if it has not
   what the kind needs. *)
let draw rng st (n : names) =
  let int k = Random.State.int rng k in
  let dev () = pick rng n.devs in
  let regs_of d = List.filter (fun r -> region_device st r = Some d) n.regs in
  (* a span within the region, often at its end (the last word of a
     host mapping, MEM-7) *)
  let span_in r =
    let size = Option.value (region_size st r) ~default:4 in
    let len = 1 + int (min size 16) in
    let off = match int 3 with 0 -> 0 | 1 -> size - len | _ -> int (size - len + 1) in
    (r, off, len)
  in
  let cands =
    [ (if List.length n.devs < 2 then 3 else 0), (fun () -> Some (Open (if List.length n.devs = 0 then 0 else int 2)));
      (1, fun () -> Option.map (fun d -> Close { dev = d; drain = int 4 > 0 }) (dev ()));
      ( 5,
        fun () ->
          Option.map
            (fun d ->
              let mem = match int 6 with 0 -> Rig_edge.Mapped | 1 -> Pinned | _ -> Device in
              Alloc { dev = d; mem; size = size rng })
            (dev ()) );
      (2, fun () -> Option.map (fun r -> Free r) (pick rng n.regs));
      ( 1,
        fun () ->
          match (dev (), pick rng n.regs) with
          | Some d, Some r when region_device st r <> Some d -> Some (Map_peer { dev = d; reg = r })
          | _ -> None );
      ( 1,
        fun () ->
          Option.map
            (fun d ->
              (* now and then the pages of an earlier host mapping again *)
              match List.filter (fun r -> is_host_mapping st r) n.regs with
              | o :: _ when int 3 = 0 -> Map_host { dev = d; size = Option.value (host_pages_of st o) ~default:4096; over = Some o }
              | _ -> Map_host { dev = d; size = 1 + int 9000; over = None })
            (dev ()) );
      ( 5,
        fun () ->
          Option.map
            (fun r ->
              let r, off, len = span_in r in
              Write { reg = r; off; bytes = bytes rng len })
            (pick rng n.regs) );
      ( 5,
        fun () ->
          Option.map
            (fun r ->
              let r, off, len = span_in r in
              Read { reg = r; off; len })
            (pick rng n.regs) );
      ((if n.imgs = [] then 3 else 1), fun () -> Option.map (fun d -> Load { dev = d; refused = int 4 = 0 }) (dev ()));
      ( 3,
        fun () ->
          Option.map
            (fun i ->
              let role = match int 25 with 0 | 9 -> Fault_fn | 1 | 2 | 3 | 4 -> Absent_fn | 5 | 6 | 7 | 8 -> Hang_fn | _ -> Spin in
              Entry { img = i; role })
            (pick rng n.imgs) );
      ( 1,
        fun () ->
          Option.map (fun i -> Prepare { img = i; role = (match int 4 with 0 -> Absent_fn | 1 -> Hang_fn | _ -> Spin) }) (pick rng n.imgs) );
      ( 6,
        fun () ->
          match dev () with
          | None -> None
          | Some d ->
              let fills = regs_of d in
              let ents = List.filter (fun e -> precond st { id = 0; cmd = Submit { dev = d; parts = [ Launch { ent = e; ms = 1 } ]; commit = true } }) n.ents in
              (* now and then many parts (fills: their work is short), more
                 than a queue holds, so that room asks for growths *)
              let count = if int 6 = 0 then 8 + int 120 else 1 + int 3 in
              let part () =
                match ((if count > 8 then 1 else int 3), pick rng fills, pick rng ents) with
                | 0, _, Some e -> Some (Launch { ent = e; ms = 1 + int 40 })
                | _, Some r, _ ->
                    let r, off, len = span_in r in
                    Some (Fill { reg = r; off; len; byte = int 256 })
                | _, None, Some e -> Some (Launch { ent = e; ms = 1 + int 40 })
                | _ -> None
              in
              let parts = List.filter_map (fun _ -> part ()) (List.init count Fun.id) in
              if parts = [] then None else Some (Submit { dev = d; parts; commit = int 5 > 0 }) );
      (1, fun () -> Option.map (fun d -> Commit d) (dev ()));
      ( 4,
        fun () ->
          match List.rev n.subs with
          | s :: older ->
              let s = if older <> [] && int 4 = 0 then Option.get (pick rng older) else s in
              Option.bind (List.find_opt (fun d -> precond st { id = 0; cmd = Wait { dev = d; sub = s } }) n.devs) (fun d ->
                  Some (Wait { dev = d; sub = s }))
          | [] -> None );
      ( 3,
        fun () ->
          Option.map
            (fun d ->
              if int 3 = 0 then Sleep { dev = d; seen = Other; still_ms = 2000 + int 2000 }
              else Sleep { dev = d; seen = Current; still_ms = (if int 8 = 0 then 600 + int 200 else 1 + int 100) })
            (dev ()) );
      (2, fun () -> Option.map (fun d -> Signaled d) (dev ()));
      ( 1,
        fun () ->
          match (dev (), dev ()) with Some a, Some b when a <> b -> Some (Peer { dev = a; other = b }) | _ -> None );
    ]
  in
  match weighted rng cands with Some f -> f () | None -> None

(* The names a presumed state offers, from the steps so far. *)
let names_of st made =
  let keep f = List.filter f made in
  {
    devs = keep (fun (id, c) -> (match c with Open _ -> true | _ -> false) && precond st { id = 0; cmd = Signaled id }) |> List.map fst;
    regs =
      keep (fun (id, c) ->
          (match c with Alloc _ | Map_peer _ | Map_host _ -> true | _ -> false)
          && region_device st id <> None)
      |> List.map fst;
    imgs = keep (fun (id, c) -> (match c with Load _ -> true | _ -> false) && precond st { id = 0; cmd = Prepare { img = id; role = Spin } }) |> List.map fst;
    ents = keep (fun (_, c) -> match c with Entry _ -> true | _ -> false) |> List.map fst;
    subs = keep (fun (id, c) -> (match c with Submit _ -> true | _ -> false) && sub_value st id <> None) |> List.map fst;
  }

(* Commands that usually follow one, as a program uses what it just made:
   each takes the id of the step placed before it. *)
let follow_ups rng st { id; cmd } =
  let int k = Random.State.int rng k in
  let size r = Option.value (region_size st r) ~default:4 in
  match cmd with
  | Alloc { size = n; _ } when int 2 = 0 -> [ (fun _ -> Write { reg = id; off = 0; bytes = bytes rng (min n 64) }) ]
  | Close { dev; _ } when int 2 = 0 -> (match opener_of st dev with Some o -> [ (fun _ -> Open o) ] | None -> [])
  | Submit { dev; commit = true; parts } -> (
      let launch = List.find_opt (function Launch _ -> true | Fill _ -> false) parts in
      match (int 10, launch) with
      | (0 | 1 | 2 | 3 | 4 | 5), _ -> [ (fun sub -> Wait { dev; sub }) ]
      | (6 | 7), Some (Launch l) ->
          (* stopped with its work running, and more given to submit after
             it, so that the last value is not the running work's. The
             launch drawn may be over before stop comes, so a long one is
             queued behind it (committed apart: a committing submit draws
             follow-ups of its own), and stop comes once the drawn one has
             ended: the long one is then running, whatever the machine's
             load did to the worker's start *)
          [ (fun _ -> Submit { dev; parts = [ Launch { l with ms = 30 + int 30 } ]; commit = false });
            (fun _ -> Commit dev);
            (fun _ -> Wait { dev; sub = id });
            (fun _ -> Submit { dev; parts = [ Launch { l with ms = 1 } ]; commit = false });
            (fun _ -> Close { dev; drain = false }) ]
      | _ -> [])
  | Entry { img; role = Fault_fn } when int 4 < 3 -> (
      match image_device st img with
      | Some dev ->
          (fun _ -> Submit { dev; parts = [ Launch { ent = id; ms = 0 } ]; commit = true })
          :: List.init (int 3) (fun _ -> fun _ -> Signaled dev)
          @ [ (fun _ -> Sleep { dev; seen = Current; still_ms = 50 }); (fun _ -> Sleep { dev; seen = Current; still_ms = 50 }) ]
          @ List.concat_map (fun d -> if d <> dev then [ (fun _ -> Peer { dev; other = d }); (fun _ -> Peer { dev = d; other = dev }) ] else []) (open_devices st)
          (* the launch's wait sees the Fault; rig closes the lost device and
             the program opens its name again *)
          @ [ (fun _ -> Wait { dev; sub = id + 1 }); (fun _ -> Close { dev; drain = true }) ]
          @ (match opener_of st dev with Some o -> [ (fun _ -> Open o) ] | None -> [])
      | None -> [])
  | Open _ ->
      (* a second device: rig asks peer both ways, and the answers must hold *)
      List.concat_map
        (fun d -> if d <> id then [ (fun _ -> Peer { dev = id; other = d }); (fun _ -> Peer { dev = d; other = id }) ] else [])
        (open_devices st)
  | Entry { img; role = Spin } when int 2 = 0 -> (
      (* the entry is for a launch *)
      match image_device st img with
      | Some dev -> [ (fun _ -> Submit { dev; parts = [ Launch { ent = id; ms = 1 + int 60 } ]; commit = true }) ]
      | None -> [])
  | Entry { img; role } when role <> Fault_fn && int 2 = 0 ->
      (* rig asks again, for the next launch, perhaps after other functions' prepares *)
      let other = match role with Spin -> Hang_fn | _ -> Spin in
      (if int 2 = 0 then [ (fun _ -> Prepare { img; role = other }) ] else [])
      @ [ (fun _ -> Entry { img; role }) ]
  | Map_peer { reg; _ } ->
      let len = 1 + int (min 16 (size reg)) in
      let off = int (size reg - len + 1) in
      [ (fun _ -> Write { reg; off; bytes = bytes rng len }); (fun _ -> Read { reg = id; off; len }) ]
  | Map_host { dev; size = n; _ } ->
      let top = (n + Rig_edge.word - 1) / Rig_edge.word * Rig_edge.word in
      let len = 1 + int (min 16 top) in
      let off = top - len in
      [ (fun _ -> Submit { dev; parts = [ Fill { reg = id; off; len; byte = 1 + int 255 } ]; commit = true });
        (fun sub -> Wait { dev; sub });
        (fun _ -> Read { reg = id; off; len }) ]
  | _ -> []

let program rng ~phases =
  let place st made next_id acc phase =
    let st = List.fold_left (fun st s -> next_state st s (presumed st s)) st phase in
    let made = List.rev_append (List.map (fun s -> (s.id, s.cmd)) phase) made in
    (st, made, next_id + List.length phase, phase :: acc)
  in
  (* a step and the steps that follow it, each kept if it applies *)
  let rec place_with_follow_ups (st, made, next_id, acc) phase =
    let ((st', _, _, _) as placed) = place st made next_id acc phase in
    match phase with
    | [ step ] ->
        List.fold_left
          (fun ((st, _, next_id, acc) as placed) f ->
            let prev = match acc with (s :: _) :: _ -> s.id | _ -> step.id in
            let s = { id = next_id; cmd = f prev } in
            if phase_ok st [ s ] then place_with_follow_ups placed [ s ] else placed)
          placed (follow_ups rng st' step)
    | _ -> placed
  in
  let rec go ((st, made, next_id, _) as g) k =
    if k >= phases then g
    else
      let n = names_of st (List.rev made) in
      let width = if n.devs <> [] && Random.State.int rng 6 = 0 then 2 + Random.State.int rng 2 else 1 in
      let rec attempt tries =
        if tries = 0 then None
        else
          let cmds = List.filter_map (fun _ -> draw rng st n) (List.init width Fun.id) in
          let phase = List.mapi (fun i cmd -> { id = next_id + i; cmd }) cmds in
          if phase <> [] && List.length phase = width && phase_ok st phase then Some phase else attempt (tries - 1)
      in
      match attempt 20 with
      | None -> go g (k + 1)
      | Some phase -> go (place_with_follow_ups g phase) (k + 1)
  in
  let start = place initial [] 1 [] [ { id = 1; cmd = Open 0 } ] in
  let start =
    if Random.State.bool rng then
      let st, _, next_id, _ = start in
      let s = { id = next_id; cmd = Open 1 } in
      if phase_ok st [ s ] then (let st, made, n, acc = start in place st made n acc [ s ]) else start
    else start
  in
  let st, made, next_id, acc = go start 0 in
  (* the end: every device still open is closed, and judged *)
  let _, _, _, acc =
    List.fold_left
      (fun (st, made, next_id, acc) (id, cmd) ->
        match cmd with
        | Open _ ->
            let s = { id = next_id; cmd = Close { dev = id; drain = Random.State.int rng 4 > 0 } } in
            if phase_ok st [ s ] then place st made next_id acc [ s ] else (st, made, next_id, acc)
        | _ -> (st, made, next_id, acc))
      (st, made, next_id, acc) (List.rev made)
  in
  List.rev acc
