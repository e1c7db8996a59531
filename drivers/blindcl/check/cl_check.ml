(* cl_check [blindcl.cmxs]: loads the plugin, lists the drivers it
   registered and, for each, opens its two devices as rig would (openers and
   make inside Rig_edge_primitives.masked), allocates two regions, calls
   locate, peer and signaled a few times (unmasked, as rig does, also from a
   second thread), maps one region for the peer, submits a Fill and a nop
   launch, waits for the word, stops, frees.  Prints OK or the exception. *)

open Rig_edge
module Prim = Rig_edge_primitives

let plugin () =
  if Array.length Sys.argv > 1 then Sys.argv.(1)
  else Filename.concat (Filename.dirname (Filename.dirname Sys.executable_name)) "blindcl.cmxs"

let run name =
  match Rig_edge_registry.find name with
  | None -> failwith "not registered"
  | Some p ->
      let module P = (val p : Package) in
      let module D = P.D in
      let m f = Prim.masked f in
      let openers = m P.openers in
      let o0, o1 = match openers with a :: b :: _ -> (a, b) | _ -> failwith "fewer than two openers" in
      let d0 = m o0.make and d1 = m o1.make in
      let get = function Some r -> r | None -> failwith "alloc answered None" in
      let r1 = get (m (fun () -> D.alloc d0 Device 64)) in
      let r2 = get (m (fun () -> D.alloc d0 Mapped 128)) in
      let sizes = ref [] and peers = ref true in
      let probe () =
        for _ = 1 to 200 do
          let a = D.locate d0 r1 and b = D.locate d0 r2 in
          sizes := [ a.size; b.size ];
          peers := !peers && D.peer d0 d1 && D.peer d1 d0;
          ignore (D.signaled d0)
        done
      in
      (* many regions: the mirrors past their first table *)
      let many = List.init 600 (fun k -> get (m (fun () -> D.alloc d0 Mapped (4 * (k + 1))))) in
      let wrong = List.length (List.filteri (fun k r -> (D.locate d0 r).size <> 4 * (k + 1)) many) in
      List.iter (fun r -> m (fun () -> D.free d0 r)) many;
      if wrong > 0 then failwith (Printf.sprintf "%d sizes wrong" wrong);
      let th = Thread.create probe () in
      probe ();
      Thread.join th;
      let pm = m (fun () -> D.map_peer d1 d0 r1) in
      let f = m (fun () -> D.facts d0) in
      let img =
        match m (fun () -> D.image d0 P.kit.binary) with Ok i -> i | Error e -> failwith e
      in
      let e =
        match m (fun () -> D.entry img "nop") with Entry e -> e | _ -> failwith "no entry for nop"
      in
      let h1 = (D.locate d0 r1).handle in
      let s =
        encode [ Fill { dst = h1; off = 0; len = 64; byte = 7 }; Launch { entry = e; args = [] } ]
      in
      let rec room k =
        match m (fun () -> f.queue.room s) with
        | Room -> ()
        | Grow when k < 4 -> ( match m (fun () -> D.grow d0) with Grown | Short _ -> room (k + 1))
        | Grow -> failwith "no room"
      in
      room 0;
      if not (m (fun () -> f.queue.submit s ~value:1)) then failwith "submit failed";
      if not (m (fun () -> f.queue.commit ())) then failwith "commit failed";
      let t0 = Unix.gettimeofday () in
      while D.signaled d0 <> 1 && Unix.gettimeofday () -. t0 < 5. do
        m (fun () -> D.sleep d0 ~seen:(D.signaled d0) ~still_ms:100)
      done;
      let w = D.signaled d0 in
      let into = Bytes.create 4 in
      (match (D.locate d0 r1).reach with
      | Some reach -> m (fun () -> reach (Read { off = 0; into }))
      | None -> ());
      m (fun () -> D.free d1 pm);
      m (fun () -> D.unload img);
      m (fun () -> D.stop d0 ~fault:None);
      m (fun () -> D.stop d1 ~fault:None);
      let after = D.signaled d0 in
      m (fun () -> D.free d0 r1);
      m (fun () -> D.free d0 r2);
      (match f.own_word with Some wr -> m (fun () -> D.free d0 wr) | None -> ());
      Printf.sprintf "sizes %s, peer %b, word %d (after stop %d), bytes %S"
        (String.concat "/" (List.map string_of_int !sizes))
        !peers w after (Bytes.to_string into)

let () =
  let before = Rig_edge_registry.names () in
  Dynlink.loadfile (plugin ());
  let names = List.filter (fun n -> not (List.mem n before)) (Rig_edge_registry.names ()) in
  Printf.printf "%d drivers registered\n%!" (List.length names);
  let bad = ref 0 in
  List.iter
    (fun n ->
      match run n with
      | s -> Printf.printf "%-22s OK   %s\n%!" n s
      | exception ex ->
          incr bad;
          Printf.printf "%-22s FAIL %s\n%!" n (Printexc.to_string ex))
    names;
  Gc.full_major ();
  Gc.full_major ();
  Printf.printf "%s\n" (if !bad = 0 then "all ran" else Printf.sprintf "%d failed" !bad);
  exit (if !bad = 0 then 0 else 1)
