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
