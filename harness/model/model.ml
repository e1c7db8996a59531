(* The model of the document; see model.mli. *)

type sym = int
type memory = Rig_edge.memory
type role = Spin | Fault_fn | Hang_fn | Absent_fn

type part =
  | Fill of { reg : sym; off : int; len : int; byte : int }
  | Launch of { ent : sym; ms : int }

type seen = Current | Other

type cmd =
  | Open of int
  | Close of { dev : sym; drain : bool }
  | Alloc of { dev : sym; mem : memory; size : int }
  | Free of sym
  | Map_peer of { dev : sym; reg : sym }
  | Map_host of { dev : sym; size : int; over : sym option }
  | Write of { reg : sym; off : int; bytes : string }
  | Read of { reg : sym; off : int; len : int }
  | Load of { dev : sym; refused : bool }
  | Entry of { img : sym; role : role }
  | Prepare of { img : sym; role : role }
  | Submit of { dev : sym; parts : part list; commit : bool }
  | Commit of sym
  | Wait of { dev : sym; sub : sym }
  | Sleep of { dev : sym; seen : seen; still_ms : int }
  | Signaled of sym
  | Peer of { dev : sym; other : sym }

type step = { id : sym; cmd : cmd }
type phase = step list
type program = phase list

type answer =
  | Made
  | Nothing
  | Refused of string
  | Bytes of { got : string; host : string option }
  | Unreachable
  | Entry_answer of [ `Entry of int64 | `Absent | `No_memory of int ]
  | Submitted of { value : int; growths : int }
  | Regrow of int
  | No_room of int
  | Submit_failed of { value : int; why : string }
  | Reached of int
  | Timed_out of int
  | Slept of { ms : float; cpu_wait_ms : float; concurrent : bool }
  | Word of int
  | Bool of bool
  | Closed of { idle : bool; stop_ms : float; word_after_stop : int; settled : int option; late : int option }
  | Faulted of string
  | Raised of string
  | Skipped of string

let clauses =
  [ "MEM-2"; "MEM-4"; "MEM-5"; "MEM-7"; "CODE-1"; "CODE-2"; "CODE-6"; "QUEUE-2"; "TIME-1"; "TIME-3";
    "TIME-4"; "TIME-5"; "TIME-6"; "STOP-3"; "STOP-5"; "STOP-6" ]

module IM = Map.Make (Int)

(* ------------------------------------------------------------ the state *)

type dev = {
  opener : int;
  lost : bool;  (* a Fault, a failed submit, an exception that loses it *)
  faulting : bool;  (* a fault launch was submitted: a Fault may come from any call *)
  faulted : bool;  (* a Fault was seen: every later sleep must raise it (TIME-5) *)
  stopped : bool;
  last : int;  (* the last value given to submit *)
  committed : int;  (* the last value committed: what a wait may wait for *)
  confirmed : int;  (* the highest value a wait saw the word reach *)
  stuck : bool;  (* a wait timed out: its work may never end *)
  lone_sleep_ok : bool;  (* a sleep alone on the device returned in time *)
  first_word : int option;  (* signaled before any submit *)
}

(* A byte of a region's memory, as far as the model knows it: Known (and
   which region wrote it), or Pending the fill of a submission (of device
   [dev], value [value]) that a wait has not yet seen done. *)
type byte_state = Unknown | Known of char * sym | Pending of { dev : sym; value : int; c : char; writer : sym }

type kind = K_alloc | K_peer | K_host

type reg = {
  rdev : sym;
  cell : sym;  (* the memory it shows: its own id, or the region a peer mapping maps *)
  size : int;  (* the bytes a fill or a host access may touch *)
  kind : kind;
  rmem : memory option;  (* what alloc made: a peer mapping's is its region's *)
  mapped_by : sym list;  (* live peer mappings over it *)
  busy_until : int;  (* the value of the last submission whose fill uses it *)
  pages : int;  (* a map_host region: the bytes of the host pages it maps *)
}

type img = { idev : sym; prepared : role list }
type ent = { eimg : sym; erole : role; eanswer : [ `Entry of int64 | `Absent | `No_memory of int ] }
type sub = { sdev : sym; value : int; has_launch : bool }

