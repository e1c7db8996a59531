(* rig-conform bench; see bench.mli. *)

(* The validation layer's cost is measured on a workload of at least this
   many seconds on the bare driver: shorter ones measure noise. *)
let workload_seconds = 1.0

(* One workload: allocations, host writes, fills submitted and waited on,
   frees.  The same for both rigs. *)
module Workload (D : Rig_edge.Driver) = struct
  module R = Rig.Make (D)

  let run ~iterations (opener : D.t Rig_edge.opener) =
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
  (* Each figure names its own -j: none is taken from the command line. *)
  let report = ref "out/bench/report.json" in
  let validation_only = ref false in
  let rec go = function
    | [] -> ()
    | "--report" :: v :: rest -> report := v; go rest
    | "--validation-only" :: rest -> validation_only := true; go rest
    | a :: _ -> prerr_endline ("rig-conform bench: unexpected argument " ^ a); exit 2
  in
  go args;
  Fake.reset ();
  let fake0 = List.hd (Fake.openers ()) in
  (* As many rounds as fill workload_seconds on the bare driver, with a
     fifth to spare: a short first run's pace says how many, and the best of
     three that many, scaled up again while it falls short (a first run's
     warm-up makes the pace look slower than it is). *)
  let scaled iterations t = int_of_float (Float.ceil (float iterations *. 1.2 *. workload_seconds /. Float.max t 1e-3)) in
  let rec measured iterations =
    let bare = best_of 3 (fun () -> Bare.run ~iterations fake0) in
    if bare >= workload_seconds then (iterations, bare) else measured (max (iterations + 1) (scaled iterations bare))
  in
  let iterations, bare =
    let probe = 1500 in
    measured (max probe (scaled probe (Bare.run ~iterations:probe fake0)))
  in
  let wrapped = best_of 3 (fun () -> Wrapped.run ~iterations (V.opener fake0)) in
  Printf.printf "workload of %d alloc/write/submit/wait/free rounds: bare %.3f s, validated %.3f s, ratio %.2f\n%!"
    iterations bare wrapped (wrapped /. bare);
  (* The layer's figure alone, for work on the layer (no report). *)
  if !validation_only then exit 0;
  (* Runs this program with [args], its report at [file] beside the bench's,
     output dropped: (the report's path, exit code, wall seconds). *)
  let timed_run ~file args =
    let path = Filename.concat (Filename.dirname !report) file in
    let t0 = Unix.gettimeofday () in
    let code =
      Sys.command
        (Printf.sprintf "%s %s --no-color --report %s > /dev/null 2>&1" (Filename.quote Sys.executable_name) args
           (Filename.quote path))
    in
    (path, code, Unix.gettimeofday () -. t0)
  in
  (* A whole certification of a bundled driver, as make certify and make
     certify-hostmem run it (3 seeds; the fake's includes the sweep). *)
  let certify ~driver ~args j =
    let _, code, wall = timed_run ~file:(Printf.sprintf "certify-%s-j%d.json" driver j) (Printf.sprintf "certify %s -j %d" args j) in
    Printf.printf "certify %s (3 seeds) -j %d: %.1f s, exit %d\n%!" driver j wall code;
    Printf.sprintf "{\"driver\": %s, \"jobs\": %d, \"wall_s\": %.2f, \"exit\": %d}" (Report.json_string driver) j wall code
  in
  let certify_fake = List.map (certify ~driver:"fake" ~args:"--driver fake") [ 1; 2 ] in
  (* The injection of every run of a report ("inject": "F:N:K"). *)
  let injects path =
    match In_channel.with_open_bin path In_channel.input_all with
    | exception Sys_error _ -> []
    | text ->
        let key = "\"inject\": \"" in
        let rec scan i acc =
          match String.index_from_opt text i '"' with
          | None -> List.rev acc
          | Some k when k + String.length key <= String.length text && String.sub text k (String.length key) = key -> (
              let v = k + String.length key in
              match String.index_from_opt text v '"' with
              | Some e -> scan e (String.sub text v (e - v) :: acc)
              | None -> List.rev acc)
          | Some k -> scan (k + 1) acc
        in
        scan 0 []
  in
  (* One sweep command: its points, wall time, points per second. *)
  let swept ~label ~file args =
    let path, code, wall = timed_run ~file (args ^ " --driver fake") in
    let points = injects path in
    Printf.printf "%s: %d points in %.1f s, %.0f points/s, exit %d\n%!" label (List.length points) wall
      (float (List.length points) /. wall) code;
    (label, points, wall, code)
  in
  (* The systematic sweep alone, at -j1 and -j2 (points of one scenario
     batched in a child), a process per point for the ratio, and the
     scenarios that do not wait for the 1-s hang bound. *)
  let sweeps =
    (* In this order: List's elements are evaluated right to left. *)
    let j1 = swept ~label:"sweep -j 1" ~file:"sweep-j1.json" "sweep -j 1" in
    let j2 = swept ~label:"sweep -j 2" ~file:"sweep-j2.json" "sweep -j 2" in
    let alone = swept ~label:"sweep -j 2 --batch 1 (a process per point)" ~file:"sweep-batch1.json" "sweep -j 2 --batch 1" in
    let quick = swept ~label:"sweep -j 2 of the queue scenarios (no hang bound)" ~file:"sweep-queue.json" "sweep -j 2 --only QUEUE-6" in
    (* The scenarios bound by the hang bound mostly wait: more children than
       cores pay. *)
    let j8 = swept ~label:"sweep -j 8" ~file:"sweep-j8.json" "sweep -j 8" in
    [ j1; j2; alone; quick; j8 ]
  in
  (* Asynchronous exceptions: allocation points and wait points. *)
  let (_, async_points, async_wall, async_code), async_waits =
    let ((_, points, wall, _) as r) = swept ~label:"async-sweep -j 2" ~file:"async-sweep.json" "async-sweep -j 2" in
    let is_wait p = match String.split_on_char ':' p with [ _; _; k ] -> String.starts_with ~prefix:"wait@" k | _ -> false in
    let waits = List.length (List.filter is_wait points) in
    Printf.printf "async-sweep -j 2: %d allocation points, %d wait points, %.0f points/s\n%!" (List.length points - waits) waits
      (float (List.length points) /. wall);
    (r, waits)
  in
  (* The second bundled driver, as a plugin. *)
  let certify_hostmem =
    List.map (certify ~driver:"hostmem" ~args:"--plugin _build/default/drivers/hostmem/hostmem.cmxs --driver hostmem") [ 1; 2 ]
  in
  (* Generated call sequences on one core: model.driver in one process (its
     threads share one domain), on the conforming fake, unshrunk. *)
  let model_sequences = 40 in
  let model_wall =
    let t0 = Unix.gettimeofday () in
    let code =
      Sys.command
        (Printf.sprintf "RIG_CONFORM_SHRINK_SECONDS=0 %s run --driver fake --case model.driver --seed 1 --sequences %d > /dev/null 2>&1"
           (Filename.quote Sys.executable_name) model_sequences)
    in
    let wall = Unix.gettimeofday () -. t0 in
    Printf.printf "model.driver on the fake, one process: %d sequences in %.1f s, %.1f sequences/s, exit %d\n%!" model_sequences
      wall (float model_sequences /. wall) code;
    wall
  in
  ignore (Sys.command (Printf.sprintf "mkdir -p %s" (Filename.quote (Filename.dirname !report))));
  Out_channel.with_open_bin !report (fun oc ->
      Printf.fprintf oc
        "{\n  \"format\": \"rig-conform-bench/2\",\n  \"validation\": {\"iterations\": %d, \"bare_s\": %.4f, \"wrapped_s\": %.4f, \"ratio\": %.3f},\n  \"certify\": [%s],\n  \"sweep\": [%s],\n  \"async_sweep\": {\"allocation_points\": %d, \"wait_points\": %d, \"wall_s\": %.2f, \"exit\": %d},\n  \"model\": {\"sequences\": %d, \"wall_s\": %.2f, \"sequences_per_s\": %.2f}\n}\n"
        iterations bare wrapped (wrapped /. bare)
        (String.concat ", " (certify_fake @ certify_hostmem))
        (String.concat ", "
           (List.map
              (fun (label, points, wall, code) ->
                let points = List.length points in
                Printf.sprintf "{\"run\": %s, \"points\": %d, \"wall_s\": %.2f, \"points_per_s\": %.1f, \"exit\": %d}"
                  (Report.json_string label) points wall (float points /. wall) code)
              sweeps))
        (List.length async_points - async_waits) async_waits async_wall async_code model_sequences model_wall
        (float model_sequences /. model_wall));
  Printf.printf "report: %s\n" !report
