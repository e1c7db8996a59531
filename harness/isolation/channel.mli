(** The channel on which a child tells the certifier what its case found:
    a pipe of its own (never the stdout and stderr the driver also writes
    to), each record a line that starts with a token drawn for that child
    alone, which reaches it on a pipe it reads once and closes before any
    driver code loads.  Bytes a driver writes there are not records: they are counted
    and dropped.  The last record of a run, [DONE], says how many records
    came before it, so that a lost or mangled record is seen.

    Without a channel (a person running [rig-conform run]), records are
    printed on stdout as they are. *)

(** {1 In the child} *)

(** [attach_from_environment ()] takes the channel and the call page that
    the certifier gave (environment variables it then removes, so that the
    driver finds neither) and keeps them from programs the driver may exec.
    Called once, before any driver code is loaded. *)
val attach_from_environment : unit -> unit

(** Whether this process is a certifier's child (it took a channel). *)
val to_certifier : unit -> bool

(** [say record]: one record (tabs separate its fields; newlines become
    spaces, and a record is cut to fit one atomic pipe write). *)
val say : string -> unit

(** [start_point ()]: the records that follow belong to a new point of a
    batch (the count of [DONE] starts again). *)
val start_point : string -> unit

(** [say_done ()]: the last record of a run or of a point. *)
val say_done : unit -> unit

(** {1 In the certifier} *)

(** The environment entries that give a child its channel on descriptor
    [fd], the token on a pipe it reads from descriptor [token_fd] (never
    in the environment), and its call page on descriptor [calls_fd]. *)
val environment : fd:int -> token_fd:int -> calls_fd:int -> string list

(** The names of the variables [environment] sets. *)
val variables : string list

(** A fresh token, unguessable by the child's driver. *)
val new_token : unit -> string

type reader

val reader : token:string -> reader

(** [feed r bytes]: bytes read from the channel. *)
val feed : reader -> string -> unit

(** The records read so far, in order (without the token). *)
val records : reader -> string list

(** Bytes on the channel that were not records of this child. *)
val foreign_bytes : reader -> int