type state = {
  devs : dev IM.t;
  regs : reg IM.t;
  imgs : img IM.t;
  ents : ent IM.t;
  subs : sub IM.t;
  cells : byte_state array IM.t;  (* copied on change: the state stays pure *)
  peers : bool IM.t;  (* by pair: the first answer of peer *)
  entries_seen : [ `Entry of int64 | `Absent | `No_memory of int ] IM.t;  (* by (img, role) *)
}

let initial =
  { devs = IM.empty; regs = IM.empty; imgs = IM.empty; ents = IM.empty; subs = IM.empty; cells = IM.empty;
    peers = IM.empty; entries_seen = IM.empty }

let spf = Printf.sprintf
let find m k = IM.find_opt k m
let pair a b = (a * 1_000_003) + b
let role_code = function Spin -> 0 | Fault_fn -> 1 | Absent_fn -> 2 | Hang_fn -> 3
let img_role i r = (i * 4) + role_code r

(* A device rig may make counted calls of. *)
let usable st d = match find st.devs d with Some v -> (not v.stopped) && not v.lost | None -> false
let open_dev st d = match find st.devs d with Some v -> not v.stopped | None -> false
let dev_last st d = match find st.devs d with Some v -> v.last | None -> 0
let sub_value st s = Option.map (fun s -> s.value) (find st.subs s)
let is_host_mapping st r = match find st.regs r with Some { kind = K_host; _ } -> true | _ -> false
let region_device st r = Option.map (fun g -> g.rdev) (find st.regs r)

let host_pages_of st r = match find st.regs r with Some { kind = K_host; pages; _ } -> Some pages | _ -> None
let region_size st r = Option.map (fun g -> g.size) (find st.regs r)

let faulting st d = match find st.devs d with Some v -> v.faulting | None -> false
let opener_of st d = Option.map (fun v -> v.opener) (find st.devs d)
let open_devices st = IM.bindings st.devs |> List.filter (fun (_, v) -> not v.stopped) |> List.map fst
let image_device st i = Option.map (fun i -> i.idev) (find st.imgs i)


let cell_of st r = match find st.regs r with Some g -> find st.cells g.cell | None -> None

let pending_in st r off len =
  match cell_of st r with
  | None -> false
  | Some c ->
      let rec go i = i < len && (match c.(off + i) with Pending _ -> true | _ -> go (i + 1)) in
      go 0

(* [map_syms f cmd]: the command naming [f s] for each [s] it names. *)
let map_syms f cmd =
  let part = function
    | Fill p -> Fill { p with reg = f p.reg }
    | Launch l -> Launch { l with ent = f l.ent }
  in
  match cmd with
  | Open _ -> cmd
  | Close c -> Close { c with dev = f c.dev }
  | Alloc a -> Alloc { a with dev = f a.dev }
  | Free r -> Free (f r)
  | Map_peer m -> Map_peer { dev = f m.dev; reg = f m.reg }
  | Map_host m -> Map_host { m with dev = f m.dev; over = Option.map f m.over }
  | Write w -> Write { w with reg = f w.reg }
  | Read r -> Read { r with reg = f r.reg }
  | Load l -> Load { l with dev = f l.dev }
  | Entry e -> Entry { e with img = f e.img }
  | Prepare p -> Prepare { p with img = f p.img }
  | Submit s -> Submit { s with dev = f s.dev; parts = List.map part s.parts }
  | Commit d -> Commit (f d)
  | Wait w -> Wait { dev = f w.dev; sub = f w.sub }
  | Sleep s -> Sleep { s with dev = f s.dev }
  | Signaled d -> Signaled (f d)
  | Peer p -> Peer { dev = f p.dev; other = f p.other }

(* ------------------------------------------------------------ precond *)

let in_range st r off len =
  match find st.regs r with Some g -> off >= 0 && len > 0 && off + len <= g.size | None -> false

let part_ok st d = function
  | Fill { reg; off; len; _ } -> (
      in_range st reg off len && (match find st.regs reg with Some g -> g.rdev = d | None -> false)
      && not (pending_in st reg off len))
  | Launch { ent; _ } -> (
      match find st.ents ent with
      | Some e -> e.erole <> Hang_fn && (match e.eanswer with `Entry _ -> true | _ -> false) && (match find st.imgs e.eimg with Some i -> i.idev = d | None -> false)
      | None -> false)

