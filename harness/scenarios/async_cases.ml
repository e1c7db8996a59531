(* Asynchronous exceptions at every allocation point, and calls from a
   callback at every allocation point: the rig-side flows of Scenarios with
   Async_inject between the validation layer and the driver
   (rig -> Validate -> Async_inject -> driver).  See async_cases.mli. *)

open Case
module P = Rig_edge_primitives

let clauses = [ "ASYNC-1"; "ASYNC-2"; "LOCK-5"; "LOCK-9" ]
let prefix = "async."

(* In a plain run (certify, selftest), the points tried in-process: every
   allocation up to this many of the first call of each function. *)
let plain_max_alloc = 12

(* ... and every wait up to this many. *)
let plain_max_wait = 4

(* Seconds a plain run spends trying points in-process: a slow driver (a
   stop that waits, say) gets the points that fit; async-sweep tries them
   all, each in its own process. *)
let plain_budget_s = 20.

(* Seconds one run of a flow may take before the watchdog reports a hang. *)
let watch_seconds = 20.

(* ---- the watchdog: a hang is a finding, not a killed child ---- *)

let watched : (string * string * float) option Atomic.t = Atomic.make None
let watchdog_started = ref false

let watchdog () =
  let rec loop () =
    Thread.delay 0.05;
    (match Atomic.get watched with
    | Some (clause, what, deadline) when Unix.gettimeofday () > deadline ->
        let clause, what =
          match Async_inject.probing () with
          | Some p -> ("LOCK-5", p ^ " did not return: it blocks")
          | None -> (clause, what)
        in
        let clean = String.map (function '\n' | '\t' -> ' ' | c -> c) in
        (* On the channel, as the run's own end says it: a hang is this
           finding, not a crash of the case that fails all its clauses. *)
        Channel.say (Printf.sprintf "FINDING\t%s\t%s (watchdog, after %.0f s)" clause (clean what) watch_seconds);
        List.iter (fun (fn, n) -> Channel.say (Printf.sprintf "CALLS\t%s\t%d" fn n)) (Case.reported_calls ());
        Channel.say_done ();
        Unix._exit 1
    | _ -> ());
    loop ()
  in
  if not !watchdog_started then begin
    watchdog_started := true;
    (* Signals blocked: a wait point's SIGUSR2 is for the waiting thread. *)
    ignore (P.spawn loop)
  end

let watch clause what = Atomic.set watched (Some (clause, what, Unix.gettimeofday () +. watch_seconds))
let unwatch () = Atomic.set watched None

(* ---- one run of a flow through the wrapper ---- *)

type run = {
  out : Scenarios.flow_outcome;
  census : (string * int * int * int) list;
  fired : string option;
  probes : (string * string) list;
  left : string list;
  holds : int;
}

let run_once (module Pk : Rig_edge.Package) flow ~seed ?inject ~probe () =
  let module A = Async_inject.Make (Pk.D) in
  let module W = struct
    module D = A

    let name = Pk.name
    let openers () = Pk.openers ()
    let kit = Pk.kit
  end in
  Async_inject.reset ?inject ~probe ();
  let out =
    match Scenarios.run_flow (module W : Rig_edge.Package) flow ~seed with
    | o -> Async_inject.off (); o
    | exception e -> Async_inject.off (); raise e
  in
  let holds = P.holds () in
  (* A lock the driver left counted makes every rig call raise: give the
     count back so that the harness can go on and report. *)
  for _ = 1 to holds do P.give () done;
  {
    out;
    census = Async_inject.census ();
    fired = Async_inject.fired ();
    probes = Async_inject.probe_findings ();
    left = (if holds = 0 then A.leftovers () else []);
    holds;
  }


(* The checks after a run with an asynchronous exception at [point]; [rerun]
   runs the flow again with nothing injected. *)
let same_constructor a b =
  Obj.Extension_constructor.id (Obj.Extension_constructor.of_val a)
  = Obj.Extension_constructor.id (Obj.Extension_constructor.of_val b)

let check_point ~point ~(reference : exn option) ~(rerun : unit -> run) r =
  let at = Async_inject.target_to_string point in
  if r.holds <> 0 then
    [ finding "ASYNC-2" "after an asynchronous exception at %s (%s), the thread still holds %d counted lock(s)"
        at (Option.value r.fired ~default:"?") r.holds ]
  else
    match r.fired with
    | None -> []
    | Some where ->
        let left =
          List.map
            (fun l -> finding "ASYNC-1" "after an asynchronous exception at %s (%s) and every device's close, %s" at where l)
            r.left
        in
        (* A rule rig broke on the way out of the exception is that
           rule's violation, not ASYNC-1's (which is about the calls rig
           still makes); the evidence names the point. *)
        let broke =
          List.map
            (fun (v : Validate.violation) ->
              finding v.clause "after an asynchronous exception at %s (%s): %s" at where v.detail)
            r.out.violations
        in
        if left <> [] || broke <> [] then left @ broke
        else
          (* Every lock of the driver can be taken again: the same calls,
             made again, return.  A run again that ended on a make that
             raised (a device busy) is made once more: a lock left taken
             ends it each time. *)
          let again = rerun () in
          let again = if again.out.make_raised && Option.is_some again.out.raised then rerun () else again in
          if again.holds <> 0 then
            [ finding "ASYNC-2"
                "after an asynchronous exception at %s (%s), a later run with nothing injected left %d counted lock(s) held"
                at where again.holds ]
          else
            match again.out.raised with
            | None -> []
            (* A clean run before the injection ended the same way (the
               driver's own failure, a CODE-5 No_memory say): no evidence of
               a lock left taken. *)
            | Some e when (match reference with Some e0 -> same_constructor e e0 | None -> false) -> []
            | Some e ->
                [ finding "ASYNC-2"
                    "after an asynchronous exception at %s (%s), a later run with nothing injected raised %s (a driver lock left taken?)"
                    at where (Printexc.to_string e) ]

(* The census as CALLS lines: "fn#nth" for a call's allocations, "wait:fn#nth"
   for its waits. *)
let census_calls census =
  List.concat_map
    (fun (fn, nth, allocs, waits) ->
      let key = Printf.sprintf "%s#%d" fn nth in
      (if allocs > 0 then [ (key, allocs) ] else []) @ if waits > 0 then [ ("wait:" ^ key, waits) ] else [])
    census

let run_case flow (pkg : (module Rig_edge.Package)) ~seed =
  watchdog ();
  let clean () =
    watch "ASYNC-2" (Printf.sprintf "a run of %s with nothing injected did not end" flow);
    let r = run_once pkg flow ~seed ~probe:false () in
    unwatch ();
    r
  in
  let injected ~reference point =
    let at = Async_inject.target_to_string point in
    watch "ASYNC-2" (Printf.sprintf "the run of %s with an asynchronous exception at %s did not end" flow at);
    let r = run_once pkg flow ~seed ~inject:point ~probe:false () in
    unwatch ();
    check_point ~point ~reference ~rerun:clean r
  in
  try
    match !Async_inject.target with
    | Some point ->
        (* How a run with nothing injected ends, before any injection, as
           the second run of the process (the census is the first in a
           certification) *)
        ignore (clean ());
        let reference = (clean ()).out.raised in
        Ran (injected ~reference point)
    | None ->
        (* The census, with the probes at every allocation (LOCK-5, LOCK-9). *)
        watch "ASYNC-2" (Printf.sprintf "the census run of %s did not end" flow);
        let base = run_once pkg flow ~seed ~probe:true () in
        unwatch ();
        Case.report_calls (census_calls base.census);
        (* a lock a probed call took, or what it raised, are values: no
           load makes a conforming driver show them *)
        let probes = List.map (fun (clause, detail) -> Case.value_finding clause "%s" detail) base.probes in
        if probes <> [] || !Case.counting then Ran probes
        else
          let points =
            List.concat_map
              (fun (fn, nth, allocs, waits) ->
                let at on n = List.init n (fun k -> { Async_inject.fn; nth; at = k + 1; on }) in
                if nth = 1 then at Allocation (min allocs plain_max_alloc) @ at Wait (min waits plain_max_wait)
                else [])
              base.census
          in
          (* How a run with nothing injected ends after another run in
             the same process, as every run after an injected one is: a
             driver may keep a state for the process's life (MEM-11's
             function kept from any other open, say), which is no lock
             left taken. *)
          let reference = if points = [] then None else (clean ()).out.raised in
          let started = Unix.gettimeofday () in
          let rec go = function
            | [] -> []
            | _ when Unix.gettimeofday () -. started > plain_budget_s -> []
            | p :: rest -> ( match injected ~reference p with [] -> go rest | fs -> fs)
          in
          Ran (go points)
  with Scenarios.Needs what -> Not_applicable ("needs " ^ what)

(* The flows run here: those that end quickly, so that a plain run can try
   every allocation point of the first call of each function in-process.
   Left out: rig.sleep-in-flight, rig.release-kept and rig.hang-bound (their
   runs wait), rig.free-under-work (5 s a plain run: each point waits for a
   spin), rig.grow-rounds (about 3000 calls), rig.lock-discipline (calls
   inside a lock on purpose). *)
let flow_names =
  [ "rig.lifecycle"; "rig.fault"; "rig.exception-loses"; "rig.entry-invalid"; "rig.prepare-exception";
    "rig.free-once"; "rig.peer-mapping"; "rig.pinned-fallback"; "rig.alloc-rounding";
    "rig.map-host-declared"; "rig.entry-rounds"; "rig.wait-for-work" ]

let cases =
  List.map (fun flow -> { name = prefix ^ flow; clauses; run = (fun pkg ~seed -> run_case flow pkg ~seed) }) flow_names

let is_async_case name = String.starts_with ~prefix name

let flow_of name =
  if is_async_case name then Some (String.sub name (String.length prefix) (String.length name - String.length prefix)) else None

let points_of_census ~max_alloc calls =
  List.concat_map
    (fun (key, n) ->
      let on, key =
        if String.starts_with ~prefix:"wait:" key then (Async_inject.Wait, String.sub key 5 (String.length key - 5))
        else (Allocation, key)
      in
      match String.rindex_opt key '#' with
      | None -> []
      | Some i -> (
          let fn = String.sub key 0 i in
          match int_of_string_opt (String.sub key (i + 1) (String.length key - i - 1)) with
          | Some nth -> List.init (min n max_alloc) (fun k -> { Async_inject.fn; nth; at = k + 1; on })
          | None -> []))
    calls
