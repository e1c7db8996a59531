(** The driver calls in flight in a child, on a page of memory it shares
    with the certifier, so that a crash or a hang is reported with the call
    that was running ("killed by SIGSEGV in alloc").  The child marks each
    call of a driver function as it starts and ends, allocating nothing
    (the asynchronous-exception sweep counts the allocations inside driver
    calls: tracing must not add any); the certifier reads the page once the
    child has ended or was killed. *)

(** {1 In the certifier} *)

(** A new page, as a descriptor to hand to the child. *)
val create : unit -> Unix.file_descr

(** The calls in flight on the page now: per thread (its Linux tid), the
    driver functions in flight, outermost first, each with the seconds since
    it started. *)
val in_flight : Unix.file_descr -> (int * (string * float) list) list

(** The driver functions any thread of the child entered at least once
    (a crashed child never wrote its TRACED records). *)
val entered : Unix.file_descr -> string list

(** The call in flight the longest, with its seconds. *)
val longest : (int * (string * float) list) list -> (string * float) option

(** In words: "in stop", "in sleep (thread 2) and commit (thread 3)";
    [None] when no driver call was running. *)
val describe : (int * (string * float) list) list -> string option

(** {1 In the child} *)

(** [attach fd]: the page the certifier gave (Channel does it). *)
val attach : int -> bool

(** [attach_page fd]: a page this process made with [create] (run's
    watched child). *)
val attach_page : Unix.file_descr -> bool

(** The driver functions this process called through {!wrap}, each with
    its number of calls (counted or not, unlike a case's [CALLS]). *)
val called : unit -> (string * int) list

(** Zero every count of {!called} (a batch's next point). *)
val reset_called : unit -> unit

(** [wrap p]: the package whose driver functions, capability, openers'
    make and queue functions (room, submit, commit) mark the page as they
    run, and otherwise are [p]'s. *)
val wrap : (module Rig_edge.Package) -> (module Rig_edge.Package)
