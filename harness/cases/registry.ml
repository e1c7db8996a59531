(* The one table of the OCaml cases; see registry.mli. *)

let probe_cases =
  Mem_probes.cases @ Code_probes.cases @ Time_probes.cases @ Stop_probes.cases @ Bus_probes.cases @ Queue_probes.cases @ Word_probes.cases @ Lock_probes.cases @ Mask_probes.cases
  @ Order_probes.cases @ Edge_checks.cases

let rig_flow_cases = Scenarios.cases
let async_cases = Async_cases.cases
let model_cases = Model_cases.cases @ [ Model_rig.case ]
let needs_fake name = Scenarios.needs_fake (Option.value (Async_cases.flow_of name) ~default:name)
