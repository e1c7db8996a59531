(* mbcheck: drives every mb-* driver directly, through its Package (openers,
   D, kit.bus_agent) and nothing else, through the sequences that show each
   broken driver's bug, and prints per driver what it saw.  No certifier. *)

open Rig_edge
module Prim = Rig_edge_primitives

let sp = Printf.sprintf

type verdict = Fine of string | Bug of string

module Run (P : Rig_edge.Package) = struct
  module D = P.D

  type dev = { d : D.t; mutable v : int }

  let agent = Option.get P.kit.bus_agent
  let fn = Option.get P.kit.bus_function
  let results : (string * string * verdict) list ref = ref []
  let say clause what v = results := (clause, what, v) :: !results

  let check clause what f =
    match f () with
    | v -> say clause what v
    | exception e -> say clause what (Bug ("raised " ^ Printexc.to_string e))

  let open_ n =
    let o = List.find (fun (o : D.t opener) -> o.name = n) (P.openers ()) in
    { d = o.make (); v = 0 }

  let handle dv r = (D.locate dv.d r).handle
  let reach dv r = Option.get (D.locate dv.d r).reach

  let read dv r =
    let b = Bytes.create (D.locate dv.d r).size in
    reach dv r (Read { off = 0; into = b });
    Bytes.to_string b

  let write dv r s = reach dv r (Write { off = 0; from = s })

  let alloc dv n =
    match D.alloc dv.d Device n with Some r -> r | None -> failwith (sp "alloc of %d bytes answered None" n)

  let work dv parts =
    let q = (D.facts dv.d).queue in
    let s = encode parts in
    let rec room k =
      if k > 8 then failwith "room keeps answering RIG_GROW";
      match q.room s with
      | Room -> ()
      | Grow -> ( match D.grow dv.d with Grown -> room (k + 1) | Short n -> failwith (sp "grow: Short %d" n))
    in
    room 0;
    dv.v <- dv.v + 1;
    if not (q.submit s ~value:dv.v) then failwith "submit failed";
    if not (q.commit ()) then failwith "commit failed";
    let rec wait k =
      if D.signaled dv.d < dv.v then begin
        if k > 100 then failwith "work never ended";
        D.sleep dv.d ~seen:(D.signaled dv.d) ~still_ms:100;
        wait (k + 1)
      end
    in
    wait 0

  let all c s = String.for_all (( = ) c) s
  let h64 dv r = handle dv r

  let run () =
    let d0 = open_ "hostmem0" and d1 = open_ "hostmem1" in
    (* 1. MEM-9: a region beyond the BAR, with room in the BAR *)
    check "MEM-9" "dma of a region beyond the BAR" (fun () ->
        let fa = alloc d0 (1 lsl 20) and fb = alloc d0 (1 lsl 20) and r = alloc d0 (256 lsl 10) in
        D.free d0.d fa;
        let h0 = h64 d0 r in
        let res = D.dma d0.d r ~fn in
        let h1 = h64 d0 r in
        D.free d0.d fb;
        D.free d0.d r;
        match res with
        | Ok _ when h1 <> h0 -> Bug (sp "Ok, but locate's handle went 0x%Lx -> 0x%Lx: the region was moved where fn reaches it" h0 h1)
        | Ok _ -> Fine "Ok, in place"
        | Error e -> Fine ("Error: " ^ e));
    (* 2. MEM-9: a small region *)
    let rs = alloc d0 4096 in
    let a_small = ref None in
    check "MEM-9" "dma of a small region" (fun () ->
        let h0 = h64 d0 rs in
        match D.dma d0.d rs ~fn with
        | Error e -> Bug ("the kit's function refused a small Device region: " ^ e)
        | Ok b ->
            a_small := Some b;
            let h1 = h64 d0 rs in
            if h1 <> h0 then Bug (sp "locate's handle went 0x%Lx -> 0x%Lx: the region was moved" h0 h1)
            else begin
              write d0 rs (String.make 4096 'M');
              if all 'M' (agent.read ~fn b 4096) then Fine "Ok, in place, fn reads the region's own bytes"
              else Bug "fn's address holds other bytes than the region's"
            end);
    (* 3. MEM-8: functions that are not *)
    List.iter
      (fun bad ->
        check "MEM-8" (sp "dma ~fn:%S" bad) (fun () ->
            match D.dma d0.d rs ~fn:bad with
            | Ok (Bus a) -> Bug (sp "Ok (Bus 0x%Lx) for a function the machine lacks" a)
            | Error e ->
                let rec has i = i + String.length bad <= String.length e && (String.sub e i (String.length bad) = bad || has (i + 1)) in
                if has 0 then Fine ("Error naming it: " ^ e) else Bug ("Error not naming fn: " ^ e)))
      [ "not-a-bus-address"; "0000:99:1f.7" ];
    (* 4. MEM-10: both directions *)
    (match !a_small with
    | None -> say "MEM-10" "visibility" (Fine "n/a: no Bus answer")
    | Some a ->
        check "MEM-10" "fn sees the work's write" (fun () ->
            ignore (agent.read ~fn a 4096);
            work d0 [ Fill { dst = h64 d0 rs; off = 0; len = 4096; byte = 0xab } ];
            if all '\xab' (agent.read ~fn a 4096) then Fine "fn reads 0xab after the Fill's value"
            else Bug "fn reads stale bytes after the value of the work that wrote them");
        check "MEM-10" "later work sees fn's write" (fun () ->
            agent.write ~fn a (String.make 4096 'Z');
            let out = alloc d0 4096 in
            work d0 [ Copy { src = h64 d0 rs; src_off = 0; dst = h64 d0 out; dst_off = 0; len = 4096 } ];
            let got = read d0 out in
            D.free d0.d out;
            if all 'Z' got then Fine "a Copy submitted after fn wrote copies fn's bytes"
            else Bug "work submitted after fn wrote does not see fn's bytes"));
    (* 5. MEM-5: mappings kept until freed *)
    check "MEM-5" "map_peer twice, free one, more mappings" (fun () ->
        let r = alloc d1 4096 in
        write d1 r (String.make 4096 'P');
        let m1 = D.map_peer d0.d d1.d r in
        let m2 = D.map_peer d0.d d1.d r in
        D.free d0.d m1;
        let v1 = try if all 'P' (read d0 m2) then None else Some "second mapping reads other bytes" with e -> Some ("second mapping, after the free of the first: " ^ Printexc.to_string e) in
        work d1 [ Fill { dst = h64 d1 r; off = 0; len = 4096; byte = Char.code 'Q' } ];
        let v2 = try if all 'Q' (read d0 m2) then None else Some "the mapping does not show d1's later write" with e -> Some (Printexc.to_string e) in
        let ra = alloc d1 256 and rb = alloc d1 256 in
        let ma = D.map_peer d0.d d1.d ra and mb = D.map_peer d0.d d1.d rb in
        let v3 = try ignore (read d0 m2); ignore (read d0 ma); None with e -> Some ("a live mapping, after two more map_peer: " ^ Printexc.to_string e) in
        List.iter (D.free d0.d) [ ma; mb; m2 ];
        List.iter (D.free d1.d) [ ra; rb; r ];
        match List.filter_map Fun.id [ v1; v2; v3 ] with [] -> Fine "every live mapping maps r" | l -> Bug (String.concat "; " l));
    (* 6. MEM-11: Bus memory out of every later allocation *)
    check "MEM-11" "free a Bus region, fill the budget, fn writes" (fun () ->
        let r = alloc d0 4096 in
        match D.dma d0.d r ~fn with
        | Error e -> Fine ("n/a: " ^ e)
        | Ok a ->
            D.free d0.d r;
            let rec grab acc k = if k = 0 then acc else match D.alloc d0.d Device 4096 with Some x -> grab (x :: acc) (k - 1) | None -> acc in
            let xs = grab [] 1500 in
            List.iter (fun x -> write d0 x (String.make 4096 'x')) xs;
            agent.write ~fn a (String.make 4096 'K');
            let hit = List.exists (fun x -> String.contains (read d0 x) 'K') xs in
            let n = List.length xs in
            List.iter (D.free d0.d) xs;
            if hit then Bug (sp "fn's write at the freed Bus region's address landed in one of %d later allocations" n)
            else Fine (sp "%d later allocations untouched by fn's write" n));
    (* 7. MEM-5: the exporter stops *)
    check "MEM-5" "exporter stops while a mapping is live" (fun () ->
        let r = alloc d1 4096 in
        write d1 r (String.make 4096 'S');
        let m = D.map_peer d0.d d1.d r in
        D.stop d1.d ~fault:None;
        let v = try if all 'S' (read d0 m) then None else Some "reads other bytes" with e -> Some (Printexc.to_string e) in
        D.free d0.d m;
        D.free d1.d r;
        match v with None -> Fine "the mapping still maps r after d1's stop" | Some e -> Bug ("after the exporter's stop: " ^ e));
    (* 8. MEM-11: d's function kept from any other open *)
    check "MEM-11" "stop d0, open hostmem0 again" (fun () ->
        D.stop d0.d ~fault:None;
        match open_ "hostmem0" with
        | exception Failure e -> Fine ("the open is refused: " ^ e)
        | d0' ->
            let xs = List.init 8 (fun _ -> alloc d0' 4096) in
            List.iter (fun x -> write d0' x (String.make 4096 'x')) xs;
            let hit =
              match !a_small with
              | Some a ->
                  agent.write ~fn a (String.make 4096 'R');
                  List.exists (fun x -> String.contains (read d0' x) 'R') xs
              | None -> false
            in
            D.stop d0'.d ~fault:None;
            Bug
              ("a new open of hostmem0 was made after a Bus answer"
              ^ if hit then "; fn's write at the old Bus address landed in its allocation" else ""));
    List.rev !results
end

let () =
  let bugs_total = ref 0 and mismatches = ref 0 in
  List.iter
    (fun (name, declared, (module P : Rig_edge.Package)) ->
      let module R = Run (P) in
      let res = Prim.masked R.run in
      Printf.printf "== %s (declared: %s)\n" name declared;
      List.iter
        (fun (c, what, v) ->
          match v with
          | Fine s -> Printf.printf "   %-6s %-48s clean: %s\n" c what s
          | Bug s -> Printf.printf "   %-6s %-48s BUG: %s\n" c what s)
        res;
      let shown = List.sort_uniq compare (List.filter_map (function c, _, Bug _ -> Some c | _ -> None) res) in
      let verdict = match shown with [] -> "clean" | l -> "bug shown: " ^ String.concat ", " l in
      let expect = if declared = "conforming" then [] else [ declared ] in
      if shown <> expect then incr mismatches;
      if shown <> [] then incr bugs_total;
      Printf.printf "   => %s  [%s]\n%!" verdict (if shown = expect then "as declared" else "MISMATCH"))
    Blindmb.packages;
  Printf.printf "\n%d drivers, %d with a bug shown, %d mismatches against the table\n" (List.length Blindmb.packages)
    !bugs_total !mismatches;
  exit (if !mismatches = 0 then 0 else 1)
