(** One failure injected into one driver call, as a sweep or a replay line
    names it: FN:NTH:KIND, the [nth] call of [fn] answering [kind]. *)

type t = { fn : string; nth : int; kind : string }

(** The failure kinds: "fault" (the driver's Fault, or a failed submit or
    commit), "raise" (another exception), "fail" (a failed submit or commit),
    and the failure answers: "none" (alloc), "error" (dma, image),
    "no_memory" (entry), "short" (grow), "early" (sleep returns at once),
    "grow" (room answers RIG_GROW). *)
val kinds : string list

(** [swept calls]: of the calls of each function a clean run made (function,
    count), how many a sweep fails one by one: all, but for the two whose
    count depends on timing: signaled's first two, and sleep's first wherever
    the run read the word, whether or not it slept. *)
val swept : (string * int) list -> (string * int) list

(** Whether the kind is the failure answer of its function. *)
val is_answer : t -> bool

(** The kinds the document allows from a function, for a sweep. *)
val kinds_for : string -> string list

(** An asynchronous exception: KIND "async@N" raises one at the N-th
    allocation (N >= 1) the calling thread makes inside the [nth] call of
    [fn] (Async_inject, for the async.* cases), as in [alloc:1:async@3].
    [async_at i] is [Some n] for such a kind. *)
val async_at : t -> int option

val async : fn:string -> nth:int -> at:int -> t

(** A signal at a wait: KIND "wait@N" sends the thread SIGUSR2 as it enters
    the N-th wait (N >= 1) inside the [nth] call of [fn]; the signal's
    handler raises as the wait ends (Async_inject, for the async.* cases),
    as in [sleep:1:wait@1].  [wait_at i] is [Some n] for such a kind. *)
val wait_at : t -> int option

val wait : fn:string -> nth:int -> at:int -> t

val of_string : string -> (t, string) result
val to_string : t -> string
