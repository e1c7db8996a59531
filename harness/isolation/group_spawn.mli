(** Starting a program as a child in a process group of its own (so that
    the terminal's Ctrl-C reaches only the certifier, and the group can be
    killed whole), with default dispositions, an empty mask, stdin from
    /dev/null, [fds.(i)] as its descriptor [i + 1] and every other
    descriptor closed. Shared by the executed children and the zygote. *)

val spawn : string -> string array -> string array -> Unix.file_descr array -> int
(** [spawn prog argv envp fds]: the child's pid; raises [Unix_error] if it
    could not be started. *)
