(** What the driver-side probes share: the probes are cases that call a
    driver's [Package] directly, the way a conforming rig would, and check
    the [driver]-side clauses of spec/clauses.tsv that a run can show; their
    cases are in one module per section of the document (Mem_probes,
    Code_probes, Time_probes, Stop_probes, Bus_probes, Queue_probes,
    Word_probes, Lock_probes, Mask_probes, Order_probes, Edge_checks),
    joined by Registry.

    How every probe calls the driver, so that a conforming driver gives no
    finding over any seed:
    - every driver call but [locate], [peer] and [signaled] runs inside
      {!Rig_edge_primitives.masked}, on a thread that holds no lock;
    - timeline values are strictly increasing per device, from 1;
    - each region is freed once, a mapping before the region it maps, the
      driver's own word last; images are unloaded once;
    - [stop] is called only with no call of the device in flight, and free
      and unload come after it only once [signaled] reads the last value
      given to submit (a device whose word never gets there is left as it
      is: the certifier runs each case in a child process);
    - every wait is bounded: [sleep] and [stop] run under a watchdog thread,
      and a call that outlives its bound is a finding for the case's clause,
      after which the case returns without further calls to that driver.

    A case's findings name only the clause in its [clauses] (exactly one).
    A case is [Not_applicable] when the package lacks what it needs: a kit
    item ([spin], [hang], [fault], [scratch], [bus_function]), a second
    device, a device that declares [maps_host], or memory the host reaches.
    The seed (through [Random.State.make [|seed|]]) picks sizes, offsets,
    byte values, counts and durations.

    Case names are ["probe.<CLAUSE>.<what>"], stable across versions. *)


(** {1 The shared helpers}

    For every probe module, which call the driver the same way; probes.ml
    says what each does. *)

val now : unit -> float
val spf : ('a, unit, string) format -> 'a

(** [round_up x k]: the least multiple of [k] that is >= [x]. *)
val round_up : int -> int -> int

(** [first_difference got want]: the first byte where [got] differs from
    [want], as a phrase for a finding. *)
val first_difference : string -> string -> string

(** [has_room ~room ~grow ~grows]: whether [room ()] answers Room, asked
    again after each grow that answers Grown, with [grows] grows at most
    (a Short ends it): how a probe that submits by hand makes room, as rig
    does. *)
val has_room : room:(unit -> Rig_edge.room) -> grow:(unit -> Rig_edge.grow_answer) -> grows:int -> bool

(** [sched_ms ?tid ()]: the ms a thread of this process ran and the ms it
    waited for a CPU so far, from the kernel's schedstat (the calling
    thread without [tid]); None where they cannot be read. *)
val sched_ms : ?tid:int -> unit -> (float * float) option

(** The ms the calling thread waited for a CPU so far (0 where it cannot be
    read). *)
val queued_ms : unit -> float

(** [less_cpu_wait ~ms ~cpu_wait_ms]: a sleep's [ms] less the part of it
    its thread waited for a CPU, 250 ms of that at most: a loaded machine's
    late wake-up is taken off, not a sleep that spins or yields far past
    its bound (TIME-4 and TIME-6 are judged on it). *)
val less_cpu_wait : ms:float -> cpu_wait_ms:float -> float

(** [word_reaches ~signaled ~last ~ms]: whether [signaled ()] reads [last]
    or more within about [ms] milliseconds (read every 2 ms), as a probe
    waits after stop before it frees.  A read that raises counts as not
    there: an unreadable word after stop is STOP-5's probe's to judge. *)
val word_reaches : signaled:(unit -> int) -> last:int -> ms:int -> bool

(** The driver lacks what the case needs: the case is Not_applicable. *)
exception Skip of string

type 'a watched = Done of 'a | Raised of exn | Late

(** [watch ~ms f] runs [f] on a thread of its own and waits for it at most
    [ms] milliseconds; [Late] leaves that thread running. *)
