(* prcheck [DRIVER...]: for each pr-* driver (all by default), a large
   Fill, then a large Copy, runs when stop comes; once the word reads the
   last value given to submit, a sample of the destination's bytes (one per
   64 KiB) is read through the region's reach, and again 300 ms later.
   Bytes that changed in between are work of the device landing after the
   last value (STOP-3: "only once no work of d runs").  Prints one line per
   driver and part: BUG (bytes changed after the value) or ok. *)

open Rig_edge
module Prim = Rig_edge_primitives

let size = 256 lsl 20
let stride = 64 lsl 10

let now () = Unix.gettimeofday ()

(* How many sampled bytes of r equal b. *)
let count (type r) (reach : access -> unit) b =
  let one = Bytes.create 1 in
  let n = ref 0 in
  let off = ref (stride - 1) in
  while !off < size do
    reach (Read { off = !off; into = one });
    if Bytes.get one 0 = b then incr n;
    off := !off + stride
  done;
  ignore (fun (_ : r) -> ());
  !n

let byte_at reach off =
  let one = Bytes.create 1 in
  reach (Read { off; into = one });
  Bytes.get one 0

let submit q parts value =
  let s = encode parts in
  (match q.room s with Room -> () | Grow -> failwith "room answered RIG_GROW");
  if not (q.submit s ~value) then failwith "submit failed";
  if not (q.commit ()) then failwith "commit failed"

let run (name, (module P : Blindpr.S)) ~copy =
  let d = Prim.masked (fun () -> (List.hd (P.openers ())).make ()) in
  let f = P.D.facts d in
  let q = f.queue in
  let alloc () = match Prim.masked (fun () -> P.D.alloc d Mapped size) with Some r -> r | None -> failwith "alloc" in
  let dst = alloc () in
  let pd = P.D.locate d dst in
  let reach = Option.get pd.reach in
  let src = if copy then Some (alloc ()) else None in
  (* The source, filled (and waited for) first. *)
  let value = ref 0 in
  (match src with
  | Some s ->
      let ps = P.D.locate d s in
      incr value;
      submit q [ Fill { dst = ps.handle; off = 0; len = size; byte = 0xCD } ] !value;
      while Prim.masked (fun () -> P.D.signaled d) <> !value do
        Prim.masked (fun () -> P.D.sleep d ~seen:(P.D.signaled d) ~still_ms:100)
      done
  | None -> ());
  let part =
    match src with
    | Some s -> Copy { src = (P.D.locate d s).handle; src_off = 0; dst = pd.handle; dst_off = 0; len = size }
    | None -> Fill { dst = pd.handle; off = 0; len = size; byte = 0xAB }
  in
  let want = if copy then '\xCD' else '\xAB' in
  incr value;
  let last = !value in
  submit q [ part ] last;
  (* Stop once the part has started writing (its first bytes are there). *)
  let t0 = now () in
  while byte_at reach 0 <> want && now () -. t0 < 5. do
    Thread.yield ()
  done;
  let ts = now () in
  Prim.masked (fun () -> P.D.stop d ~fault:None);
  let stop_ms = (now () -. ts) *. 1000. in
  let returned_with = P.D.signaled d in
  (* The word reads the last value: sample. *)
  let t1 = now () in
  while P.D.signaled d <> last && now () -. t1 < 5. do
    Thread.yield ()
  done;
  let seen_ms = (now () -. ts) *. 1000. in
  let c1 = count reach want in
  Thread.delay 0.3;
  let c2 = count reach want in
  let total = size / stride in
  Printf.printf "%-22s %-4s stop %5.1f ms (word %s at return), value after %6.1f ms: %4d/%d bytes, 300 ms later %4d/%d: %s\n%!"
    name (if copy then "Copy" else "Fill") stop_ms
    (if returned_with = last then "last" else "old")
    seen_ms c1 total c2 total
    (if P.D.signaled d <> last then "NO VALUE"
     else if c2 <> c1 then "BUG: bytes changed after the word read the last value"
     else "ok");
  (* Give the memory back as rig would, after the value. *)
  Option.iter (fun s -> Prim.masked (fun () -> P.D.free d s)) src;
  Prim.masked (fun () -> P.D.free d dst)

let () =
  let names = List.tl (Array.to_list Sys.argv) in
  let chosen = if names = [] then Blindpr.drivers else List.filter (fun (n, _) -> List.mem n names) Blindpr.drivers in
  List.iter
    (fun drv ->
      run drv ~copy:false;
      run drv ~copy:true)
    chosen
