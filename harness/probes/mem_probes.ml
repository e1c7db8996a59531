(* Memory probes (MEM-2, MEM-4, MEM-5, MEM-7, MEM-8); see mem_probes.mli. *)

open Rig_edge
open Probes

(* MEM-2: regions of each kind hold their own bytes, and place.size >= n. *)
let mem2_distinct (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-2" ~seed (fun s ->
      let dev = K.open_first s in
      let regions = ref [] in
      let get kind label =
        for _ = 1 to 2 + K.int s 3 do
          let n = word * (1 + K.int s 2048) in
          let r = match kind with `Device -> K.alloc s dev Device n | `Host -> K.alloc_host s dev n in
          match r with
          | None -> ()
          | Some r ->
              let size = (K.place r).size in
              if size < n then K.flag_value s "alloc of %d bytes of %s memory: place.size is %d" n label size;
              regions := (label, n, r) :: !regions
        done
      in
      get `Device "Device";
      get `Host "Mapped/Pinned";
      let regions = List.rev !regions in
      (* The patterns go in only once every region exists, so that a later
         alloc over an earlier region's memory shows. *)
      (* A region's own n bytes are this clause's: a write or read of them
         that raises (a Fault for bytes past the memory alloc made) is a
         finding here, not a failed setup. *)
      let written =
        List.filter_map
          (fun (label, n, r) ->
            let p = K.pattern s n in
            match K.write r ~off:0 p with
            | true -> Some (label, n, r, p)
            | false -> None
            | exception Skip _ -> None (* bytes past place.size: flagged above *)
            | exception e ->
                K.flag_value s "a write of the %d bytes of an alloc of %d bytes of %s memory raised %s" n n label (Printexc.to_string e);
                None)
          regions
      in
      if written = [] then raise (Skip "no region the host can reach");
      List.iteri
        (fun i (label, n, r, p) ->
          match K.read r ~off:0 ~len:n with
          | exception e ->
              K.flag_value s "a read of the %d bytes of region %d (%s) raised %s" n i label (Printexc.to_string e)
          | Some got when got <> p ->
              let j = ref 0 in
              while got.[!j] = p.[!j] do incr j done;
              K.flag_value s "region %d (%s, %d bytes) does not hold the bytes written into it: byte %d reads %02x, not %02x (alloc overlaps another region?)"
                i label n !j (Char.code got.[!j]) (Char.code p.[!j])
          | _ -> ())
        written;
      (* Two regions stay two after a free of their size came before them:
         alloc, free, alloc, alloc, in each memory (a cache of freed
         buffers per size that hands one out without taking it out: blind
         mc-alloc-cache-peek, host memory). *)
      List.iter
        (fun (kind, label) ->
          let n = word * (1 + K.int s 512) in
          let alloc () = match kind with `Device -> K.alloc s dev Device n | `Host -> K.alloc_host s dev n in
          match alloc () with
          | None -> ()
          | Some first -> (
              K.free_reg first;
              match (alloc (), alloc ()) with
              | Some b, Some c -> (
                  let pb = K.pattern s n in
                  let pc = String.map (fun ch -> Char.chr (Char.code ch lxor 0xff)) pb in
                  match K.write b ~off:0 pb && K.write c ~off:0 pc with
                  | true -> (
                      match K.read b ~off:0 ~len:n with
                      | Some got when got <> pb ->
                          K.flag_value s "after an alloc and its free, two allocs of %d bytes of %s memory share their bytes: a write through the second changed the first" n label
                      | _ -> ())
                  | false -> ()
                  | exception Skip _ -> ())
              | _ -> ()))
        [ (`Device, "Device"); (`Host, "Mapped/Pinned") ];
      (* Two regions stay two after a refused image and a free came before
         them: alloc, image of kit.refused_binary, free, alloc, alloc. *)
      match P.kit.refused_binary with
      | Some bad when dev.lost = None -> (
          let n = word * (1 + K.int s 64) in
          match K.alloc s dev Device n with
          | None -> ()
          | Some first -> (
              (* An image that raises is CODE-1's, and leaves nothing to judge here *)
              (try ignore (K.image s dev bad) with _ -> ());
              if dev.lost = None then begin
                K.free_reg first;
                match (K.alloc s dev Device n, K.alloc s dev Device n) with
                | Some b, Some c ->
                    let pb = K.pattern s n in
                    let pc = String.map (fun ch -> Char.chr (Char.code ch lxor 0xff)) pb in
                    if K.write b ~off:0 pb && K.write c ~off:0 pc then (
                      match K.read b ~off:0 ~len:n with
                      | Some got when got <> pb ->
                          K.flag_value s "after alloc, an image of kit.refused_binary and a free, two allocs of %d bytes of Device memory share their bytes: a write through the second changed the first" n
                      | _ -> ())
                | _ -> ()
              end))
      | _ -> ())

(* MEM-4: peer answers the same once either device is stopped; and a device
   opened anew under a's name (three times) answers as its hardware does:
   false where map_peer of b's Device memory then maps it is no answer. *)
let mem4_peer_stable (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-4" ~seed (fun s ->
      let a, b = K.open_two s in
      let ab = P.D.peer a.d b.d and ba = P.D.peer b.d a.d in
      let n = word * (1 + K.int s 1024) in
      let try_map x y yes =
        if yes then
          match K.alloc s y Device n with
          | None -> ()
          | Some r -> (
              match K.map_peer s x r with
              | _ -> ()
              | exception e ->
                  K.flag_value s "peer %s %s is true, but map_peer of %d bytes of Device memory raised %s" x.oname y.oname n
                    (Printexc.to_string e))
      in
      try_map a b ab;
      try_map b a ba;
      let check when_ =
        let ab' = P.D.peer a.d b.d and ba' = P.D.peer b.d a.d in
        if ab' <> ab then K.flag_value s "peer %s %s was %b at open, %b %s" a.oname b.oname ab ab' when_;
        if ba' <> ba then K.flag_value s "peer %s %s was %b at open, %b %s" b.oname a.oname ba ba' when_
      in
      let a_opener = List.find (fun (o : _ Rig_edge.opener) -> o.name = a.oname) (K.openers ()) in
      let rec reopen a k =
        if k = 0 then a
        else begin
          K.close s a;
          reopen (K.open_dev s a_opener) (k - 1)
        end
      in
      let a' = reopen a 3 in
      let ab' = P.D.peer a'.d b.d in
      if ab && not ab' then (
        match K.alloc s b Device n with
        | None -> ()
        | Some r -> (
            match K.map_peer s a' r with
            | _ ->
                K.flag_value s "peer %s %s is false for the device opened anew three times under %s's name, yet map_peer of %d bytes of %s's Device memory maps it (peer was true for the first %s)"
                  a'.oname b.oname a.oname n b.oname a.oname
            | exception _ -> ()))
      else if ab' then try_map a' b true;
      K.close s b;
      check (spf "once %s is stopped" b.oname);
      K.close s a';
      let ab'' = P.D.peer a'.d b.d in
      if ab'' <> ab' then K.flag_value s "peer %s %s was %b at open, %b once both are stopped" a'.oname b.oname ab' ab'')

(* MEM-5: map_peer maps the memory of r itself, both ways, also for work,
   and each mapping keeps it mapped until it is freed: after each new
   mapping (of another region, or of the same region again), every earlier
   one still live is checked again, both ways. *)
let mem5_map_peer_live (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-5" ~seed (fun s ->
      let a, b = K.open_two s in
      let kinds = (if P.D.peer a.d b.d then [ `Device ] else []) @ [ `Host ] in
      let tested = ref 0 in
      let live = ref [] in
      (* An access through a mapping that raises is a mapping that does not
         map r's memory: this probe's clause, not a setup failure. *)
      let access what f = try f () with e -> K.flag_value s "%s raised %s" what (Printexc.to_string e); None in
      let still_maps label (r : K.reg) (mp : K.reg) k =
        let n = r.size in
        let p1 = K.pattern s n in
        if K.write r ~off:0 p1 then
          (match access (spf "a read through %s's mapping %d" a.oname k) (fun () -> Some (K.read mp ~off:0 ~len:n)) with
          | Some got when got <> Some p1 ->
              K.flag_value s "%s memory of %s: once %s made %d later mapping(s), bytes written into r no longer show through its mapping %d, not yet freed"
                label b.oname a.oname (List.length !live - k) k
          | _ -> ());
        let p2 = K.pattern s n in
        match access (spf "a write through %s's mapping %d" a.oname k) (fun () -> Some (K.write mp ~off:0 p2)) with
        | Some true ->
            if K.read r ~off:0 ~len:n <> Some p2 then
              K.flag_value s "%s memory of %s: once %s made %d later mapping(s), bytes written through its mapping %d, not yet freed, do not show in r"
                label b.oname a.oname (List.length !live - k) k
        | _ -> ()
      in
      List.iter
        (fun kind ->
          let label = match kind with `Device -> "Device" | `Host -> "Mapped/Pinned" in
          let rec regions i prev =
            if i > 0 then begin
              let n = word * (4 + K.int s 1024) in
              (* The same region mapped again, or a new one. *)
              let r =
                match prev with
                | Some r when K.int s 3 = 0 -> Some r
                | _ -> ( match kind with `Device -> K.alloc s b Device n | `Host -> K.alloc_host s b n)
              in
              match r with
              | None -> ()
              | Some r ->
                  let n = r.size in
                  let mp = K.map_peer s a r in
                  if K.reachable r && K.reachable mp then begin
                    incr tested;
                    let p1 = K.pattern s n in
                    ignore (K.write r ~off:0 p1);
                    if K.read mp ~off:0 ~len:n <> Some p1 then
                      K.flag_value s "%s memory of %s: bytes written into r after map_peer do not show through %s's mapping" label
                        b.oname a.oname;
                    let p2 = K.pattern s n in
                    ignore (K.write mp ~off:0 p2);
                    if K.read r ~off:0 ~len:n <> Some p2 then
                      K.flag_value s "%s memory of %s: bytes written through %s's mapping do not show in r" label b.oname a.oname;
                    let off = word * K.int s (n / word) in
                    let len = 1 + K.int s (n - off) in
                    let bt = K.byte s in
                    (match K.submit a [ K.fill_part mp ~off ~len ~byte:bt ] with
                    | Error e -> K.flag s "a Fill of %s's mapping could not be submitted: %s" a.oname e
                    | Ok v -> (
                        match K.wait_value s a v ~ms:3000 with
                        | Reached -> (
                            match K.read r ~off ~len with
                            | Some got when got <> String.make len (Char.chr bt) ->
                                K.flag_value s "%s memory of %s: a Fill on %s of bytes [%d,%d) of the mapping with %02x does not show in r"
                                  label b.oname a.oname off (off + len) bt
                            | _ -> ())
                        | w -> K.flag s "a Fill on %s of its mapping of %s memory: %s" a.oname label (K.describe_wait w)));
                    live := !live @ [ (label, r, mp) ];
                    List.iteri (fun k (label, r, mp) -> if k < List.length !live - 1 then still_maps label r mp (k + 1)) !live
                  end;
                  regions (i - 1) (Some r)
            end
          in
          regions (2 + K.int s 2) None)
        kinds;
      if !tested = 0 then raise (Skip "no map_peer mapping of a region the host can reach");
      (* "until rig frees it", whatever else is freed: a second mapping of
         r made and freed (a driver that shares one mapping between regions
         with no count unmaps both).  What the first mapping held before
         must still read through it, and what is written through it (by
         the host, by a Fill) must read back, both ways through r.  The
         stop of the device whose memory a mapping maps is not asked here:
         a mapping that breaks then is also that stop releasing what rig
         made, which probe.STOP-5.keeps-word judges. *)
      let access_bytes what f = match access what (fun () -> Some (f ())) with Some b -> b | None -> None in
      let before (mp : K.reg) =
        let p = K.pattern s mp.size in
        if K.write mp ~off:0 p then Some p else None
      in
      let read_through what (mp : K.reg) =
        access_bytes (spf "a read through %s's mapping %s" a.oname what) (fun () -> K.read mp ~off:0 ~len:mp.size)
      in
      let still_holds what mp = function
        | Some p -> (
            match read_through what mp with
            | Some got when got <> p ->
                K.flag_value s "bytes written through %s's mapping before, %s, no longer read through it: %s" a.oname what
                  (Probes.first_difference got p)
            | _ -> ())
        | None -> ()
      in
      let works ?r what (mp : K.reg) =
        let n = mp.size in
        (match r with
        | Some (r : K.reg) ->
            let p = K.pattern s n in
            if K.write r ~off:0 p then (
              match read_through what mp with
              | Some got when got <> p ->
                  K.flag_value s "bytes written into r do not show through %s's mapping %s: %s" a.oname what (Probes.first_difference got p)
              | _ -> ())
        | None -> ());
        let p = K.pattern s n in
        (match access (spf "a write through %s's mapping %s" a.oname what) (fun () -> Some (K.write mp ~off:0 p)) with
        | Some true -> (
            let back = match r with Some r -> K.read r ~off:0 ~len:n | None -> read_through what mp in
            match back with
            | Some got when got <> p ->
                K.flag_value s "bytes written through %s's mapping %s do not read back%s: %s" a.oname what
                  (if r = None then " through it" else " in r") (Probes.first_difference got p)
            | _ -> ())
        | _ -> ());
        let bt = K.byte s in
        (* a device lost by a Fill that met an unmapped mapping shows nothing more *)
        if a.lost = None then
          match K.submit a [ K.fill_part mp ~off:0 ~len:n ~byte:bt ] with
          | Error e -> K.flag s "a Fill on %s of its mapping %s could not be submitted: %s" a.oname what e
          | Ok v -> (
              match K.wait_value s a v ~ms:3000 with
              | Reached -> (
                  match read_through what mp with
                  | Some got when got <> String.make n (Char.chr bt) ->
                      K.flag_value s "a Fill on %s of its mapping %s with %02x does not read back through it: %s" a.oname what bt
                        (Probes.first_difference got (String.make n (Char.chr bt)))
                  | _ -> ())
              | w -> K.flag s "a Fill on %s of its mapping %s: %s" a.oname what (K.describe_wait w))
      in
      (match !live with
      | (label, r, mp) :: _ ->
          let what = spf "of %s memory of %s, after a second mapping of the same region was made and freed" label b.oname in
          let held = before mp in
          let twin = K.map_peer s a r in
          K.free_reg twin;
          still_holds what mp held;
          works ~r what mp
      | [] -> ()))

(* MEM-7: map_host maps the whole pages: a Fill of the last word, and on to
   the end of its page, reaches host memory; and they stay mapped until the
   region is freed: after more map_host of other pages, a Fill of all of
   them still reaches. *)
let mem7_whole_pages (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-7" ~seed (fun s ->
      let dev = K.open_first s in
      if not dev.facts.maps_host then raise (Skip "device does not declare maps_host");
      let addr, ba = K.host_pages s 8192 in
      Bigarray.Array1.fill ba '\000';
      (* n: one page and some bytes, not a multiple of the word, ending in
         the first quarter of the second page, so that a mapping rounded to
         any smaller unit than the page (1 KiB, 2 KiB) ends before it. *)
      let n = 4096 + (word * K.int s 255) + 1 + K.int s (word - 1) in
      let r = K.map_host s dev addr n in
      let fill_and_check ?(via = r) ~off ~len what =
        let bt = 1 + K.int s 255 in
        match K.submit dev [ K.fill_part via ~off ~len ~byte:bt ] with
        | Error e ->
            K.flag s "map_host of %d bytes: a Fill of %s could not be submitted: %s" n what e;
            false
        | Ok v -> (
            match K.wait_value s dev v ~ms:3000 with
            | Reached ->
                let bad = ref None in
                for i = off to off + len - 1 do
                  if !bad = None && Char.code (Bigarray.Array1.get ba i) <> bt then bad := Some i
                done;
                (match !bad with
                | Some i ->
                    K.flag_value s "map_host of %d bytes: a Fill of %s [%d,%d) with %02x left host byte %d at %02x" n what off
                      (off + len) bt i (Char.code (Bigarray.Array1.get ba i))
                | None -> ());
                true
            | w ->
                K.flag s "map_host of %d bytes: a Fill of %s [%d,%d) %s" n what off (off + len) (K.describe_wait w);
                false)
      in
      let lo = n / word * word and hi = round_up n word in
      if
        fill_and_check ~off:lo ~len:(hi - lo) "the last word"
        && (hi >= 8192 || fill_and_check ~off:hi ~len:(8192 - hi) "the rest of the last page")
      then begin
        let later = List.init 2 (fun _ -> fst (K.host_pages s 4096)) in
        List.iter (fun a -> ignore (K.map_host s dev a 4096)) later;
        if fill_and_check ~off:0 ~len:8192 "its whole pages, after two map_host of other pages" then begin
          (* The same pages again, twice, as whole pages: each mapping maps
             them all, whatever was mapped there before. *)
          let again = List.init 2 (fun _ -> K.map_host s dev addr 8192) in
          List.iteri
            (fun k via -> ignore (fill_and_check ~via ~off:0 ~len:8192 (spf "all 8192 bytes through map_host %d of the same two pages" (k + 2))))
            again
        end
      end)

(* MEM-8: dma's Errors name a malformed or absent fn; the kit's fn reaches. *)
let mem8_dma_errors (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-8" ~seed (fun s ->
      let fn = K.need_item "bus_function" P.kit.bus_function in
      let dev = K.open_first s in
      let n = word * (1 + K.int s 1024) in
      let r = match K.alloc s dev Device n with Some r -> r | None -> raise (Skip "setup: no Device memory") in
      let dma fn = K.call dev (fun () -> P.D.dma dev.d r.region ~fn) in
      let bad = [ (spf "not-a-bus-%d" (K.int s 1000), "not a bus address"); ("0000:ff:1f.7", "no function of the machine") ] in
      List.iter
        (fun (bad, what) ->
          match dma bad with
          | Error why when Substring.contains ~sub:bad why -> ()
          | Error why -> K.flag_value s "dma ~fn:%S (%s) is Error %S, which does not name fn" bad what why
          | Ok (Bus a) -> K.flag_value s "dma ~fn:%S (%s) answered Bus 0x%Lx" bad what a)
        bad;
      match dma fn with
      | Ok (Bus _) -> ()
      | Error why -> K.flag_value s "dma ~fn:%S (kit.bus_function) of %d bytes of Device memory is Error %S" fn n why)

(* MEM-2: memory free gave back is memory d has, from the moment free
   returns (rig's reclamation rounds wait for no thread of the driver's).
   All the Device memory alloc gives (Kit.take: power-of-two sizes, largest
   first) is freed; host memory is then taken and freed three times (a
   budget both may draw on); then one region of a size the first take never
   asked (three quarters of its largest), and the same allocs again: each
   must get what the first take got; and its largest region once all of
   it was taken and freed in 4-KiB regions.  Every probe that measures free Device
   memory rests on this (Report's premises). *)
let mem2_given_back (module P : Package) ~seed =
  let module K = Kit (P) in
  K.run ~clause:"MEM-2" ~seed (fun s ->
      let dev = K.open_first s in
      let first = K.take s dev max_int in
      let had = K.total first in
      if had = 0 then raise (Skip "alloc gave no Device memory");
      let largest = List.fold_left (fun m (r : K.reg) -> max m r.size) 0 first in
      List.iter K.free_reg first;
      let host_n = max word (had / 4 / word * word) in
      for _ = 1 to 3 do
        match K.alloc_host s dev host_n with Some r -> K.free_reg r | None -> ()
      done;
      let odd = max word (largest * 3 / 4 / word * word) in
      (match K.alloc s dev Device odd with
      | Some r -> K.free_reg r
      | None ->
          K.flag_value s "alloc of %d bytes of Device memory answered None once all of it was freed (%d bytes, in %d region(s), the largest %d bytes)"
            odd had (List.length first) largest);
      let again = K.free_bytes s dev in
      if again < had then
        K.flag_value s "alloc answered None for Device memory that free gave back: %d bytes taken in %d region(s) and all freed, then the same allocs got %d bytes"
          had (List.length first) again
      else begin
        (* all of it again in small regions (4 KiB, at most 4096 of them, for 2 s),
           freed: then the largest region again (a cache of small blocks
           that alloc never gives back for other sizes) *)
        let small = ref [] and n = ref 0 and out = ref false in
        (* bounded: an alloc may be slow (blind-alloc-slow) *)
        let until = now () +. 2. in
        while (not !out) && !n < 4096 && now () < until do
          match K.alloc s dev Device 4096 with
          | Some r -> small := r :: !small; incr n
          | None -> out := true
        done;
        List.iter K.free_reg !small;
        if !out then
          match K.alloc s dev Device largest with
          | Some r -> K.free_reg r
          | None ->
              K.flag_value s "alloc of %d bytes of Device memory (the largest region it gave before) answered None once %d region(s) of 4096 bytes, all of it, were freed"
                largest !n
      end)

let cases =
  [
    case "probe.MEM-2.distinct-regions" "MEM-2" mem2_distinct;
    case "probe.MEM-2.given-back" "MEM-2" mem2_given_back;
    case "probe.MEM-4.peer-after-stop" "MEM-4" mem4_peer_stable;
    case "probe.MEM-5.map-peer-live" "MEM-5" mem5_map_peer_live;
    case "probe.MEM-7.whole-pages" "MEM-7" mem7_whole_pages;
    case "probe.MEM-8.dma-errors" "MEM-8" mem8_dma_errors;
  ]
