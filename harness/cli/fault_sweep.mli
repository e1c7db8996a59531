(** Systematic fault injection (fail-nth), as certify and sweep run it: a
    clean run of each rig-side case counts its driver calls, then each call
    is failed in each way the document allows there, one run each; and what
    sweep and async-sweep print and write of such runs. *)

(** A sweep's run of a case: seed 1, the mutant of --mutant (async-sweep's
    only), the injection if any. *)
val clean_job : Cli.opts -> ?inject:Injection.t -> Case.t -> Runner.job

(** [census o cases]: the counting runs of [cases] (one clean run each). *)
val census : Cli.opts -> Case.t list -> Runner.result list

(** [points ?batch_seconds o census]: the injected jobs the counts of
    [census] call for (--random, --shard applied), and the batch size of each
    job's child: as many points as its scenario's clean run says fit in
    [batch_seconds] (2 s unless given), 64 at most, or --batch. *)
val points : ?batch_seconds:float -> Cli.opts -> Runner.result list -> Runner.job list * (Runner.job -> int)

(** [point_limit o census job]: the time limit of a sweep's point, from its
    scenario's clean run in [census] (10 s and 20 times that run); None for
    a job that is no point, or with --timeout. *)
val point_limit : Cli.opts -> Runner.result list -> Runner.job -> float option

(** The census and its points in one run (Session.run_jobs): run
    [census_jobs] with [more], [batch] and [limit]; each clean run's points
    are queued as it ends. *)
type pipeline = {
  census_jobs : Runner.job list;
  more : Runner.result -> Runner.job list;
  batch : Runner.job -> int;
  limit : Runner.job -> float option;
}

(** [pipelined ~batch_seconds o cases]: the pipeline of [cases]'s sweep;
    None with --random or --shard, whose plans need every point first
    (then {!census}, then {!points}). *)
val pipelined : batch_seconds:float -> Cli.opts -> Case.t list -> pipeline option

(** [sweep_runs ?with_census o cases]: the injected runs of [cases], and,
    [with_census], the counting runs too (certify has its own). *)
val sweep_runs : ?with_census:bool -> Cli.opts -> Case.t list -> Runner.result list

(** [report_sweep o ~cases ~selected ~report results]: each failing run with
    its replay line, the verdicts of the clauses reached, the JSON report;
    answers the number of failing runs. *)
val report_sweep :
  Cli.opts -> cases:Case.t list -> selected:Catalog.clause list -> report:string -> Runner.result list -> int
