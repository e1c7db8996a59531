(** Runs cases in child processes, several at once, each under a time limit,
    so that a driver that crashes, hangs, floods its output, forks, or
    writes what looks like the certifier's own protocol yields a true
    verdict and never takes the certifier down (Child_process, Channel).
    One job is one case, one seed, one driver and at most one mutant; its
    replay line runs exactly that job again. *)

type job = {
  case : Case.t;
  seed : int;
  driver : string;
  plugins : string list;   (** driver plugins the child loads first (absolute paths) *)
  mutant : string option;  (** of the driver or of the reference rig *)
  inject : Injection.t option;
}

type outcome =
  | Findings of Case.finding list  (** the case ran to its end *)
  | Not_applicable of string
  | Crashed of string              (** how it died, the driver call it was in, its last output *)
  | Timed_out of { limit : float; running : string option }
      (** killed at its limit (seconds); [running]: the driver calls in flight then *)

type result = {
  job : job;
  outcome : outcome;
  calls : (string * int) list;  (** the calls per driver function the case reported *)
  seconds : float;
}

(** The command line that replays the job. *)
val replay : job -> string

(** The arguments of the [run] subcommand for a job (without the program). *)
val run_args : job -> string list

(** [run_all ~parallel ~limit ~progress ~stop jobs] runs every job,
    [parallel] at a time, [limit job] seconds each at most, and answers
    their results in the jobs' order.  [progress] is called after each job
    ends with the number done and that job.  When [stop ()] turns true (a
    stop signal), running children are killed and the results of the jobs
    that had ended answered (crashes and timeouts included).  A case that
    ran past its limit on one seed is not run on its other seeds (it fails
    already; another seed would only wait as long again).

    [batch j] (default 1): up to how many jobs alike to [j] but for their
    failure injection (consecutive in [jobs]; not asynchronous points) one
    child runs one after another, the sum of their limits for them all.  A
    job of a batch whose child crashed or hung before its end runs again
    alone, so that a verdict on a crash or a hang is always that of its own
    process.

    Whatever a child started is gone when its job ends (its process group,
    and what left the group, re-parented to the certifier). *)
val run_all :
  ?batch:(job -> int) ->
  parallel:int -> limit:(job -> float) -> progress:(int -> job -> unit) -> stop:(unit -> bool) -> job list -> result list

(** [is_ours pid]: a child the runner started (a stop signal it sends is
    not a person's). *)
val is_ours : int -> bool

(** [run_command ~args ~limit]: runs this program with [args] in one
    isolated child, as [run_all] runs a job, and answers the records it
    wrote on its channel when it reached its DONE, or [Error] with how it
    failed (a crash, a hang past [limit], no DONE) and its last output. *)
val run_command : args:string list -> limit:float -> (string list, string) Stdlib.result

(** In the child: runs the job and writes its outcome on the channel (on
    stdout when run by hand); answers the exit code: 1 when it found a
    violation. *)
val child : Drivers.t -> job -> int
