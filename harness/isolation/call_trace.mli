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

(** The calls in flight on the page: per thread (its Linux tid), the driver
    functions in flight, outermost first. *)
val in_flight : Unix.file_descr -> (int * string list) list

(** In words: "in stop", "in sleep (thread 2) and commit (thread 3)";
    [None] when no driver call was running. *)
val describe : (int * string list) list -> string option

(** {1 In the child} *)

(** [attach fd]: the page the certifier gave (Channel does it). *)
val attach : int -> bool

(** [wrap p]: the package whose driver functions, capability and openers'
    make mark the page as they run, and otherwise are [p]'s. *)
val wrap : (module Rig_edge.Package) -> (module Rig_edge.Package)
