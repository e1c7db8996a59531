(** What a subcommand that runs cases shares: the driver as the certifier
    knows it (described by a child when it comes from a plugin), the stop
    signals, and running jobs with a progress line. *)

(** [start ()]: stop signals caught (Stop_signals), orphans re-parented to
    the certifier, and the temporary directory checked.  Before any child. *)
val start : unit -> unit

(** The stop signal that interrupted the run, if one did. *)
val interrupted : unit -> int option

(** [exit_if_interrupted ()]: exits 130 (SIGINT), 143 (SIGTERM) or 129
    (SIGHUP) when a stop signal came; the caller has written its report. *)
val exit_if_interrupted : unit -> unit

(** The driver [o.driver], without running its code here: the fake as it
    is linked in; a plugin's as a child that loaded it described it.
    [Error] says how the plugin failed to load (crash, exit, hang); an
    unknown driver or a plugin that registered none is a usage error. *)
val driver_info : Cli.opts -> (Drivers.info, string) result

(** [driver_info_or_exit o]: the same, a load failure being an error (exit 1). *)
val driver_info_or_exit : Cli.opts -> Drivers.info

(** Every mutant the driver's certification can run: of the reference rig,
    of the edge and of the driver, each as (name, clause, what it does,
    whose: "rig", "edge" or "driver D"). *)
val mutants : Cli.opts -> Drivers.info -> (string * string * string * string) list

(** [chosen_mutant ~cmd o drv]: the mutant [--mutant] names, if any; a name
    no mutant has is a usage error of [cmd]. *)
val chosen_mutant : cmd:string -> Cli.opts -> Drivers.info -> (string * string * string * string) option

(** The shard of the jobs (--shard I/N): every N-th from the I-th. *)
val in_shard : Cli.opts -> 'a list -> 'a list

(** [run_jobs ?batch ?crowd ?limit o ~what jobs]: the jobs in children,
    [o.jobs] at once (beyond it while the cores idle unless [crowd] is false,
    Runner.run_all), each under its limit ([limit]'s where it answers one,
    else its case's, Known_cases.limit), with a progress line on stderr;
    [more]: the jobs an ended one calls for, run after it; [flow]: the jobs
    that crowd as injection points do (Runner.run_all). *)
val run_jobs :
  ?batch:(Runner.job -> int) ->
  ?crowd:bool ->
  ?more:(Runner.result -> Runner.job list) ->
  ?flow:(Runner.job -> bool) ->
  ?limit:(Runner.job -> float option) ->
  Cli.opts ->
  what:string ->
  Runner.job list ->
  Runner.result list
