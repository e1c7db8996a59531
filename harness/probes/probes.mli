(** The driver-side probes: cases that call a driver's [Package] directly,
    the way a conforming rig would, and check the [driver]-side clauses of
    spec/clauses.tsv that a run can show (MEM-2, MEM-4, MEM-5, MEM-7, MEM-8,
    CODE-1, CODE-2, CODE-3, CODE-5, CODE-6, CODE-7, TIME-3, TIME-4, TIME-5,
    STOP-2, STOP-3, STOP-4, STOP-5, STOP-6, STOP-8).

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

(** All the probes, in clause order. *)
val cases : Case.t list

(** {1 The shared helpers}

    For probe modules of their own (bus_probes.ml), which call the driver
    the same way; probes.ml says what each does. *)

(** The driver lacks what the case needs: the case is Not_applicable. *)
exception Skip of string

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
  type session

  val run : clause:string -> seed:int -> (session -> unit) -> Case.result
  val flag : session -> ('a, unit, string, unit) format4 -> 'a
  val int : session -> int -> int
  val byte : session -> int
  val other_byte : session -> int -> int
  val pattern : session -> int -> string
  val need_item : string -> 'a option -> 'a
  val call : dev -> (unit -> 'a) -> 'a
  val openers : unit -> P.D.t Rig_edge.opener list
  val open_dev : session -> P.D.t Rig_edge.opener -> dev
  val alloc : session -> dev -> Rig_edge.memory -> int -> reg option
  val free_reg : reg -> unit
  val map_peer : session -> dev -> reg -> reg
  val place : reg -> Rig_edge.place
  val reachable : reg -> bool
  val read : reg -> off:int -> len:int -> string option
  val write : reg -> off:int -> string -> bool
  val fill_part : reg -> off:int -> len:int -> byte:int -> Rig_edge.part
  val submit : ?commit:bool -> dev -> Rig_edge.part list -> (int, string) result

  type waited = Reached | Timed_out of int | Fault_seen of string

  val wait_value : session -> dev -> int -> ms:int -> waited
  val describe_wait : waited -> string
  val run_or_skip : session -> dev -> Rig_edge.part list -> string -> int
  val close : session -> dev -> unit
  val settled : dev -> ms:int -> bool
  val release_dev : session -> dev -> unit
end
