(* fn_check blindfn.cmxs: loads the plugin with Dynlink and, for each fn-*
   driver it registered, opens its devices as rig would (the opener's make
   inside Rig_edge_primitives.masked), allocates, launches the kit's spin
   function (150 ms) so that work runs, drops everything without stop or
   free, runs Gc.full_major twice and prints OK or the exception.  It shows
   that the drivers run; it judges nothing. *)

module Prim = Rig_edge_primitives

let spin_ms = 150L

(* Opens, allocates, launches, and lets go of everything as it returns. *)
let[@inline never] use (module P : Rig_edge.Package) =
  let kit = P.kit in
  let openers = P.openers () in
  List.iter
    (fun (o : P.D.t Rig_edge.opener) ->
      let d = Prim.masked o.make in
      let rs = List.init 3 (fun _ -> Prim.masked (fun () -> P.D.alloc d Rig_edge.Device 4096)) in
      if List.exists Option.is_none rs then failwith "alloc: None";
      match kit.spin with
      | None -> ()
      | Some f -> (
          match Prim.masked (fun () -> P.D.image d kit.binary) with
          | Error e -> failwith ("image: " ^ e)
          | Ok i -> (
              match Prim.masked (fun () -> P.D.entry i f) with
              | Rig_edge.Entry e ->
                  let q = (P.D.facts d).queue in
                  let s = Rig_edge.encode [ Rig_edge.Launch { entry = e; args = [ spin_ms ] } ] in
                  Prim.masked (fun () ->
                      (match q.room s with Rig_edge.Room -> () | Grow -> failwith "room: Grow");
                      if not (q.submit s ~value:1) then failwith "submit failed";
                      if not (q.commit ()) then failwith "commit failed")
              | _ -> failwith "entry of spin: not an Entry")))
    openers

let () =
  let path = if Array.length Sys.argv > 1 then Sys.argv.(1) else "blindfn.cmxs" in
  Dynlink.loadfile path;
  let names = List.filter (fun n -> String.length n > 3 && String.sub n 0 3 = "fn-") (Rig_edge_registry.names ()) in
  Printf.printf "%d fn-* drivers registered\n%!" (List.length names);
  List.iter
    (fun n ->
      match Rig_edge_registry.find n with
      | None -> Printf.printf "%-26s missing\n%!" n
      | Some p -> (
          let w0 = Prim.waits () in
          let t0 = Unix.gettimeofday () in
          match
            use p;
            Gc.full_major ();
            Gc.full_major ()
          with
          | () ->
              Printf.printf "%-26s OK  (finalisers: %3.0f ms, %2d waits on this thread, rig set blocked after: %b)\n%!" n
                ((Unix.gettimeofday () -. t0) *. 1000.)
                (Prim.waits () - w0) (Prim.blocks_rig_set ())
          | exception e -> Printf.printf "%-26s %s\n%!" n (Printexc.to_string e)))
    names;
  (* the helper thread's drain, if any, ends within 2 s *)
  Unix.sleepf 0.3
