(** A model of the document, for generated call sequences (QCheck-STM's
    shape: commands, a pure state, [precond], [next_state], and a
    postcondition per command).

    A program is a list of phases; a phase is one command on the main
    thread, or two or three commands that run at once, each on a thread of
    its own.  Commands name what earlier commands made by those commands'
    ids ({!sym}), so a program can lose commands (shrinking) and stay
    meaningful: a command whose names are gone fails [precond] and is
    dropped.

    [precond] is what rig guarantees (GUAR-*, CNT-4, the order of frees),
    so that generated programs are ones rig may run.  The postconditions
    are the driver clauses a sequence can show ({!clauses}); each violation
    names its clause.  The state is updated with the driver's real answers
    ([next_state] takes the answer), so a program's later expectations
    follow what the driver did, as QCheck-STM's do. *)

(** The id of the command that made something: a device, a region, an
    image, an entry, a submission. *)
type sym = int

type memory = Rig_edge.memory

(** A kit function, by its role (a hang's entry is made, never launched). *)
type role = Spin | Fault_fn | Hang_fn | Absent_fn

(** One part of a submission. *)
type part =
  | Fill of { reg : sym; off : int; len : int; byte : int }
  | Launch of { ent : sym; ms : int }  (** ms: the spin's argument; ignored for a fault *)

(** What [sleep] is asked to wait for: the word as it reads now, or a value
    it does not read (so that sleep must return at once, TIME-3). *)
type seen = Current | Other

type cmd =
  | Open of int  (** an opener's index *)
  | Close of { dev : sym; drain : bool }
      (** drain: wait for the device's work first; otherwise stop it with its
          work still running.  Then stop, the checks of the word, and the
          frees and unloads rig makes after stop. *)
  | Alloc of { dev : sym; mem : memory; size : int }
  | Free of sym
  | Map_peer of { dev : sym; reg : sym }  (** reg: of another device *)
  | Map_host of { dev : sym; size : int; over : sym option }
      (** over: the host pages of that earlier map_host, mapped again *)
  | Write of { reg : sym; off : int; bytes : string }
  | Read of { reg : sym; off : int; len : int }
  | Load of { dev : sym; refused : bool }
  | Entry of { img : sym; role : role }
  | Prepare of { img : sym; role : role }
  | Submit of { dev : sym; parts : part list; commit : bool }
      (** commit: and commit it (on this thread); else it is only encoded,
          and runs at the next commit of this thread, or never (a stop drops it) *)
  | Commit of sym
  | Wait of { dev : sym; sub : sym }
  | Sleep of { dev : sym; seen : seen; still_ms : int }
  | Signaled of sym
  | Peer of { dev : sym; other : sym }

type step = { id : sym; cmd : cmd }

(** [map_syms f cmd]: [cmd] naming [f s] for each [s] it names. *)
val map_syms : (sym -> sym) -> cmd -> cmd

(** One command alone, or several at once (each on a thread). *)
type phase = step list

type program = phase list

(** What the driver answered, as the executor saw it. *)
type answer =
  | Made  (** a device, an image, a region: the thing exists now *)
  | Nothing  (** alloc answered None *)
  | Refused of string  (** image's Error *)
  | Bytes of { got : string; host : string option }
      (** a read: through the region's reach, and through the host pages of
          a map_host region *)
  | Unreachable  (** the region has no reach *)
  | Entry_answer of [ `Entry of int64 | `Absent | `No_memory of int ]
  | Submitted of { value : int; growths : int }
  | Regrow of int
      (** room answered RIG_GROW again for the submission after that many
          growths answered Grown (QUEUE-2); nothing was submitted *)
  | No_room of int  (** grow was Short (the bytes) at the fourth ask: nothing submitted *)
  | Submit_failed of { value : int; why : string }
  | Reached of int  (** a wait: the word read at least the value *)
  | Timed_out of int  (** a wait that never got there: the word read *)
  | Slept of { ms : float; cpu_wait_ms : float; concurrent : bool }
      (** ms: how long the call took; cpu_wait_ms: of that, how long its
          thread was runnable but waited for a CPU, which a loaded machine
          adds and the driver cannot help (sleeps are judged on the rest);
          concurrent: a submit or commit of the device was in flight on
          another thread while it slept *)
  | Word of int
  | Bool of bool
  | Closed of { idle : bool; stop_ms : float; word_after_stop : int; settled : int option; late : int option }
      (** idle: the word read the last value before stop (no work ran);
          word_after_stop: signaled right after stop returned; settled: the
          word once it read the last value, or None if it did not within the
          bound; late: another value read after that *)
  | Faulted of string  (** the call raised the device's Fault *)
  | Raised of string  (** another exception *)
  | Skipped of string  (** the executor could not run it (a kit item missing...) *)

(** The clauses the model's postconditions check. *)
val clauses : string list

type state

val initial : state

(** [precond st step]: rig may make this call in this state.  For a phase
    of several steps, each must hold in the state before the phase, and
    they must not touch what another of them frees or closes. *)
val precond : state -> step -> bool

val phase_ok : state -> phase -> bool

(** [next_state st step answer]. *)
val next_state : state -> step -> answer -> state

(** [postcond st step answer]: the violation the answer shows in state
    [st] (before the step), as (clause, what was seen). *)
val postcond : state -> step -> answer -> (string * string) option

(** Whether what [postcond] finds in this answer rests on how long the call
    took (a sleep's time, a wait that gave up): on a starved machine a
    conforming driver may show it.  Every other violation is a value the
    driver answered or wrote ({!Case.value_finding}). *)
val rests_on_time : answer -> bool

(** [judged st step answer]: the clauses the answer gave the postconditions
    something to compare with (a read of bytes whose value is known, a
    sleep that returned...).  A clause that no step of a run judged was
    not checked by the run. *)
val judged : state -> step -> answer -> string list

(** The longest a sleep on the word as it reads may take and be in time
    (TIME-4), and a sleep on a value it does not read (TIME-3). *)
val sleep_bound_ms : int -> float
val other_bound_ms : int -> float

(** A [Slept] answer's time, less what its thread waited for a CPU (250 ms
    of it at most): what TIME-4's bound is held against (TIME-3's "at
    once" is held against the whole time). *)
val slept_ms : answer -> float

(** What the executor needs from the state. *)
val dev_last : state -> sym -> int
(** The last value given to a device's submit (0 before any). *)

val sub_value : state -> sym -> int option
val is_host_mapping : state -> sym -> bool

(** [region_device st r]: the device a region is of. *)
val region_device : state -> sym -> sym option

(** The bytes a fill or host access of the region may touch. *)
val region_size : state -> sym -> int option

(** The bytes of the host pages a map_host region maps. *)
val host_pages_of : state -> sym -> int option

val image_device : state -> sym -> sym option
val open_devices : state -> sym list

(** A fault launch was submitted to the device. *)
val faulting : state -> sym -> bool

val opener_of : state -> sym -> int option

(** [show_bytes s]: [s] as a string of the scenario language, each byte
    outside printable ASCII as [\xHH]. *)
val show_bytes : string -> string

(** Kinds, for display. *)
val string_of_role : role -> string
val string_of_memory : memory -> string
val string_of_answer : answer -> string
