(* gqcheck: drives every gq-* driver directly (no certifier), through the
   sequences that show the bugs blindgq.ml claims, and prints per driver
   what it saw.  Every driver runs every check: a broken driver must show
   its own bug and no other, a conforming one none.

   Each thread of a scenario is an actor (a thread of its own, so that the
   layer's per-thread state is told apart); every driver call runs masked,
   as rig calls it. *)

open Rig_edge
module Prim = Rig_edge_primitives

exception Async_exit

(* --------------------------------------------------------------- actors *)

type actor = (unit -> unit) Event.channel

let actor () : actor =
  let ch = Event.new_channel () in
  ignore
    (Thread.create
       (fun () ->
         while true do
           (Event.sync (Event.receive ch)) ()
         done)
       ());
  ch

let on (a : actor) f =
  let res = Event.new_channel () in
  Event.sync
    (Event.send a (fun () ->
         let r = try Ok (Prim.masked f) with e -> Error e in
         Event.sync (Event.send res r)));
  match Event.sync (Event.receive res) with Ok v -> v | Error e -> raise e

(* ---------------------------------------------------------- reporting *)

type verdict = Bug of string * string (* clause, what *) | Clean of string | Na of string

let show = function
  | Bug (c, s) -> "BUG SHOWN (" ^ c ^ "): " ^ s
  | Clean s -> "clean" ^ if s = "" then "" else " (" ^ s ^ ")"
  | Na s -> "n/a (" ^ s ^ ")"

let room_s = function Room -> "ROOM" | Grow -> "GROW"
let grow_s = function Grown -> "Grown" | Short n -> Printf.sprintf "Short %d" n

(* -------------------------------------------------------------- checks *)

module Check (M : Blindgq.S) = struct
  module D = M.D

  let open_dev () =
    match M.openers () with o :: _ -> o.make () | [] -> failwith "no opener"

  (* A Mapped region (not charged) for the parts to name. *)
  let target d =
    match D.alloc d Mapped 64 with Some r -> r | None -> failwith "no Mapped memory"

  let parts d r n =
    let h = (D.locate d r).handle in
    encode (List.init n (fun _ -> Fill { dst = h; off = 0; len = 4; byte = 7 }))

  (* The largest multiple of 4096 bytes of Device memory alloc still gives. *)
  let free_budget d =
    let ok k =
      k = 0
      ||
      match D.alloc d Device (k * 4096) with
      | Some r ->
          D.free d r;
          true
      | None -> false
    in
    let rec go lo hi = if lo >= hi then lo else let m = (lo + hi + 1) / 2 in if ok m then go m hi else go lo (m - 1) in
    go 0 (Hostmem.capacity / 4096) * 4096

  (* Takes Device memory until about [left] bytes stay free. *)
  let hog d left =
    let f = free_budget d in
    if f <= left then None else D.alloc d Device (f - left)

  let finish d = D.stop d ~fault:None

  (* 0. The ordinary path: room, submit, commit, sleep, the byte landed. *)
  let sanity () =
    let d = open_dev () in
    let a = actor () in
    let r = target d in
    let q = (D.facts d).queue in
    let s = parts d r 3 in
    let v =
      on a (fun () ->
          let ans = q.room s in
          let ans = if ans = Grow then (ignore (D.grow d); q.room s) else ans in
          if ans <> Room then Bug ("QUEUE-2", "room never answered ROOM")
          else if not (q.submit s ~value:1) then Bug ("sanity", "submit failed")
          else if not (q.commit ()) then Bug ("sanity", "commit failed")
          else begin
            let t0 = Unix.gettimeofday () in
            while D.signaled d <> 1 && Unix.gettimeofday () -. t0 < 2. do
              D.sleep d ~seen:(D.signaled d) ~still_ms:100
            done;
            let b = Bytes.create 1 in
            (match (D.locate d r).reach with Some f -> f (Read { off = 0; into = b }) | None -> ());
            if D.signaled d = 1 && Bytes.get b 0 = '\007' then Clean "" else Bug ("sanity", "work did not run")
          end)
    in
    D.free d r;
    finish d;
    v

  (* QUEUE-1 (pool): with the pool held by H, A asks to grow, then B's room
     answers GROW too; A grows; B's room, B having grown
     nothing, must still answer GROW (and A's, having grown, ROOM). *)
  let q1_pool ~nh ~nb ~na () =
    let d = open_dev () in
    let h = actor () and a = actor () and b = actor () in
    let r = target d in
    let q = (D.facts d).queue in
    let sh = parts d r nh and sb = parts d r nb and sa = parts d r na in
    let hold = on h (fun () -> q.room sh) in
    let a1 = on a (fun () -> q.room sa) in
    let b1 = on b (fun () -> q.room sb) in
    let v =
      if b1 <> Grow || a1 <> Grow then
        Na (Printf.sprintf "holder %s, B %s, A %s: the pool was not exhausted" (room_s hold) (room_s b1) (room_s a1))
      else
        let g = on a (fun () -> D.grow d) in
        let b2 = on b (fun () -> q.room sb) in
        let a2 = on a (fun () -> q.room sa) in
        if g = Grown && b2 = Room then
          Bug
            ( "QUEUE-1",
              Printf.sprintf "B's room GROW, A's grow %s, then B's room %s: A's grow put slots where B's room reads"
                (grow_s g) (room_s b2) )
        else if g = Grown && a2 = Grow then
          Bug ("QUEUE-2", Printf.sprintf "A's grow Grown, B's room %s, A's room GROW again" (room_s b2))
        else Clean (Printf.sprintf "holder %s, B GROW, A grow %s, B %s, A %s" (room_s hold) (grow_s g) (room_s b2) (room_s a2))
    in
    D.free d r;
    finish d;
    v

  (* QUEUE-1 (reservation): H's room answers ROOM; A asks to grow and grows;
     H's submit, which only its own room prepared, must succeed. *)
  let q1_reserve () =
    let d = open_dev () in
    let h = actor () and a = actor () in
    let r = target d in
    let q = (D.facts d).queue in
    let small = parts d r 1 and big = parts d r 40 in
    let h1 = on h (fun () -> q.room small) in
    let v =
      if h1 <> Room then Na "H's room did not answer ROOM"
      else
        let a1 = on a (fun () -> q.room big) in
        if a1 <> Grow then Na "A's room did not ask to grow"
        else
          let g = on a (fun () -> D.grow d) in
          let ok = on h (fun () -> q.submit small ~value:1 && q.commit ()) in
          if ok then Clean (Printf.sprintf "A grow %s; H's submit ok" (grow_s g))
          else
            Bug ("QUEUE-1", Printf.sprintf "H room ROOM, A grow %s, H's submit FAILED: grow took H's reservation" (grow_s g))
    in
    D.free d r;
    finish d;
    v

  (* QUEUE-2: with the pool exhausted, B asks to grow first, then A; A grows
     (Grown), B's growth answers Short; A's room must answer ROOM. *)
  let q2 () =
    let d = open_dev () in
    let h = actor () and a = actor () and b = actor () in
    let r = target d in
    let q = (D.facts d).queue in
    let hold = parts d r 15 and big = parts d r 40 and small = parts d r 1 in
    ignore (on h (fun () -> q.room hold));
    let b1 = on b (fun () -> q.room big) in
    let a1 = on a (fun () -> q.room small) in
    let v =
      if b1 <> Grow || a1 <> Grow then Na (Printf.sprintf "B %s, A %s" (room_s b1) (room_s a1))
      else
        let hg = hog d 16384 in
        let ga = on a (fun () -> D.grow d) in
        let gb = on b (fun () -> D.grow d) in
        let a2 = on a (fun () -> q.room small) in
        Option.iter (D.free d) hg;
        if ga = Grown && a2 = Grow then
          Bug ("QUEUE-2", Printf.sprintf "A's grow Grown, B's grow %s, A's room GROW again" (grow_s gb))
        else Clean (Printf.sprintf "A grow %s, B grow %s, A room %s" (grow_s ga) (grow_s gb) (room_s a2))
    in
    D.free d r;
    finish d;
    v

  (* QUEUE-3: a growth that answers Short keeps what it made: right after
     Short, the budget it took stays taken. *)
  let q3 () =
    let d = open_dev () in
    let h = actor () and a = actor () in
    let r = target d in
    let q = (D.facts d).queue in
    let hold = parts d r 15 and big = parts d r 40 in
    ignore (on h (fun () -> q.room hold));
    let a1 = on a (fun () -> q.room big) in
    let v =
      if a1 <> Grow then Na "A's room did not ask to grow"
      else
        let hg = hog d 16384 in
        let before = free_budget d in
        let g = on a (fun () -> D.grow d) in
        let after = free_budget d in
        let v =
          match g with
          | Grown -> Na "grow did not answer Short"
          | Short n when after >= before && before > 0 ->
              Bug
                ( "QUEUE-3",
                Printf.sprintf "Short %d, yet the %d bytes free before grow are all free again: what it made was given back"
                   n before )
          | Short n ->
              (* reclamation: the hog goes; room, grow, room must then succeed *)
              Option.iter (D.free d) hg;
              let a2 = on a (fun () -> q.room big) in
              let g2 = if a2 = Grow then on a (fun () -> D.grow d) else Grown in
              let a3 = on a (fun () -> q.room big) in
              if a3 = Room then
                Clean (Printf.sprintf "Short %d kept %d bytes; then %s, %s, %s" n (before - after) (room_s a2) (grow_s g2) (room_s a3))
              else Bug ("QUEUE-3", "after reclamation the submission still got no room")
        in
        (match (g, v) with Short _, Bug _ -> Option.iter (D.free d) hg | _ -> ());
        v
    in
    D.free d r;
    finish d;
    v

  let scratch = 1 lsl 20

  let load d =
    let bin, f = match M.kit.scratch with Some s -> s scratch | None -> failwith "no scratch" in
    match D.image d bin with Ok i -> (i, f) | Error e -> failwith e

  let settle () = Thread.delay 0.15

  (* CODE-7 (entry first): a prepare of an f that has an entry starts
     nothing: the budget does not move. *)
  let c7_after_entry () =
    let d = open_dev () in
    let a = actor () in
    let i, f = load d in
    let v =
      on a (fun () ->
          match D.entry i f with
          | Entry h ->
              let b0 = free_budget d in
              D.prepare i f;
              settle ();
              let b1 = free_budget d in
              let again = D.entry i f in
              if b1 < b0 - (scratch / 2) then
                Bug ("CODE-7", Printf.sprintf "prepare after entry took %d more bytes (f's scratch again)" (b0 - b1))
              else if again <> Entry h then Bug ("CODE-2", "the second entry answered another entry")
              else Clean ""
          | _ -> Na "entry made nothing")
    in
    D.unload i;
    finish d;
    v

  (* CODE-7 (ended): a prepare that an asynchronous exception ends at its
     wait must have changed nothing: no memory taken, and prepares after it
     make what a fresh one makes. *)
  let c7_ended () =
    let d = open_dev () in
    let a = actor () in
    let i, f = load d in
    let v =
      on a (fun () ->
          let b0 = free_budget d in
          Prim.signal_at_wait 1;
          let raised = try D.prepare i f; false with Async_exit -> true in
          Prim.signal_at_wait 0;
          if not raised then Na "prepare has no wait: nothing can end it there"
          else begin
            settle ();
            let b1 = free_budget d in
            if b1 < b0 - (scratch / 2) then
              Bug ("CODE-7", Printf.sprintf "the prepare raised, yet %d bytes stay taken" (b0 - b1))
            else begin
              D.prepare i f;
              D.prepare i f;
              D.prepare i f;
              settle ();
              let made_after = b1 - free_budget d in
              let i2, _ = load d in
              let c0 = free_budget d in
              D.prepare i2 f;
              settle ();
              let made_fresh = c0 - free_budget d in
              let e = D.entry i f in
              D.unload i2;
              if made_after < made_fresh / 2 then
                Bug
                  ( "CODE-7",
                  Printf.sprintf "after the ended prepare, three prepares made %d bytes, a fresh one %d: it left f marked started"
                     made_after made_fresh )
              else if (match e with Entry _ -> false | _ -> true) then Bug ("CODE-6", "entry after it made no entry")
              else Clean (Printf.sprintf "ended prepare raised, changed nothing; then made %d, fresh %d" made_after made_fresh)
            end
          end)
    in
    D.unload i;
    finish d;
    v

  (* CODE-1: the kit's refused binary gets Error, its binary Ok. *)
  let c1 () =
    let d = open_dev () in
    let a = actor () in
    let v =
      on a (fun () ->
          match M.kit.refused_binary with
          | None -> Na "no refused binary"
          | Some rb -> (
              match D.image d rb with
              | exception e -> Bug ("CODE-1", Printf.sprintf "image of the refused binary raised %s" (Printexc.to_string e))
              | Ok _ -> Bug ("CODE-1", "image took the refused binary")
              | Error _ -> (
                  match D.image d M.kit.binary with
                  | Ok i ->
                      let e = D.entry i "spin" in
                      D.unload i;
                      if e = Absent then Bug ("CODE-1", "the kit's binary lost its function") else Clean ""
                  | Error e -> Bug ("CODE-1", "image refused the kit's binary: " ^ e)
                  | exception e -> Bug ("CODE-1", "image raised " ^ Printexc.to_string e))))
    in
    finish d;
    v

  let all =
    [
      ("sanity", sanity);
      ("QUEUE-1 pool", q1_pool ~nh:15 ~nb:15 ~na:15);
      ("QUEUE-1 pool/2", q1_pool ~nh:5 ~nb:1 ~na:40);
      ("QUEUE-1 reservation", q1_reserve);
      ("QUEUE-2", q2);
      ("QUEUE-3", q3);
      ("CODE-7 after entry", c7_after_entry);
      ("CODE-7 ended", c7_ended);
      ("CODE-1", c1);
    ]
end

let () =
  Sys.set_signal Sys.sigusr2 (Sys.Signal_handle (fun _ -> raise Async_exit));
  let bad = ref 0 in
  List.iter
    (fun (dr : Blindgq.driver) ->
      let module M = (val dr.s : Blindgq.S) in
      let module K = Check (M) in
      Printf.printf "%s  (claimed: %s)\n%!" dr.dname dr.clause;
      let shown =
        List.filter_map
          (fun (name, f) ->
            let v = try f () with e -> Bug (name, "check raised " ^ Printexc.to_string e) in
            Printf.printf "  %-22s %s\n%!" name (show v);
            match v with Bug (c, _) -> Some c | _ -> None)
          K.all
      in
      let shown = List.sort_uniq compare shown in
      let ok =
        match (dr.clause, shown) with
        | "conforming", [] -> true
        | c, [ c' ] -> c = c'
        | _ -> false
      in
      if not ok then incr bad;
      Printf.printf "  => %s: %s\n\n%!"
        (if shown = [] then "clean" else "bug shown for " ^ String.concat ", " shown)
        (if ok then "as claimed" else "NOT AS CLAIMED"))
    Blindgq.all;
  Printf.printf "%d driver(s) not as claimed\n" !bad;
  exit (if !bad = 0 then 0 else 1)
