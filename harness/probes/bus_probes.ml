(* Probes of dma's Bus answers (MEM-9, MEM-10, MEM-11); see bus_probes.mli.
   They play the PCI function through kit.bus_agent and call the driver
   through Probes.Kit, as the other probes do. *)

open Rig_edge
module Prim = Rig_edge_primitives

let spf = Printf.sprintf
let case = Probes.case

module Bus (P : Package) = struct
  module K = Probes.Kit (P)

  let skip why = raise (Probes.Skip why)

  (* The kit's function and the agent that plays it.  Every case needs
     both, the agent first: without it the harness cannot stand for fn, and
     MEM-9..MEM-11 are n/a for that reason (though MEM-9 and the function
     case then make no call of it). *)
  let bus () =
    let ag = K.need_item "bus_agent" P.kit.bus_agent in
    (K.need_item "bus_function" P.kit.bus_function, ag)

  let at (Bus a) off = Bus (Int64.add a (Int64.of_int off))
  let show (Bus a) = spf "Bus 0x%Lx" a

  (* dma of the kit's function; an Error leaves nothing for these clauses
     to see (whether it should have reached is MEM-8's). *)
  let dma (r : K.reg) fn =
    match K.call r.dev (fun () -> P.D.dma r.dev.d r.region ~fn) with
    | Ok b -> b
    | Error why -> skip (spf "setup: dma ~fn:%S of %d bytes of Device memory is Error %S" fn r.size why)

  let device s dev n what =
    match K.alloc s dev Device n with Some r -> r | None -> skip (spf "setup: no Device memory for %s" what)

  (* The agent's calls, masked like every call of the probes; an exception
     is what fn could not do. *)
  let bus_read ag ~fn b n = try Ok (Prim.masked (fun () -> ag.read ~fn b n)) with e -> Error (Printexc.to_string e)
  let bus_write ag ~fn b str = try Ok (Prim.masked (fun () -> ag.write ~fn b str)) with e -> Error (Printexc.to_string e)

  let first_difference = Probes.first_difference

  (* Runs [parts] on [dev] and waits for them; false (with a finding) when
     the work could not run. *)
  let work s (dev : K.dev) parts what =
    match K.submit dev parts with
    | Error e -> K.flag s "%s could not be submitted: %s" what e; false
    | Ok v -> (
        match K.wait_value s dev v ~ms:3000 with
        | Reached -> true
        | w -> K.flag s "%s (value %d): %s" what v (K.describe_wait w); false)

  (* Device memory of [dev] taken, at most [cap] bytes in all (the cost of
     filling it stays bounded on a device with much of it). *)
  let cap = 256 lsl 20
  let take_most s dev = K.take s dev (min cap (K.free_bytes s dev))

  (* Fills [regions] with [y], 64 parts a submission; false (with a
     finding) when the work could not run. *)
  let fill_all s dev regions y what =
    let rec go = function
      | [] -> true
      | rs ->
          let now = List.filteri (fun i _ -> i < 64) rs and rest = List.filteri (fun i _ -> i >= 64) rs in
          work s dev (List.map (fun (x : K.reg) -> K.fill_part x ~off:0 ~len:x.size ~byte:y) now) what && go rest
    in
    go regions
end

(* MEM-9: after an Ok, r still lies where it lay: locate answers the same,
   its bytes are the ones written before, and a map_peer of r made before
   the dma still maps r's memory, both ways and for work.  A driver that
   moved r where fn reaches it has two memories behind what was one. *)
let mem9_stays_put (module P : Package) ~seed =
  let module B = Bus (P) in
  let module K = B.K in
  K.run ~clause:"MEM-9" ~seed (fun s ->
      let fn, _ = B.bus () in
      let owner, mapper =
        match K.openers () with
        | o1 :: o2 :: _ ->
            let a = K.open_dev s o1 in
            let b = K.open_dev s o2 in
            (b, if P.D.peer a.d b.d then Some a else None)
        | [ o ] -> (K.open_dev s o, None)
        | [] -> B.skip "the package has no opener"
      in
      let n = word * (1 + K.int s 1024) in
      let r = B.device s owner n "the region" in
      let mp = Option.map (fun a -> K.map_peer s a r) mapper in
      let mp = match mp with Some m when K.reachable m -> Some m | _ -> None in
      let p0 = K.pattern s n in
      let host = K.write r ~off:0 p0 in
      let before = K.place r in
      (* After dma answered [bus] for r: locate answers as [before], and,
         where the host reaches r, r holds [p] ([where]: which r) *)
      let stayed ?(where = "") (r : K.reg) bus (before : place) p host =
        let after = K.place r in
        if after.handle <> before.handle || after.size <> before.size then
          K.flag_value s "dma ~fn:%S%s answered %s, and locate then answered handle %Ld size %d, not handle %Ld size %d: r moved"
            fn where (B.show bus) after.handle after.size before.handle before.size;
        if host then
          match K.read r ~off:0 ~len:r.size with
          | Some got when got <> p ->
              K.flag_value s "after dma ~fn:%S%s answered %s, r no longer holds the bytes written before: %s" fn where (B.show bus)
                (B.first_difference got p)
          | _ -> ()
      in
      let bus = B.dma r fn in
      stayed r bus before p0 host;
      (* Again with a region allocated behind most of the Device memory
         (at most 256 MiB taken first, then given back): a driver whose fn
         reaches part of the memory only (a BAR smaller than the GPU's
         memory) must answer Error for a region beyond it, not move it
         there. *)
      let n_late = word * (1 + K.int s 1024) in
      let ahead = B.take_most s owner in
      let rec room_for_r taken =
        match K.alloc s owner Device n_late with
        | Some r -> Some r
        | None -> ( match taken with x :: rest -> K.free_reg x; room_for_r rest | [] -> None)
      in
      let late = room_for_r ahead in
      (* the rest given back first: a driver that moves r has room to *)
      List.iter K.free_reg ahead;
      (match late with
      | None -> ()
      | Some r -> (
          let p = K.pattern s n_late in
          let host = K.write r ~off:0 p in
          let mp = Option.map (fun a -> K.map_peer s a r) mapper in
          let mp = match mp with Some m when K.reachable m -> Some m | _ -> None in
          let before = K.place r in
          let late = "of a region allocated behind most of the Device memory" in
          match K.call owner (fun () -> P.D.dma owner.d r.region ~fn) with
          | Error _ -> ()
          | Ok bus -> (
              stayed ~where:(" " ^ late) r bus before p host;
              match mp with
              | Some mp ->
                  let p1 = K.pattern s n_late in
                  if K.write r ~off:0 p1 then (
                    match K.read mp ~off:0 ~len:n_late with
                    | Some got when got <> p1 ->
                        K.flag_value s "after dma ~fn:%S %s answered %s, bytes written into r do not show through %s's map_peer of r made before (%s): r's memory moved"
                          fn late (B.show bus) mp.dev.oname (B.first_difference got p1)
                    | _ -> ())
              | None -> ())));
      match mp with
      | None -> if not host then B.skip "neither host access to r nor a map_peer of it shows where r's memory lies"
      | Some mp ->
          let a = mp.dev in
          let p1 = K.pattern s n in
          if K.write r ~off:0 p1 then (
            match K.read mp ~off:0 ~len:n with
            | Some got when got <> p1 ->
                K.flag_value s "after dma ~fn:%S answered %s, bytes written into r do not show through %s's map_peer of r (%s): r's memory moved"
                  fn (B.show bus) a.oname (B.first_difference got p1)
            | _ -> ());
          let off = word * K.int s (n / word) in
          let len = 1 + K.int s (n - off) in
          let x = K.byte s in
          if B.work s a [ K.fill_part mp ~off ~len ~byte:x ] (spf "a Fill on %s of its map_peer of r" a.oname) then
            match K.read r ~off ~len with
            | Some got when got <> String.make len (Char.chr x) ->
                K.flag_value s "after dma ~fn:%S answered %s, a Fill on %s of bytes [%d,%d) of its map_peer of r with %02x does not show in r (%s): r's memory moved"
                  fn (B.show bus) a.oname off (off + len) x (B.first_difference got (String.make len (Char.chr x)))
            | _ -> ())

(* MEM-10: the bytes each value's work wrote into r are what fn reads at
   the Bus address once the word reads that value; what fn wrote there is
   what the device's work submitted afterwards reads. *)
let mem10_visible (module P : Package) ~seed =
  let module B = Bus (P) in
  let module K = B.K in
  K.run ~clause:"MEM-10" ~seed (fun s ->
      let fn, ag = B.bus () in
      let dev = match K.openers () with o :: _ -> K.open_dev s o | [] -> B.skip "the package has no opener" in
      let n = word * (4 + K.int s 1024) in
      let r = B.device s dev n "the region" and r2 = B.device s dev n "the copies' destination" in
      let b0 = K.byte s in
      ignore (K.run_or_skip s dev [ K.fill_part r ~off:0 ~len:n ~byte:b0 ] "the Fill before dma");
      let bus = B.dma r fn in
      (* Where the copies land is read by the host, or else by fn itself. *)
      let read_r2 =
        if K.reachable r2 then fun ~off ~len -> Option.get (K.read r2 ~off ~len)
        else
          let bus2 = B.dma r2 fn in
          fun ~off ~len ->
            match B.bus_read ag ~fn (B.at bus2 off) len with Ok got -> got | Error why -> B.skip ("setup: reading the copies' destination: " ^ why)
      in
      let last = ref b0 in
      for round = 1 to 2 + K.int s 3 do
        (* Work writes, fn reads. *)
        let off = word * K.int s (n / word) in
        let len = 1 + K.int s (n - off) in
        let x = K.other_byte s !last in
        last := x;
        let want = String.make len (Char.chr x) in
        if B.work s dev [ K.fill_part r ~off ~len ~byte:x ] (spf "round %d: a Fill of r" round) then begin
          match B.bus_read ag ~fn (B.at bus off) len with
          | Error why -> K.flag_value s "round %d: fn %S could not read %d bytes at %s + %d that dma answered: %s" round fn len (B.show bus) off why
          | Ok got when got <> want ->
              K.flag_value s "round %d: once the word read the value of a Fill of bytes [%d,%d) of r with %02x, fn %S read at %s + %d: %s"
                round off (off + len) x fn (B.show bus) off (B.first_difference got want)
          | Ok _ -> ()
        end;
        (* fn writes, work submitted afterwards reads. *)
        let off = word * K.int s (n / word) in
        let len = 1 + K.int s (n - off) in
        let q = K.pattern s len in
        match B.bus_write ag ~fn (B.at bus off) q with
        | Error why -> K.flag_value s "round %d: fn %S could not write %d bytes at %s + %d that dma answered: %s" round fn len (B.show bus) off why
        | Ok () ->
            let copy = Copy { src = (K.place r).handle; src_off = off; dst = (K.place r2).handle; dst_off = off; len } in
            if B.work s dev [ copy ] (spf "round %d: a Copy from r" round) then begin
              let got = read_r2 ~off ~len in
              if got <> q then
                K.flag_value s "round %d: fn %S wrote %d bytes at %s + %d, then a submitted Copy of bytes [%d,%d) of r carried other bytes: %s"
                  round fn len (B.show bus) off off (off + len) (B.first_difference got q)
            end
      done)

(* MEM-11, the memory: what fn wrote at the Bus address stays there, through
   the free of r, the stop of its device and a new open of its name, and no
   later allocation shares it: their work leaves it alone, and what fn
   writes afterwards does not show in them. *)
let mem11_memory_kept (module P : Package) ~seed =
  let module B = Bus (P) in
  let module K = B.K in
  K.run ~clause:"MEM-11" ~seed (fun s ->
      let fn, ag = B.bus () in
      let o = match K.openers () with o :: _ -> o | [] -> B.skip "the package has no opener" in
      let a = K.open_dev s o in
      let n = word * (16 + K.int s 1000) in
      let r = B.device s a n "the region" in
      ignore (K.run_or_skip s a [ K.fill_part r ~off:0 ~len:n ~byte:(K.byte s) ] "the Fill before dma");
      let bus = B.dma r fn in
      let p = K.pattern s n in
      (match B.bus_write ag ~fn bus p with Ok () -> () | Error why -> B.skip ("setup: fn's write: " ^ why));
      let kept when_ =
        match B.bus_read ag ~fn bus n with
        | Error why -> K.flag_value s "%s, fn %S could not read the %d bytes at %s that dma answered: %s" when_ fn n (B.show bus) why; false
        | Ok got when got <> p ->
            K.flag_value s "%s, the %d bytes fn %S wrote at %s are no longer there: %s" when_ n fn (B.show bus) (B.first_difference got p);
            false
        | Ok _ -> true
      in
      K.free_reg r;
      (* "out of any other allocation", on the same device first: after
         the free of r, its Device memory taken (at most 256 MiB, to its
         end, where an allocator that sets freed Bus memory aside takes it
         back) and filled; fn's bytes stay *)
      let others = B.take_most s a in
      let y0 = K.byte s in
      let filled = others <> [] && B.fill_all s a others y0 (spf "Fills of %d regions of %s allocated after the free of r" (List.length others) o.name) in
      List.iter K.free_reg others;
      if (not filled) || kept (spf "after the free of r and Fills with %02x of the %d regions of %s allocated then" y0 (List.length others) o.name) then begin
        K.close s a;
        if not (K.settled a ~ms:3000) then B.skip "setup: the device's word did not reach its last value after stop";
        K.release_dev s a;
        if kept (spf "after the free of r and the stop of %s" o.name) then
          (* a new open refused keeps d's function from it (function-kept):
             what was judged stands *)
          match K.open_dev s o with
          | exception Probes.Not_opened _ -> ()
          | b ->
              (* Same-sized regions first: an allocator that takes the memory back
                 gives it to one of them. *)
              let sizes = List.init (3 + K.int s 4) (fun _ -> n) @ [ word * (1 + K.int s 4096) ] in
              let regions = List.filter_map (fun k -> K.alloc s b Device k) sizes in
              let y = K.byte s in
              let fills = List.map (fun (x : K.reg) -> K.fill_part x ~off:0 ~len:x.size ~byte:y) regions in
              if regions <> [] && B.work s b fills (spf "Fills of %d regions of a new open of %s" (List.length regions) o.name)
                 && kept (spf "after %s was opened again and its new regions were filled with %02x" o.name y)
              then begin
                let p2 = String.init n (fun _ -> Char.chr (K.other_byte s y)) in
                match B.bus_write ag ~fn bus p2 with
                | Error why -> K.flag_value s "fn %S could no longer write at %s that dma answered: %s" fn (B.show bus) why
                | Ok () ->
                    List.iteri
                      (fun i (x : K.reg) ->
                        match K.read x ~off:0 ~len:x.size with
                        | Some got when got <> String.make x.size (Char.chr y) ->
                            K.flag_value s "fn %S wrote at %s, and region %d (%d bytes) of the new open of %s changed: %s: it shares the memory dma gave fn"
                              fn (B.show bus) i x.size o.name (B.first_difference got (String.make x.size (Char.chr y)))
                        | _ -> ())
                      regions
              end
      end)

(* MEM-11, the function: "keep d's function from any other open".  Two
   readings (spec/decisions.md): fn, the PCI function dma gave d's memory,
   answers Error to a dma of any other open; or d's own PCI function (the
   GPU) is kept from a later open of its name.  A new open of d's name
   after d's stop that succeeds and whose dma ~fn answers Ok breaks both,
   and is the finding; a refused open keeps both.  What only one reading
   forbids (another device's dma ~fn answering Ok; a new open of the name
   that succeeds and is refused fn) is not judged. *)
let mem11_function_kept (module P : Package) ~seed =
  let module B = Bus (P) in
  let module K = B.K in
  K.run ~clause:"MEM-11" ~seed (fun s ->
      let fn, _ = B.bus () in
      let o = match K.openers () with o :: _ -> o | [] -> B.skip "the package has no opener" in
      let a = K.open_dev s o in
      let n = word * (1 + K.int s 1024) in
      let bus = B.dma (B.device s a n "the region") fn in
      K.close s a;
      if not (K.settled a ~ms:3000) then B.skip "setup: the device's word did not reach its last value after stop";
      K.release_dev s a;
      match K.open_dev s o with
      | exception Probes.Not_opened _ -> ()
      | dev -> (
          match K.alloc s dev Device n with
          | None -> ()
          | Some r -> (
              match K.call dev (fun () -> P.D.dma dev.d r.region ~fn) with
              | Error _ -> ()
              | Ok b ->
                  K.flag_value s
                    "a new open of %s, after the stop of the first, succeeded and its dma ~fn:%S answered %s, while the first's answered %s: neither d's function nor fn was kept from another open"
                    o.name fn (B.show b) (B.show bus))))

let cases =
  [
    case "probe.MEM-9.stays-put" "MEM-9" mem9_stays_put;
    case "probe.MEM-10.visible-both-ways" "MEM-10" mem10_visible;
    case "probe.MEM-11.memory-kept" "MEM-11" mem11_memory_kept;
    case "probe.MEM-11.function-kept" "MEM-11" mem11_function_kept;
  ]