let precond st { cmd; _ } =
  match cmd with
  | Open o ->
      (* one device per name: the model does not reopen a name still open *)
      not (IM.exists (fun _ v -> v.opener = o && not v.stopped) st.devs)
  | Close { dev; _ } ->
      (* rig frees a region only after the mappings over it: a device whose
         regions another open device maps is closed after that one *)
      open_dev st dev
      && not
           (IM.exists
              (fun _ g -> g.rdev = dev && List.exists (fun m -> match find st.regs m with Some mg -> mg.rdev <> dev | None -> false) g.mapped_by)
              st.regs)
  | Alloc { dev; size; _ } -> usable st dev && size > 0 && size mod Rig_edge.word = 0
  | Free r -> (
      match find st.regs r with
      | Some g ->
          g.mapped_by = [] && usable st g.rdev
          && (match find st.devs g.rdev with Some v -> v.confirmed >= g.busy_until | None -> false)
      | None -> false)
  | Map_peer { dev; reg } -> (
      match find st.regs reg with
      | Some g -> g.kind = K_alloc && g.rdev <> dev && usable st dev && usable st g.rdev
      | None -> false)
  | Map_host { dev; size; over } -> (
      usable st dev && size > 0
      && match over with None -> true | Some o -> (match find st.regs o with Some g -> g.kind = K_host && size <= g.pages | None -> false))
  | Write { reg; off; bytes } ->
      in_range st reg off (String.length bytes)
      && (match region_device st reg with Some d -> usable st d | None -> false)
      && not (pending_in st reg off (String.length bytes))
  | Read { reg; off; len } ->
      in_range st reg off len && (match region_device st reg with Some d -> usable st d | None -> false)
  | Load { dev; _ } -> usable st dev
  | Entry { img; _ } | Prepare { img; _ } -> (
      match find st.imgs img with Some i -> usable st i.idev | None -> false)
  | Submit { dev; parts; _ } -> usable st dev && parts <> [] && List.for_all (part_ok st dev) parts
  | Commit dev -> usable st dev
  | Wait { dev; sub } -> (
      match (find st.devs dev, find st.subs sub) with
      | Some v, Some s -> s.sdev = dev && s.value <= v.committed && (not v.stopped) && (not v.lost) && not v.stuck
      | _ -> false)
  | Sleep { dev; _ } -> (
      (* after a Fault too: the next sleep must raise it again (TIME-5) *)
      match find st.devs dev with Some v -> (not v.stopped) && ((not v.lost) || v.faulted) && not v.stuck | None -> false)
  | Signaled d -> open_dev st d
  | Peer { dev; other } -> dev <> other && open_dev st dev && open_dev st other

