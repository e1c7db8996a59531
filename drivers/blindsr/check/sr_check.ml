(* sr_check blindsr.cmxs: see dune. *)
module Prim = Rig_edge_primitives

(* What each situation does, in a child. *)
let situation (module P : Rig_edge.Package) what =
  let read d r =
    match (P.D.locate d r).reach with
    | None -> "no reach"
    | Some f ->
        let b = Bytes.make 8 '?' in
        Prim.masked (fun () -> f (Rig_edge.Read { off = 0; into = b }));
        Bytes.to_string b
  in
  let write d r s =
    match (P.D.locate d r).reach with
    | None -> ()
    | Some f -> Prim.masked (fun () -> f (Rig_edge.Write { off = 0; from = s }))
  in
  let o = P.openers () in
  let a = Prim.masked (List.nth o 0).make and b = Prim.masked (List.nth o 1).make in
  let alloc d = match Prim.masked (fun () -> P.D.alloc d Rig_edge.Device 4096) with Some r -> r | None -> failwith "None" in
  let ra = alloc a in
  write a ra "ABCDEFGH";
  let mb = Prim.masked (fun () -> P.D.map_peer b a ra) in
  let stop d = Prim.masked (fun () -> P.D.stop d ~fault:None) in
  (match what with
  | "importer-stop" ->
      stop b;
      Printf.printf "exporter reads %S\n%!" (read a ra)
  | "exporter-stop" ->
      stop a;
      Printf.printf "importer reads %S\n%!" (read b mb)
  | "free-after-stop" ->
      stop b;
      Prim.masked (fun () -> P.D.free b mb);
      stop a;
      ignore (P.D.signaled a);
      Prim.masked (fun () -> P.D.free a ra);
      Printf.printf "freed after stop\n%!"
  | _ -> ());
  exit 0

let () =
  let path = Sys.argv.(1) in
  Dynlink.loadfile path;
  let names = Rig_edge_registry.names () in
  List.iter
    (fun name ->
      match Rig_edge_registry.find name with
      | None -> ()
      | Some p ->
          List.iter
            (fun what ->
              match Unix.fork () with
              | 0 -> ( try situation p what with e -> Printf.printf "raised %s\n%!" (Printexc.to_string e); exit 3)
              | pid ->
                  let _, st = Unix.waitpid [] pid in
                  Printf.printf "%-30s %-16s %s\n%!" name what
                    (match st with
                    | Unix.WEXITED n -> Printf.sprintf "exit %d" n
                    | Unix.WSIGNALED s -> Printf.sprintf "killed by signal %d" s
                    | Unix.WSTOPPED _ -> "stopped"))
            [ "importer-stop"; "exporter-stop"; "free-after-stop" ])
    names
