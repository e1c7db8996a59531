(** The fake driver's fault injection: the failures Fake.inject arms, one
    call of one function each, and the check each driver function makes at
    its start.  Lock-free, since signaled checks it too. *)

(** The fake's D.Fault. *)
exception Fault of string

type failure = [ `Answer | `Fail | `Fault of string | `Raise of exn ]

(** [left] counts down the calls of [fn] until the one that fails. *)
type injection = { fn : string; left : int Atomic.t; what : failure }

(** The functions a failure can be injected into. *)
val injectable : string list

(** The functions that can answer the failure the document allows as an
    answer (`Answer): None, Error, No_memory, Short, an early return,
    RIG_GROW. *)
val answerable : string list

(** submit, commit and room are injected on the C side (enum
    fake_inj_fn). *)
val c_injected : (string * int) list

(** The armed injections. *)
val injections : injection list Atomic.t

(** [injected fn] raises the injected failure of this call of [fn], or is
    true when the call is to answer its failure answer. *)
val injected : string -> bool

(** [update a f]: [a] becomes [f] of it, atomically (a compare-and-set
    loop). *)
val update : 'a Atomic.t -> ('a -> 'a) -> unit