(* What a step touches that another step of the same phase must not. *)
let footprint st { cmd; _ } =
  let cell r = match find st.regs r with Some g -> [ `Cell g.cell ] | None -> [] in
  match cmd with
  | Write { reg; _ } | Read { reg; _ } -> cell reg
  | Submit { dev; parts; _ } ->
      `Queue dev :: List.concat_map (function Fill { reg; _ } -> cell reg | Launch _ -> []) parts
  | _ -> []

let concurrent_kind = function
  | Submit { commit = false; _ } -> false
  | Submit _ | Sleep _ | Signaled _ | Peer _ | Read _ | Write _ | Alloc _ -> true
  | _ -> false

let phase_ok st = function
  | [ s ] -> precond st s
  | steps ->
      List.for_all
        (fun s ->
          concurrent_kind s.cmd && precond st s
          && (* a thread of its own commits only what it encoded: none left open *)
          match s.cmd with Submit { dev; _ } -> (match find st.devs dev with Some v -> v.committed = v.last | None -> false) | _ -> true)
        steps
      &&
      (* cells are touched by one step at most; submits of one device may
         run together (rig serialises them; room and grow interleave) *)
      let cells = List.concat_map (fun s -> List.filter (function `Cell _ -> true | _ -> false) (footprint st s)) steps in
      List.length (List.sort_uniq compare cells) = List.length cells

let slept_ms = function Slept { ms; cpu_wait_ms; _ } -> Probes.less_cpu_wait ~ms ~cpu_wait_ms | _ -> 0.

let show_slept = function
  | Slept { ms; cpu_wait_ms; _ } when cpu_wait_ms >= 1. -> spf "%.0f ms (%.0f of them waiting for a CPU)" ms cpu_wait_ms
  | Slept { ms; _ } -> spf "%.0f ms" ms
  | _ -> "-"

(* How late a sleep on the word as it reads may return and still be in
   time: still_ms, plus 400 ms of a loaded machine's noise (a late sleep is
   asked twice more and the shortest counts, so the noise must strike three
   times in a row), or half of still_ms when that is more (a sleep that
   waits twice its still_ms is seen once still_ms passes 400 ms). *)
let sleep_bound_ms still_ms = float_of_int still_ms +. Float.max 400. (float_of_int still_ms /. 2.)

(* Past it, a sleep on a value the word does not read did not return at once. *)
let other_bound_ms still_ms = float_of_int still_ms /. 2.

(* ------------------------------------------------------------ next_state *)

let set_dev st d f = match find st.devs d with Some v -> { st with devs = IM.add d (f v) st.devs } | None -> st

let lose st d = set_dev st d (fun v -> { v with lost = true })
let fault st d = set_dev st d (fun v -> { v with lost = true; faulted = true })

let update_cell st r f =
  match find st.regs r with
  | Some g -> (
      match find st.cells g.cell with
      | Some c ->
          let c = Array.copy c in
          f c;
          { st with cells = IM.add g.cell c st.cells }
      | None -> st)
  | None -> st

(* A wait saw the word reach [w]: the fills of values up to [w] are done. *)
let confirm st d w =
  let cells =
    IM.map
      (fun c ->
        if Array.exists (function Pending p -> p.dev = d && p.value <= w | _ -> false) c then
          Array.map (function Pending p when p.dev = d && p.value <= w -> Known (p.c, p.writer) | b -> b) c
        else c)
      st.cells
  in
  set_dev { st with cells } d (fun v -> { v with confirmed = max v.confirmed w })

let add_reg st id g = { st with regs = IM.add id g st.regs }

let drop_device st d =
  let regs, gone = IM.partition (fun _ g -> g.rdev <> d) st.regs in
  let regs =
    IM.map (fun g -> { g with mapped_by = List.filter (fun m -> not (IM.mem m gone)) g.mapped_by }) regs
  in
  let cells = IM.filter (fun c _ -> IM.exists (fun _ g -> g.cell = c) regs) st.cells in
  let imgs = IM.filter (fun _ i -> i.idev <> d) st.imgs in
  let ents = IM.filter (fun _ e -> IM.mem e.eimg imgs) st.ents in
  set_dev { st with regs; cells; imgs; ents } d (fun v -> { v with stopped = true })

let next_state st { id; cmd } answer =
  (* A Fault loses the device; only one that sleep or a wait raised is an
     event of the device's that later sleeps must raise again (TIME-5). *)
  let lost_on st d = function Faulted _ | Raised _ -> lose st d | _ -> st in
  match (cmd, answer) with
  | Close { dev; _ }, _ -> drop_device st dev
  | _, Skipped _ -> st
  | Open o, Made ->
      let v =
        { opener = o; lost = false; faulting = false; faulted = false; stopped = false; last = 0; committed = 0; confirmed = 0;
          stuck = false; lone_sleep_ok = false; first_word = None }
      in
      { st with devs = IM.add id v st.devs }
  | Open _, _ -> st
  | Alloc { dev; size; mem }, Made ->
      let st = add_reg st id { rdev = dev; cell = id; size; kind = K_alloc; rmem = Some mem; mapped_by = []; busy_until = 0; pages = 0 } in
      { st with cells = IM.add id (Array.make size Unknown) st.cells }
  | Map_peer { dev; reg }, Made -> (
      match find st.regs reg with
      | Some g ->
          let st = add_reg st reg { g with mapped_by = id :: g.mapped_by } in
          add_reg st id { rdev = dev; cell = g.cell; size = g.size; kind = K_peer; rmem = g.rmem; mapped_by = []; busy_until = 0; pages = 0 }
      | None -> st)
  | Map_host { dev; size; over }, Made -> (
      (* the region reaches each word of the allocation's last bytes *)
      let words = (size + Rig_edge.word - 1) / Rig_edge.word * Rig_edge.word in
      let pages = (size + 4095) / 4096 * 4096 in
      match over with
      | Some o -> (
          match find st.regs o with
          | Some g -> add_reg st id { rdev = dev; cell = g.cell; size = words; kind = K_host; rmem = None; mapped_by = []; busy_until = 0; pages = g.pages }
          | None -> st)
      | None ->
          let st = add_reg st id { rdev = dev; cell = id; size = words; kind = K_host; rmem = None; mapped_by = []; busy_until = 0; pages } in
          (* the harness zeroes the host pages it gives *)
          { st with cells = IM.add id (Array.make pages (Known ('\000', id))) st.cells })
  | Load { dev; _ }, Made -> { st with imgs = IM.add id { idev = dev; prepared = [] } st.imgs }
  | (Alloc { dev; _ } | Map_peer { dev; _ } | Map_host { dev; _ } | Load { dev; _ }), a -> lost_on st dev a
  | Free r, _ -> (
      match find st.regs r with
      | Some g ->
          let regs =
            IM.remove r st.regs |> IM.map (fun o -> { o with mapped_by = List.filter (( <> ) r) o.mapped_by })
          in
          (* the memory goes with the last region that shows it *)
          let cells = if IM.exists (fun _ o -> o.cell = g.cell) regs then st.cells else IM.remove g.cell st.cells in
          let st = { st with regs; cells } in
          (match answer with Faulted _ -> fault st g.rdev | Raised _ -> lose st g.rdev | _ -> st)
      | None -> st)
  | Write { reg; off; bytes }, Made ->
      update_cell st reg (fun c -> String.iteri (fun i ch -> c.(off + i) <- Known (ch, reg)) bytes)
  | (Write { reg; _ } | Read { reg; _ }), a -> (
      match region_device st reg with Some d -> lost_on st d a | None -> st)
  | Entry { img; role }, Entry_answer a ->
      let st = { st with ents = IM.add id { eimg = img; erole = role; eanswer = a } st.ents } in
      (* the prepares of f before this entry are answered by it *)
      let imgs = match find st.imgs img with Some i -> IM.add img { i with prepared = List.filter (( <> ) role) i.prepared } st.imgs | None -> st.imgs in
      { st with imgs; entries_seen = IM.add (img_role img role) a st.entries_seen }
  | Prepare { img; role }, Made -> (
      match find st.imgs img with
      | Some i -> { st with imgs = IM.add img { i with prepared = role :: i.prepared } st.imgs }
      | None -> st)
  | (Entry { img; _ } | Prepare { img; _ }), a -> (
      match find st.imgs img with Some i -> lost_on st i.idev a | None -> st)
  | Submit { dev; parts; commit }, (Submitted { value; _ } | Submit_failed { value; _ }) ->
      let st = set_dev st dev (fun v -> { v with last = max v.last value; committed = (if commit then max v.last value else v.committed) }) in
      let has_launch = List.exists (function Launch _ -> true | Fill _ -> false) parts in
      let st = { st with subs = IM.add id { sdev = dev; value; has_launch } st.subs } in
      let st =
        List.fold_left
          (fun st -> function
            | Fill { reg; off; len; byte } ->
                let st =
                  update_cell st reg (fun c ->
                      for i = off to off + len - 1 do
                        c.(i) <- Pending { dev; value; c = Char.chr byte; writer = reg }
                      done)
                in
                (match find st.regs reg with
                | Some g -> add_reg st reg { g with busy_until = max g.busy_until value }
                | None -> st)
            | Launch { ent; _ } -> (
                match find st.ents ent with
                | Some { erole = Fault_fn; _ } -> set_dev st dev (fun v -> { v with faulting = true })
                | _ -> st))
          st parts
      in
      (match answer with Submit_failed _ -> lose st dev | _ -> st)
  | Submit { dev; _ }, a -> lost_on st dev a
  | Commit dev, Made -> set_dev st dev (fun v -> { v with committed = v.last })
  | Commit dev, Submit_failed _ -> lose st dev
  | Commit dev, a -> lost_on st dev a
  | Wait { dev; _ }, Reached w -> confirm st dev w
  | Wait { dev; _ }, Timed_out _ -> set_dev st dev (fun v -> { v with stuck = true })
  | Wait { dev; _ }, Faulted _ -> fault st dev
  | Wait { dev; _ }, a -> lost_on st dev a
  | Sleep { dev; _ }, Faulted _ -> fault st dev
  | Sleep { dev; seen = Current; still_ms }, (Slept { concurrent = false; _ } as a) ->
      if slept_ms a <= sleep_bound_ms still_ms then set_dev st dev (fun v -> { v with lone_sleep_ok = true }) else st
  | Sleep _, _ -> st
  | Signaled d, Word w -> set_dev st d (fun v -> if v.last = 0 && v.first_word = None then { v with first_word = Some w } else v)
  | Signaled _, _ -> st
  | Peer { dev; other }, Bool b ->
      if IM.mem (pair dev other) st.peers then st else { st with peers = IM.add (pair dev other) b st.peers }
  | Peer _, _ -> st

(* ------------------------------------------------------------ postcond *)

(* Bytes as a string of the scenario language, every byte outside printable
   ASCII as \xHH: what a read saw stays readable, and valid UTF-8. *)
let show_bytes s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  String.iter
    (fun c ->
      match c with
      | '"' -> Buffer.add_string b "\\\""
      | '\\' -> Buffer.add_string b "\\\\"
      | ' ' .. '~' -> Buffer.add_char b c
      | c -> Buffer.add_string b (Printf.sprintf "\\x%02x" (Char.code c)))
    s;
  Buffer.add_char b '"';
  Buffer.contents b

let string_of_role = function Spin -> "spin" | Fault_fn -> "fault" | Hang_fn -> "hang" | Absent_fn -> "absent"
let string_of_memory = function Rig_edge.Device -> "device" | Mapped -> "mapped" | Pinned -> "pinned"
let show_entry = function `Entry h -> spf "Entry 0x%Lx" h | `Absent -> "Absent" | `No_memory n -> spf "No_memory %d" n

let string_of_answer = function
  | Made -> "ok"
  | Nothing -> "None"
  | Refused why -> spf "Error %S" why
  | Bytes { got; _ } -> show_bytes got
  | Unreachable -> "no reach"
  | Entry_answer a -> show_entry a
  | Submitted { value; growths } -> spf "value %d%s" value (if growths > 0 then spf ", %d growth(s)" growths else "")
  | Regrow n -> spf "RIG_GROW again after %d Grown" n
  | No_room n -> spf "Short %d at the fourth ask" n
  | Submit_failed { value; why } -> spf "value %d, %s" value why
  | Reached w -> spf "word %d" w
  | Timed_out w -> spf "timed out, word %d" w
  | Slept { concurrent; _ } as a -> spf "returned after %s%s" (show_slept a) (if concurrent then " (a submit ran)" else "")
  | Word w -> string_of_int w
  | Bool b -> string_of_bool b
  | Closed { stop_ms; word_after_stop; settled; late; _ } ->
      spf "stop took %.0f ms, word %d%s%s" stop_ms word_after_stop
        (match settled with Some w when w <> word_after_stop -> spf ", then %d" w | Some _ -> "" | None -> ", not the last value")
        (match late with Some w -> spf ", then %d (late)" w | None -> "")
  | Faulted why -> spf "Fault %S" why
  | Raised e -> spf "raised %s" e
  | Skipped why -> spf "skipped (%s)" why

(* A peer mapping that shows bytes written through the Device region it
   maps: map_peer maps Device memory of that device, so peer must not have
   said false (MEM-4: "peer d d' is true iff map_peer d d' maps Device
   memory of d'"). *)
let shared_despite_peer st reg off got =
  match find st.regs reg with
  | Some ({ kind = K_peer; rmem = Some Rig_edge.Device; _ } as g) -> (
      let origin = IM.fold (fun id o acc -> if o.cell = g.cell && o.kind = K_alloc then Some (id, o) else acc) st.regs None in
      match (origin, cell_of st reg) with
      | Some (oid, o), Some c -> (
          let shown =
            let n = String.length got in
            let rec go i = i < n && (match c.(off + i) with Known (ch, w) when w = oid && got.[i] = ch -> true | _ -> go (i + 1)) in
            go 0
          in
          match find st.peers (pair g.rdev o.rdev) with
          | Some false when shown ->
              Some ("MEM-4", spf "peer d%d d%d is false, yet r%d, a map_peer of d%d's Device region r%d, shows the bytes written through r%d" g.rdev o.rdev reg o.rdev oid oid)
          | _ -> None)
      | _ -> None)
  | _ -> None

(* The first byte a read shows wrong, with the clause its views name. *)
let check_read st reg off (got : string) ~through =
  match cell_of st reg, find st.regs reg with
  | Some c, Some g ->
      let n = String.length got in
      let rec go i =
        if i >= n then None
        else
          match c.(off + i) with
          | Known (ch, writer) when got.[i] <> ch ->
              let writer_kind = Option.map (fun w -> w.kind) (find st.regs writer) in
              let clause =
                match (through, g.kind, writer_kind) with
                | `Host, _, _ -> "MEM-7"
                | `Reach, K_host, _ -> "MEM-7"
                | `Reach, K_peer, _ | `Reach, _, Some K_peer -> if writer = reg then "MEM-2" else "MEM-5"
                | _ -> "MEM-2"
              in
              Some
                ( clause,
                  spf "byte %d of r%d reads 0x%02x, not 0x%02x (written through r%d)%s" (off + i) reg (Char.code got.[i])
                    (Char.code ch) writer (if through = `Host then ", seen in the host pages" else "") )
          | _ -> go (i + 1)
      in
      (match go 0 with
      | Some v -> Some v
      | None -> shared_despite_peer st reg off got)
  | _ -> None

(* A Fault where no fault was launched, while the only work not yet seen
   done is fills within regions of one kind: the device could not reach
   memory the region must hold (MEM-2 for alloc's, MEM-5 for a peer
   mapping's, MEM-7 for a host mapping's).  Fills over several kinds of
   region, or a launch among them, name no clause. *)
let fault_on_fills st d why =
  let writers =
    IM.fold
      (fun _ c acc ->
        Array.fold_left (fun acc b -> match b with Pending p when p.dev = d -> p.writer :: acc | _ -> acc) acc c)
      st.cells []
    |> List.sort_uniq compare
  in
  let kinds = List.sort_uniq compare (List.filter_map (fun r -> Option.map (fun g -> g.kind) (find st.regs r)) writers) in
  let launches_pending =
    (* a launch's work may fault for its own reasons: only fills are judged *)
    let confirmed = match find st.devs d with Some v -> v.confirmed | None -> 0 in
    IM.exists (fun _ s -> s.sdev = d && s.value > confirmed && s.has_launch) st.subs
  in
  match (kinds, writers) with
  | [ k ], r :: _ when not launches_pending ->
      let clause = match k with K_alloc -> "MEM-2" | K_peer -> "MEM-5" | K_host -> "MEM-7" in
      Some (clause, spf "the device faulted (%S) with no fault launched, its only pending work fills within r%d%s" why r
              (match k with K_host -> ", a map_host region (it must map the whole pages)" | _ -> ""))
  | _ -> None

let postcond st { cmd; _ } answer =
  let dev d = find st.devs d in
  let faulting d = match dev d with Some v -> v.faulting || v.faulted | None -> false in
  match (cmd, answer) with
  | _, Skipped _ -> None
  | Read { reg; off; _ }, Bytes { got; host } -> (
      match check_read st reg off got ~through:`Reach with
      | Some v -> Some v
      | None -> ( match host with Some h -> check_read st reg off h ~through:`Host | None -> None))
  | Load { refused = false; _ }, Refused why -> Some ("CODE-1", spf "image refused kit.binary: %S" why)
  | Load { refused = true; _ }, Made -> Some ("CODE-1", "image took kit.refused_binary")
  | Entry { img; role }, Entry_answer a -> (
      let prepared = match find st.imgs img with Some i -> List.mem role i.prepared | None -> false in
      let ok = match (role, a) with Absent_fn, `Absent -> true | (Spin | Fault_fn | Hang_fn), (`Entry _ | `No_memory _) -> true | _ -> false in
      let earlier = find st.entries_seen (img_role img role) in
      let clause = if prepared then "CODE-6" else "CODE-2" in
      match (earlier, a) with
      | Some _, _ when prepared ->
          (* a prepare of an f that has an entry must start nothing (CODE-7):
             what the next entry answers then is not judged here *)
          None
      | Some (`Entry h0), `Entry h when h <> h0 ->
          (* a second call for f must make nothing new: a new handle is something new *)
          Some (clause, spf "a second entry for the %s function answers a new handle 0x%Lx (the first was 0x%Lx)" (string_of_role role) h h0)
      | Some e, _ when (match (e, a) with `Entry _, `Entry _ -> false | `Entry _, _ | _, `Entry _ -> true | _ -> false) ->
          Some (clause, spf "entry for %s is %s; an earlier entry answered %s" (string_of_role role) (show_entry a) (show_entry e))
      | _ when not ok ->
          Some
            ( clause,
              spf "entry for the %s function is %s%s" (string_of_role role) (show_entry a)
                (if prepared then " after a prepare of it" else "") )
      | _ -> None)
  | (Wait { dev = d; _ } | Sleep { dev = d; _ }), Faulted why when not (faulting d) -> fault_on_fills st d why
  | (Read { reg; _ } | Write { reg; _ }), Faulted why -> (
      (* the host's access to bytes within the region, with no fault launched *)
      match (region_device st reg, find st.regs reg) with
      | Some d, Some g when not (faulting d) ->
          let clause = match g.kind with K_alloc -> "MEM-2" | K_peer -> "MEM-5" | K_host -> "MEM-7" in
          Some (clause, spf "the host's access to bytes within r%d (its %d bytes) raised Fault %S, with no fault launched" reg g.size why)
      | _ -> None)
  | Wait { dev = d; _ }, Timed_out w when (match dev d with Some v -> v.faulting && not v.faulted | None -> false) ->
      Some ("TIME-5", spf "after a launch of the kit's fault function, sleeps raised no Fault for 6 s (the word reads %d)" w)
  | Prepare { role = Absent_fn; _ }, Raised e ->
      Some ("CODE-6", spf "prepare of a function the image lacks raised %s: prepare must report nothing" e)
  | Submit _, Regrow growths ->
      Some ("QUEUE-2", spf "room answered RIG_GROW again for the same submission after grow answered Grown (%d growth(s))" growths)
  | Sleep { dev = d; _ }, Slept { ms; _ } when (match dev d with Some v -> v.faulted | None -> false) ->
      Some ("TIME-5", spf "sleep returned after %.0f ms on a device that faulted: it must raise Fault" ms)
  | Sleep { dev = d; seen = Other; still_ms }, (Slept { ms; _ } as a) when (not (faulting d)) && ms > other_bound_ms still_ms ->
      Some ("TIME-3", spf "sleep with a seen the word does not read took %s (still_ms %d): it must return at once" (show_slept a) still_ms)
  | Sleep { dev = d; seen = Current; still_ms }, (Slept { concurrent; _ } as a) when slept_ms a > sleep_bound_ms still_ms ->
      let alone_ok = match dev d with Some v -> v.lone_sleep_ok | None -> false in
      if concurrent && alone_ok then
        Some ("TIME-6", spf "sleep ~still_ms:%d returned after %s while a submit or commit of the device ran (alone it returns in time)" still_ms (show_slept a))
      else if concurrent then None
      else Some ("TIME-4", spf "sleep ~still_ms:%d returned after %s" still_ms (show_slept a))
  | Signaled d, Word w -> (
      match dev d with
      | Some v ->
          let first = Option.value v.first_word ~default:0 in
          if w <> first && (w < 1 || w > v.last) then
            Some ("TIME-1", spf "signaled is %d: no value given to submit (the last is %d)" w v.last)
          else None
      | None -> None)
  | Peer { dev; other }, Bool b -> (
      match find st.peers (pair dev other) with
      | Some b0 when b0 <> b ->
          let state d = match find st.devs d with Some { lost = true; _ } -> " (lost)" | _ -> "" in
          Some ("MEM-4", spf "peer d%d%s d%d%s is %b; it was %b before" dev (state dev) other (state other) b b0)
      | _ -> None)
  | Close { dev = d; _ }, Closed { idle; word_after_stop; late; _ } -> (
      (* Only the idle half of STOP-3 is judged here: with work running at
         stop, a word that never reads the last value may as well be a
         signaled that does not read the word (TIME-1); the probe of STOP-3
         bounds that case. *)
      match dev d with
      | Some v ->
          (* a word below what it showed before was let go (STOP-5); one
             that never showed a value cannot tell the two apart *)
          if word_after_stop < v.confirmed then
            Some ("STOP-5", spf "right after stop returned, the word reads %d, below the %d it read before: the word must stay until rig frees it" word_after_stop v.confirmed)
          else if idle && word_after_stop <> v.last && v.confirmed > 0 then
            Some ("STOP-3", spf "right after stop returned, with no work running, the word reads %d through signaled, not the last value %d given to submit" word_after_stop v.last)
          else (
            match late with
            | Some w -> Some ("STOP-6", spf "the word read the last value %d after stop, then %d: a write landed after it" v.last w)
            | None -> None)
      | None -> None)
  | _ -> None

let rests_on_time = function Slept _ | Timed_out _ -> true | _ -> false

(* The clauses an answer gave [postcond] something to compare with: a
   clause no step of a run judged was not checked by it, whatever the run
   found (a driver without map_host passes no MEM-7 here). *)
let judged st { cmd; _ } answer =
  let dev d = find st.devs d in
  let faulting d = match dev d with Some v -> v.faulting || v.faulted | None -> false in
  let kind_clause = function K_alloc -> "MEM-2" | K_peer -> "MEM-5" | K_host -> "MEM-7" in
  match (cmd, answer) with
  | _, Skipped _ -> []
  | Read { reg; off; len }, Bytes { host; _ } -> (
      match (cell_of st reg, find st.regs reg) with
      | Some c, Some g ->
          let known = ref false in
          for i = off to min (Array.length c) (off + len) - 1 do
            match c.(i) with Known _ -> known := true | _ -> ()
          done;
          if not !known then []
          else kind_clause g.kind :: (if host <> None then [ "MEM-7" ] else [])
      | _ -> [])
  | Load _, (Made | Refused _) -> [ "CODE-1" ]
  | Entry { img; role }, Entry_answer _ ->
      let prepared = match find st.imgs img with Some i -> List.mem role i.prepared | None -> false in
      [ (if prepared then "CODE-6" else "CODE-2") ]
  | Prepare { role = Absent_fn; _ }, _ -> [ "CODE-6" ]
  | Submit _, Submitted { growths; _ } when growths > 0 -> [ "QUEUE-2" ]
  | Submit _, Regrow _ -> [ "QUEUE-2" ]
  | (Wait { dev = d; _ } | Sleep { dev = d; _ }), (Faulted _ | Timed_out _) when faulting d -> [ "TIME-5" ]
  | Sleep { dev = d; _ }, Slept _ when (match dev d with Some v -> v.faulted | None -> false) -> [ "TIME-5" ]
  | Sleep { dev = d; seen = Other; _ }, Slept _ when not (faulting d) -> [ "TIME-3" ]
  | Sleep { dev = d; seen = Current; _ }, Slept { concurrent; _ } ->
      let alone_ok = match dev d with Some v -> v.lone_sleep_ok | None -> false in
      if concurrent then if alone_ok then [ "TIME-6" ] else [] else [ "TIME-4" ]
  | Signaled d, Word _ when dev d <> None -> [ "TIME-1" ]
  | Peer { dev; other }, Bool _ when find st.peers (pair dev other) <> None -> [ "MEM-4" ]
  | Close { dev = d; _ }, Closed { idle; settled; _ } -> (
      match dev d with
      | Some v when v.confirmed > 0 ->
          [ "STOP-5" ] @ (if idle then [ "STOP-3" ] else []) @ if settled <> None then [ "STOP-6" ] else []
      | _ -> [])
  | _ -> []