val watch : ms:int -> (unit -> 'a) -> 'a watched

(** [Kit.open_dev]'s opener's make raised (the reason): the run judges
    nothing of its clause, and says why, unless the case catches it. *)
exception Not_opened of string

(** [case name clause run]: a case that checks the one clause. *)
val case : string -> string -> ((module Rig_edge.Package) -> seed:int -> Case.result) -> Case.t

module Kit (P : Rig_edge.Package) : sig
  type dev = {
    id : int;
    d : P.D.t;
    oname : string;
    facts : P.D.region Rig_edge.facts;
    mutable last : int;
    mutable stopped : bool;
    mutable lost : string option;
    mutable hung : bool;
    mutable word_freed : bool;
    mutable keep : Rig_edge.submission list;
  }

  type res
  type reg = { dev : dev; region : P.D.region; size : int; res : res }
  type img = { idev : dev; image : P.D.image; ires : res }
  type session

  val run : clause:string -> seed:int -> (session -> unit) -> Case.result

  (** [flag s fmt]: a finding of the session's clause, a timing
      ({!Case.finding}); [flag_value]: one that is not ({!Case.value_finding}). *)
  val flag : session -> ('a, unit, string, unit) format4 -> 'a
  val flag_value : session -> ('a, unit, string, unit) format4 -> 'a

  val int : session -> int -> int
  val byte : session -> int
  val other_byte : session -> int -> int
  val pattern : session -> int -> string
  val need_item : string -> 'a option -> 'a
  val call : dev -> (unit -> 'a) -> 'a
  val openers : unit -> P.D.t Rig_edge.opener list
  val open_dev : session -> P.D.t Rig_edge.opener -> dev
  val open_first : session -> dev
  val open_two : session -> dev * dev
  val alloc : session -> dev -> Rig_edge.memory -> int -> reg option
  val alloc_host : session -> dev -> int -> reg option
  val free_reg : reg -> unit
  val map_peer : session -> dev -> reg -> reg
  val map_host : session -> dev -> nativeint -> int -> reg
  val host_pages : session -> int -> nativeint * Host_pages.t
  val image : session -> dev -> string -> (img, string) result

  (** [unload_img i]: unloads [i] now (once: not again at the session's end). *)
  val unload_img : img -> unit
  val entry : img -> string -> Rig_edge.entry_answer

  (** [entry_as_rig_asks i f]: entry asked as rig asks after a No_memory
      (CODE-3): once, then after each of three rounds of reclamation (none
      here), until it answers something else.  A driver's allocator that
      refuses now and then answers a No_memory rig's next ask gets past. *)
  val entry_as_rig_asks : img -> string -> Rig_edge.entry_answer
  val binary_image : session -> dev -> img
  val kit_entry : session -> dev -> string -> string -> int64
  val scratch_image : session -> dev -> int -> img * string
  val function_to_prepare : session -> dev -> img * string
  val place : reg -> Rig_edge.place
  val reachable : reg -> bool
  val read : reg -> off:int -> len:int -> string option
  val write : reg -> off:int -> string -> bool
  val fill_part : reg -> off:int -> len:int -> byte:int -> Rig_edge.part
  val submit : ?commit:bool -> dev -> Rig_edge.part list -> (int, string) result
  val launch : dev -> int64 -> string -> int
  val take : session -> dev -> int -> reg list
  val total : reg list -> int
  val free_bytes : session -> dev -> int

  (** [free_bytes_when s dev ~deadline until]: free Device memory once
      [until] holds of it (read every 10 ms), or at [deadline] (as
      {!now}). *)
  val free_bytes_when : session -> dev -> deadline:float -> (int -> bool) -> int

  (** [taken_by s dev ~shows start]: the bytes of free Device memory that
      [start ()] took, once [shows] of them were taken (looked at for 1 s)
      and 0.3 s more passed, for work it handed to a thread of its own;
      None if [shows] bytes did not show within 1 s. *)
  val taken_by : session -> dev -> shows:int -> (unit -> unit) -> int option

  type slept = Returned | Faulted of string | Other of exn

  (** [sleep ?took ?on_call s dev ...]: one sleep under the watchdog.
      [took]: how long the call took on its thread, less the time that
      thread was runnable but waited for a CPU (a loaded machine's delay,
      not the driver's; 250 ms of it at most), in milliseconds.  [on_call]
      runs on the thread that calls sleep, right before the call. *)
  val sleep :
    ?took:float ref -> ?on_call:(unit -> unit) -> session -> dev -> seen:int -> still_ms:int -> bound_ms:int -> slept

  (** [sleep], and how long it took in milliseconds: its [took] with
      [less_cpu_wait] (TIME-4's bound), else the whole time. *)
  val timed_sleep :
    ?less_cpu_wait:bool -> session -> dev -> seen:int -> still_ms:int -> bound_ms:int -> slept * float

  type waited = Reached | Timed_out of int | Fault_seen of string

  val wait_value : session -> dev -> int -> ms:int -> waited
  val describe_wait : waited -> string

  (** [submit_or_skip dev parts what]: a probe's setup submit; its value,
      or [Skip] naming [what] if the driver refused it. *)
  val submit_or_skip : ?commit:bool -> dev -> Rig_edge.part list -> string -> int

  (** [run_or_skip s dev parts what]: {!submit_or_skip}, then its work
      waited for (3 s); [Skip] if it did not end. *)
  val run_or_skip : session -> dev -> Rig_edge.part list -> string -> int
  val poll_word : dev -> ms:int -> (int -> bool) -> int

  (** Seconds between two reads of a word that a probe watches. *)
  val poll_interval : float

  type stopped = Stop_returned of float | Stop_raised of exn * float

  (** [stop s dev ~bound_ms] stops [dev] on a thread of its own, bounded;
      [before] runs on that thread right before stop (work encoded there is
      the stopping thread's); [on_return] runs on it as soon as stop
      returned (to read what stop left, before anything else may have
      changed it). *)
  val stop : ?before:(unit -> unit) -> ?on_return:(unit -> unit) -> session -> dev -> bound_ms:int -> stopped

  (** [word_at_stop s dev ~bound_ms]: stops [dev] and answers the word as
      signaled read it on stop's thread the moment stop returned (a value a
      thread of the driver's writes a moment later does not show). *)
  val word_at_stop : session -> dev -> bound_ms:int -> int

  val close : session -> dev -> unit
  val settled : dev -> ms:int -> bool
  val release_dev : session -> dev -> unit

  (** [leave s dev]: after a stop whose word never read the last value,
      nothing of [dev] is freed, by the caller or at the session's end. *)
  val leave : session -> dev -> unit

  (** A region both the host and the device reach, read and written from
      the host side. *)
  type witness = { wreg : reg; wread : off:int -> len:int -> string; wwrite : off:int -> string -> unit }

  val host_witness : session -> dev -> int -> witness
  val peer_witness : session -> dev -> dev -> int -> witness option

  (** [witness_device s n]: a device of the package, opened, and a witness
      of [n] bytes of it (host memory where it declares maps_host, else
      another device's mapping); Skip when the package has neither. *)
  val witness_device : session -> int -> dev * witness
end
