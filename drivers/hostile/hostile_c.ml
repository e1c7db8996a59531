(* The hostile drivers' primitives (hostile_stubs.c), the ways to die or
   never return, and how a hostmem variant is registered, shared by
   hostile.ml (drivers that misbehave in a call) and hostile_load.ml (a
   plugin that misbehaves as it is loaded). *)

external note_pid : unit -> unit = "hostile_note_pid"
external take_token : string -> bool = "hostile_take_token"
external segv : unit -> unit = "hostile_segv"
external abort : unit -> unit = "hostile_abort"
external c_exit : int -> unit = "hostile_exit"
external uexit : int -> unit = "hostile_uexit"
external loop : unit -> unit = "hostile_loop"
external block : unit -> unit = "hostile_block"
external write : int -> string -> unit = "hostile_write" [@@noalloc]
external flood : int -> int -> unit = "hostile_flood"
external stream : int -> unit = "hostile_stream"
external close_fds : int -> int -> unit = "hostile_close_fds"
external garbage_fds : int -> int -> unit = "hostile_garbage_fds"
external dup2_null : unit -> unit = "hostile_dup2_null"
external fork_sleepers : int -> unit = "hostile_fork_sleepers"
external double_fork : unit -> unit = "hostile_double_fork"
external handle_nothing : int -> unit = "hostile_handle_nothing"
external ignore_signal : int -> unit = "hostile_ignore"
external stop_self : unit -> unit = "hostile_stop_self"
external kill_parent : int -> unit = "hostile_kill_parent"
external kill_group : int -> unit = "hostile_kill_group"
external chdir : string -> unit = "hostile_chdir"
external start_forger : unit -> unit = "hostile_start_forger"

(* The signal numbers of the stubs. *)
let sigint = 0
let sigterm = 1

(* The ways a process ends or stops answering, by the name a driver's name
   carries (hostile-<phase>-<way>). *)
let ways =
  [ ("segv", segv);
    ("abort", abort);
    ("exit0", fun () -> note_pid (); exit 0);
    ("exit3", fun () -> note_pid (); exit 3);
    ("_exit", fun () -> uexit 0);
    ("loop", loop);
    ("block", block) ]

(* Bytes that are neither UTF-8 nor printable, nor safe in XML or HTML. *)
let bad_bytes = "\xff\xfe\x00\x1b[31m<>&\""

(* Lines that look like the child's protocol, a partial line, and bad bytes. *)
let forged =
  "DONE\nFINDING\tSTOP-3\tforged\nNA\tforged\nCALLS\talloc\t9\nPOINT\talloc:1:raise\nERROR\tforged\n"
  ^ bad_bytes ^ "\nDONE\nDO"

(* Prints the forgery on stdout and stderr. *)
let forge () =
  write 1 forged;
  write 2 forged

module H = Hostmem.D
module type HD = Rig_edge.Driver with type t = H.t and type region = H.region and type image = H.image

(* Registers [D] under [name], with hostmem's openers (or [openers]) and kit. *)
let register ?(openers = Hostmem.openers) name (module D : HD) =
  Rig_edge_registry.register
    (module struct
      module D = D
      let name = name
      let openers = openers
      let kit = Hostmem.kit
    end : Rig_edge.Package)
