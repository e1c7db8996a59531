(* a2_check [-v] PLUGIN: loads blinda2.cmxs with Dynlink, lists the a2-* drivers
   it registered and runs each the way rig would: every call inside
   Prim.masked on a thread holding no lock; the device made through its
   opener's make; alloc, image, entry (the kit's spin, and a scratch
   function larger than the device, whose Invalid_argument goes through the
   raise paths), free, a bad alloc (size 0: Invalid_argument through
   alloc's raise path, which rig never asks, to run the handlers), a
   second free of a region (Invalid_argument through free's raise path,
   also never asked by rig), unload, stop.  Prints, per driver, the calls
   that raised and the largest rig_holds () seen after a call (with -v,
   every call: OK or the exception).  It shows that the drivers run; it
   does not judge them. *)

module Prim = Rig_edge_primitives

let bad = ref 0
let verbose = ref false

(* this driver's calls: (label, outcome, holds after) *)
let calls : (string * string * int) list ref = ref []

let step label f =
  let r =
    match Prim.masked f with
    | v -> Ok v
    | exception e -> Error e
  in
  let h = Prim.holds () in
  if h <> 0 then incr bad;
  let out = match r with Ok _ -> "OK" | Error e -> Printexc.to_string e in
  calls := (label, out, h) :: !calls;
  if !verbose then Printf.printf "    %-22s %s  holds=%d\n%!" label out h;
  r

(* One line per driver: how many calls, the ones that raised (by label),
   and the largest rig_holds () seen after a call. *)
let summary name =
  let cs = List.rev !calls in
  let raised = List.filter (fun (_, o, _) -> o <> "OK") cs in
  let maxh = List.fold_left (fun m (_, _, h) -> max m h) 0 cs in
  Printf.printf "%-30s %2d calls, %2d OK, raised: %s; max holds after a call: %d\n%!" name (List.length cs)
    (List.length cs - List.length raised)
    (if raised = [] then "none"
     else
       String.concat ", "
         (List.map
            (fun (l, o, _) -> Printf.sprintf "%s (%s)" l (List.hd (String.split_on_char '(' o)))
            raised))
    maxh

let run name =
  match Rig_edge_registry.find name with
  | None -> Printf.printf "%s: not found\n" name
  | Some (module P) -> (
      calls := [];
      if !verbose then Printf.printf "%s\n%!" name;
      Fun.protect ~finally:(fun () -> summary name) @@ fun () ->
      match step "openers" P.openers with
      | Error _ | Ok [] -> incr bad
      | Ok (o :: _) -> (
          match step ("make " ^ o.Rig_edge.name) o.make with
          | Error _ -> incr bad
          | Ok d ->
              let r = step "alloc Device 64" (fun () -> P.D.alloc d Rig_edge.Device 64) in
              let r2 = step "alloc Mapped 4096" (fun () -> P.D.alloc d Rig_edge.Mapped 4096) in
              ignore (step "alloc 0 (raise path)" (fun () -> P.D.alloc d Rig_edge.Device 0));
              (match step "image kit.binary" (fun () -> P.D.image d P.kit.binary) with
              | Ok (Ok i) ->
                  let spin = Option.value ~default:"spin" P.kit.spin in
                  ignore (step ("entry " ^ spin) (fun () -> P.D.entry i spin));
                  ignore (step ("entry " ^ spin ^ " again") (fun () -> P.D.entry i spin));
                  ignore (step "entry nop" (fun () -> P.D.entry i "nop"));
                  ignore (step "unload" (fun () -> P.D.unload i))
              | Ok (Error why) ->
                  incr bad;
                  Printf.printf "    image refused: %s\n" why
              | Error _ -> incr bad);
              (match P.kit.scratch with
              | Some sc -> (
                  let b, f = sc (64 lsl 20) in
                  match step "image scratch" (fun () -> P.D.image d b) with
                  | Ok (Ok i) ->
                      ignore (step "entry too big (raise)" (fun () -> P.D.entry i f));
                      ignore (step "unload" (fun () -> P.D.unload i))
                  | _ -> incr bad)
              | None -> ());
              List.iter
                (function
                  | Ok (Some reg) -> ignore (step "free" (fun () -> P.D.free d reg))
                  | Ok None -> Printf.printf "    (alloc answered None)\n"
                  | Error _ -> incr bad)
                [ r; r2 ];
              (* a second free of the first region (rig never asks it,
                 GUAR-1): hostmem's Invalid_argument runs free's raise path *)
              (match r with
              | Ok (Some reg) -> ignore (step "free again (raise)" (fun () -> P.D.free d reg))
              | _ -> ());
              ignore (step "stop" (fun () -> P.D.stop d ~fault:None));
              (match (P.D.facts d).own_word with
              | Some w -> ignore (step "free word" (fun () -> P.D.free d w))
              | None -> ())))

let () =
  let args = List.tl (Array.to_list Sys.argv) in
  verbose := List.mem "-v" args;
  let args = List.filter (( <> ) "-v") args in
  let plugin =
    if args <> [] then List.hd args
    else Filename.concat (Filename.dirname (Filename.dirname Sys.executable_name)) "blinda2.cmxs"
  in
  (try Dynlink.loadfile plugin
   with Dynlink.Error e ->
     prerr_endline (Dynlink.error_message e);
     exit 2);
  let names = List.filter (fun n -> String.length n > 3 && String.sub n 0 3 = "a2-") (Rig_edge_registry.names ()) in
  Printf.printf "%d drivers registered: %s\n%!" (List.length names) (String.concat " " names);
  List.iter run names;
  let inv = Prim.Lock.order_inversions () in
  Printf.printf "lock order inversions: %d\n" (List.length inv);
  List.iter (fun (a, b) -> Printf.printf "  %s / %s\n" a b) inv;
  Printf.printf "%s: every call left rig_holds () at 0 on this thread%s\n"
    (if !bad = 0 then "done" else "SEE ABOVE")
    (if !bad = 0 then "" else Printf.sprintf " (%d unexpected)" !bad)
