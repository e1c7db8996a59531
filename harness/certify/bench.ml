(* rig-conform bench; see bench.mli. *)

let iterations = 1500

(* One workload: allocations, host writes, fills submitted and waited on,
   frees.  The same for both rigs. *)
module Workload (D : Rig_edge.Driver) = struct
  module R = Rig.Make (D)

  let run (opener : D.t Rig_edge.opener) =
    let dev = R.open_ opener in
    let t0 = Unix.gettimeofday () in
    for i = 1 to iterations do
      let b = R.alloc dev Rig_edge.Device 256 in
      R.write b 0 "bench";
      R.wait dev (R.submit dev [ R.Fill (b, 0, 256, i land 255) ]);
      R.free b
    done;
    let dt = Unix.gettimeofday () -. t0 in
    R.close dev;
    dt
end

module Bare = Workload (Fake.D)
module V = Validate.Make (Fake.D)
module Wrapped = Workload (V)

let best_of n f = List.fold_left min infinity (List.init n (fun _ -> f ()))

let main args =
  let jobs = ref 2 and report = ref "out/bench/report.json" in
  let rec go = function
    | [] -> ()
    | "-j" :: v :: rest -> (match int_of_string_opt v with Some n when n > 0 -> jobs := n | _ -> failwith "-j wants a positive integer"); go rest
    | "--report" :: v :: rest -> report := v; go rest
    | a :: _ -> prerr_endline ("rig-conform bench: unexpected argument " ^ a); exit 2
  in
  go args;
  Fake.reset ();
  let fake0 = List.hd (Fake.openers ()) in
  let bare = best_of 3 (fun () -> Bare.run fake0) in
  let wrapped = best_of 3 (fun () -> Wrapped.run (V.opener fake0)) in
  Printf.printf "workload of %d alloc/write/submit/wait/free rounds: bare %.3f s, validated %.3f s, ratio %.2f\n%!"
    iterations bare wrapped (wrapped /. bare);
  let certify_report = Filename.concat (Filename.dirname !report) "certify.json" in
  let t0 = Unix.gettimeofday () in
  let code =
    Sys.command
      (Printf.sprintf "%s certify --driver fake -j %d --no-color --report %s > /dev/null 2>&1"
         (Filename.quote Sys.executable_name) !jobs (Filename.quote certify_report))
  in
  let certify_s = Unix.gettimeofday () -. t0 in
  Printf.printf "certify (fake driver, 3 seeds, sweep included, -j %d): %.1f s, exit %d\n%!" !jobs certify_s code;
  (* The systematic sweep alone, at -j1 and -j2: injection points per second. *)
  let sweep j =
    let path = Filename.concat (Filename.dirname !report) (Printf.sprintf "sweep-j%d.json" j) in
    let t0 = Unix.gettimeofday () in
    let code =
      Sys.command
        (Printf.sprintf "%s sweep --driver fake -j %d --no-color --report %s > /dev/null 2>&1"
           (Filename.quote Sys.executable_name) j (Filename.quote path))
    in
    let wall = Unix.gettimeofday () -. t0 in
    let points =
      try
        let text = In_channel.with_open_bin path In_channel.input_all in
        let rec count i acc =
          match String.index_from_opt text i '"' with
          | None -> acc
          | Some k ->
              let key = "\"inject\": \"" in
              if k + String.length key <= String.length text && String.sub text k (String.length key) = key
              then count (k + 1) (acc + 1)
              else count (k + 1) acc
        in
        count 0 0
      with Sys_error _ -> 0
    in
    Printf.printf "sweep -j %d: %d injection points in %.1f s, %.0f points/s, exit %d\n%!" j points wall
      (float points /. wall) code;
    (j, points, wall, code)
  in
  let sweeps = List.map sweep [ 1; 2 ] in
  (* The second bundled driver, as a plugin: certify at -j1 and -j2. *)
  let hostmem j =
    let t0 = Unix.gettimeofday () in
    let code =
      Sys.command
        (Printf.sprintf
           "%s certify --plugin _build/default/drivers/hostmem/hostmem.cmxs --driver hostmem -j %d --no-color --report %s > /dev/null 2>&1"
           (Filename.quote Sys.executable_name) j
           (Filename.quote (Filename.concat (Filename.dirname !report) (Printf.sprintf "hostmem-j%d.json" j))))
    in
    let wall = Unix.gettimeofday () -. t0 in
    Printf.printf "certify hostmem (3 seeds) -j %d: %.1f s, exit %d\n%!" j wall code;
    (j, wall, code)
  in
  let hostmems = List.map hostmem [ 1; 2 ] in
  ignore (Sys.command (Printf.sprintf "mkdir -p %s" (Filename.quote (Filename.dirname !report))));
  Out_channel.with_open_bin !report (fun oc ->
      Printf.fprintf oc
        "{\n  \"format\": \"rig-conform-bench/1\",\n  \"validation\": {\"iterations\": %d, \"bare_s\": %.4f, \"wrapped_s\": %.4f, \"ratio\": %.3f},\n  \"certify\": {\"driver\": \"fake\", \"jobs\": %d, \"wall_s\": %.2f, \"exit\": %d},\n  \"sweep\": [%s],\n  \"certify_hostmem\": [%s]\n}\n"
        iterations bare wrapped (wrapped /. bare) !jobs certify_s code
        (String.concat ", "
           (List.map
              (fun (j, points, wall, code) ->
                Printf.sprintf "{\"jobs\": %d, \"points\": %d, \"wall_s\": %.2f, \"points_per_s\": %.1f, \"exit\": %d}" j
                  points wall (float points /. wall) code)
              sweeps))
        (String.concat ", "
           (List.map (fun (j, wall, code) -> Printf.sprintf "{\"jobs\": %d, \"wall_s\": %.2f, \"exit\": %d}" j wall code) hostmems)));
  Printf.printf "report: %s\n" !report
