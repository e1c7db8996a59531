(* Shrinking; see model_shrink.mli. *)

open Model

let size p = List.length (List.concat p)

(* Every list with one chunk of [k] elements left out, from the left. *)
let without_chunk l i k = List.filteri (fun j _ -> j < i || j >= i + k) l

(* Simpler forms of one command, simplest first. *)
let simpler cmd =
  let forms =
  match cmd with
  | Submit { dev; parts; commit } ->
      let n = List.length parts in
      let drops = List.init n (fun i -> Submit { dev; parts = without_chunk parts i 1; commit }) in
      let short =
        List.map
          (function
            | Launch l -> Launch { l with ms = min l.ms 1 }
            | Fill f -> Fill { f with len = 1 })
          parts
      in
      (if n > 1 then [ Submit { dev; parts = [ List.hd parts ]; commit } ] else []) @ drops @ [ Submit { dev; parts = short; commit } ]
  | Write { reg; off; bytes } when String.length bytes > 1 -> [ Write { reg; off; bytes = String.sub bytes 0 1 } ]
  | Read { reg; off; len } when len > 1 -> [ Read { reg; off; len = 1 } ]
  | Alloc { dev; mem; size } ->
      (if mem <> Rig_edge.Device then [ Alloc { dev; mem = Device; size } ] else [])
      @ if size > 64 then [ Alloc { dev; mem; size = 64 } ] else []
  | Close { dev; drain = false } -> [ Close { dev; drain = true } ]
  | Sleep { dev; seen = Current; still_ms } when still_ms > 10 -> [ Sleep { dev; seen = Current; still_ms = 10 } ]
  | _ -> []
  in
  List.filter (fun c -> c <> cmd) forms

(* Ids 1, 2, 3... in program order, so that a counterexample reads d1, r2... *)
let renumber p =
  let map = Hashtbl.create 16 in
  let next = ref 0 in
  let p =
    List.map
      (List.map (fun s ->
           incr next;
           Hashtbl.replace map s.id !next;
           s))
      p
  in
  let f s = match Hashtbl.find_opt map s with Some n -> n | None -> s in
  List.map (List.map (fun s -> { id = f s.id; cmd = map_syms f s.cmd })) p

let shrink ~fails ~budget ~seconds p =
  let runs = ref 0 in
  let deadline = Unix.gettimeofday () +. seconds in
  let try_ c =
    if !runs >= budget || Unix.gettimeofday () > deadline then false
    else (
      incr runs;
      fails c)
  in
  (* 1: drop chunks of phases, halving the chunk *)
  let rec chunks p k =
    if k < 1 then p
    else
      let rec at p i =
        if i >= List.length p then p
        else
          let c = without_chunk p i k in
          if c <> [] && try_ c then at c i else at p (i + k)
      in
      chunks (at p 0) (if k = 1 then 0 else k / 2)
  in
  let p = chunks p (max 1 (List.length p / 2)) in
  (* 2: a phase of several steps: one step fewer, or one after another *)
  let rec phases p i =
    if i >= List.length p then p
    else
      let ph = List.nth p i in
      let replace_by l = List.concat (List.mapi (fun j x -> if j = i then l else [ x ]) p) in
      if List.length ph > 1 then
        let fewer = List.init (List.length ph) (fun j -> replace_by [ without_chunk ph j 1 ]) in
        match List.find_opt try_ fewer with
        | Some c -> phases c i
        | None ->
            let seq = replace_by (List.map (fun s -> [ s ]) ph) in
            if try_ seq then phases seq i else phases p (i + 1)
      else phases p (i + 1)
  in
  let p = phases p 0 in
  let p = chunks p 1 in
  (* 3: simpler arguments, step by step *)
  let rec args p i =
    let steps = List.concat p in
    if i >= List.length steps then p
    else
      let s = List.nth steps i in
      let with_cmd cmd = List.map (List.map (fun x -> if x.id = s.id then { x with cmd } else x)) p in
      match List.find_opt (fun c -> try_ (with_cmd c)) (simpler s.cmd) with
      | Some c -> args (with_cmd c) i
      | None -> args p (i + 1)
  in
  let p = args p 0 in
  (p, !runs)
