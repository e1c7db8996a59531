(** Runs cases in child processes, several at once, each under a time limit,
    so that a driver that crashes or hangs yields a verdict and never takes
    the certifier down.  One job is one case, one seed, one driver and at
    most one mutant; its replay line runs exactly that job again. *)

type job = {
  case : Case.t;
  seed : int;
  driver : string;
  plugins : string list;   (** driver plugins the child loads first *)
  mutant : string option;  (** of the driver or of the reference rig *)
  inject : Injection.t option;
}

type outcome =
  | Findings of Case.finding list  (** the case ran to its end *)
  | Not_applicable of string
  | Crashed of string              (** how it died, and the last lines it wrote *)
  | Timed_out of float             (** the limit, in seconds, and it was killed *)

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

(** [run_all ~parallel ~timeout ~progress jobs] runs every job, [parallel] at
    a time, and answers their results in the jobs' order.  [progress] is
    called after each job ends with the number done and that job.  When [stop ()] turns
    true (Ctrl-C), running children are killed and the results so far
    answered.

    [batch j] (default 1): up to how many jobs alike to [j] but for their
    failure injection (consecutive in [jobs]; not asynchronous points) one
    child runs one after another, [timeout] for them all.  A job of a batch
    whose child crashed or hung before its end runs again alone, so a
    verdict on a crash or a hang is always that of its own process. *)
val run_all :
  ?batch:(job -> int) ->
  parallel:int -> timeout:float -> progress:(int -> job -> unit) -> stop:(unit -> bool) -> job list -> result list

(** In the child: runs the job and prints its outcome in the protocol the
    parent reads; answers the exit code: 1 when it found a violation. *)
val child : Drivers.t -> job -> int
