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
  census : bool;
      (** a sweep's census: the run counts the calls a sweep's points are drawn
          from, and may leave out what those points will try one by one (run --census) *)
}

type outcome =
  | Findings of Case.finding list  (** the case ran to its end *)
  | Not_applicable of string
  | Crashed of string              (** how it died, the driver call it was in, its last output *)
  | Timed_out of { limit : float; running : string option; stuck : (string * float) option }
      (** killed at its limit (seconds); [running]: the driver calls in
          flight then, in words; [stuck]: the one in flight the longest, and
          for how many seconds *)
  | Hung of { fn : string; seconds : float; inside : string option; deadlock : bool }
      (** killed when the driver call [fn] had been in flight [seconds]: past
          {!call_limit}, longer than any call of a conforming driver takes,
          or, [deadlock], earlier, once its thread was seen waiting for good
          on a mutex ({!Lock_wait.forever}); [inside]: the driver call on
          the same thread that [fn] was called from (by a probe's callback
          inside it), if any *)
  | Blocked of { fn : string; first : string }
      (** killed when [fn], which had already hung in the run [first] ("case
          C, seed S"), had been in flight past {!known_hang_limit}: the case
          could not run to its end, and says nothing of its clauses *)
  | Crashed_once of { how : string; again : outcome }
      (** it crashed ([how]), and run a second time it did not ([again]:
          what that run found): a crash that does not come again (a heap the
          driver corrupted, noticed at some later allocation) shows no
          violation of the case's clauses, nor does it pass them *)

type result = {
  job : job;
  outcome : outcome;
  calls : (string * int) list;  (** the calls per driver function the case reported *)
  traced : (string * int) list;  (** every call the child made of each driver function (Call_trace.called); for a crash, each function it entered, once *)
  unjudged : (string * string) list;
      (** the case's clauses it found nothing to judge in this run, and why
          (Case.report_unjudged): they take no pass from it *)
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
    already; another seed would only wait as long again), nor is one that
    hung or was blocked.  A run that crashed (without an injection) runs
    once more, and ends as [Crashed] if it crashes again, else as
    [Crashed_once].

    While a child runs, the driver calls in flight are watched (Call_trace):
    a call in flight past its {!call_limit} ends the run as [Hung]; a function
    that hung once is then given {!known_hang_limit} in later runs of the
    same driver and mutant, which end as [Blocked] (a stop that never
    returns costs one wait of its [call_limit], not one per case).

    [batch j] (default 1): up to how many jobs alike to [j] but for their
    injection (consecutive in [jobs]) one child runs one after another, the
    sum of their limits for them all.  A job of a batch whose child crashed
    or hung before its end runs again alone, so that a verdict on a crash or
    a hang is always that of its own process; so does, in a batch of
    asynchronous points, the first point that found something and every
    point after it (an asynchronous exception may leave the process in a
    state the next point would inherit).

    [parallel] is the cores' worth of runs: beyond it, up to 2 [parallel]
    more children start per tenth of a second while no more than half of
    [parallel] of the machine's cores were busy (Idle_cores), up to
    [parallel] times RIG_CONFORM_OVERCOMMIT (default 8; 1 runs no more than
    [parallel]) at once, since most runs only wait (RIG_CONFORM_CROWD=always: whether the cores idle
    or not, for tests).  A run that had more than [parallel] children beside
    it and found a violation that may be a timing runs again at the end,
    once no more than [parallel] run, and nothing beyond them while it
    does: the verdict is that second run's, so that no timing comes of the
    runner's own crowding, with the first run's findings that are not
    timings added (a value a driver shows at some runs only stands: no load
    makes a conforming driver show it).  A run whose findings are all such
    values does not run again.  [crowd] false (default true): never more than [parallel] (a
    self-test, whose mutants find something in nearly every run; a
    calibration, which measures).

    [cost j] (default 0): the seconds [j] is expected to take; the costliest
    start first (in the jobs' order among equals), so that no long run
    starts last.  Results are in the jobs' order all the same.

    Where only [flow] jobs run and wait (default: the injection points,
    the reference rig's flows failed at one call, which mostly wait), the
    machine's other work (its busy cores less this process's children's
    and zygote's) is what must leave half of [parallel]'s cores idle, and
    then up to 4 times as many start at once.

    [more r] (default none): the jobs the ended job's result [r] calls for
    (a sweep's points, from their scenario's clean run), run as if they had
    been given, their results after the given jobs', in the order they came;
    [progress] counts them as they end.

    Whatever a child started is gone when its job ends (its process group,
    and what left the group, re-parented to the certifier). *)
val run_all :
  ?batch:(job -> int) ->
  ?cost:(job -> float) ->
  ?crowd:bool ->
  ?more:(result -> job list) ->
  ?flow:(job -> bool) ->
  parallel:int -> limit:(job -> float) -> progress:(int -> job -> unit) -> stop:(unit -> bool) -> job list -> result list

(** Of the crowded runs (beside more children than [parallel]) that found
    something, so far: run again, how many found something again and how
    many did not; not run again, how many found only findings that are not
    timings ({!Case.finding}). *)
type crowd_tally = { again : int; not_again : int; values_only : int }

val crowd_tally : unit -> crowd_tally

(** Seconds a call of the function may be in flight before its run ends as
    [Hung]: 5 s for those the document bounds (sleep, stop, signaled,
    locate, peer: well under the probes' own bound of 9 s, above what a
    conforming call takes, a sleep being asked for at most rig's hang
    bound), 30 s for the others. *)
val call_limit : string -> float

(** A signal's name (OCaml numbers signals its own way). *)
val signal_name : int -> string

(** Seconds a call of a function that already hung may be in flight. *)
val known_hang_limit : float

(** The call in flight (per thread, outermost first, as
    {!Call_trace.in_flight} gives them) that has overstayed, innermost
    first: [`Hung (fn, seconds, inside, false)] past its {!call_limit}
    ([inside]: the call it was made from), [`Hung (fn, seconds, inside,
    true)] once [deadlocked] says its thread (tid) waits for good, or
    [`Blocked (fn, first)] past {!known_hang_limit} for a function [known]
    says hung before (first: where). *)
val overstayed_call :
  ?known:(string -> string option) ->
  ?deadlocked:(int -> bool) ->
  (int * (string * float) list) list ->
  [ `Hung of string * float * string option * bool | `Blocked of string * string ] option

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
