(* Isolated children; see child_process.mli. *)

external poll : int -> int * int = "rig_iso_poll"
external kill_group : int -> unit = "rig_iso_kill_group"
external kill : int -> unit = "rig_iso_kill"
external reap : int -> unit = "rig_iso_reap"
external subreaper : unit -> unit = "rig_iso_subreaper"
external rev_signal : int -> int = "rig_iso_ocaml_signal"

type ended = Exited of int | Killed of int | Stopped of int

(* What the child writes on stdout and stderr: the first and the last
   bytes, so that a flood costs the certifier nothing. *)
let keep_head = 4096
let keep_tail = 16384

type output = { head : Buffer.t; mutable tail : string; mutable total : int }

type t = {
  pid : int;
  out : Unix.file_descr;
  chan : Unix.file_descr;
  calls : Unix.file_descr;
  reader : Channel.reader;
  output : output;
  mutable open_ : bool;
  mutable at_end : Unix.file_descr list;  (* pipes whose writers are all gone *)
  mutable flight : (int * (string * float) list) list;
  mutable entered : string list;
}

let pid c = c.pid

let spawn ?argv0 ~prog ~args () =
  let out_r, out_w = Unix.pipe ~cloexec:true () in
  let chan_r, chan_w = Unix.pipe ~cloexec:true () in
  let calls = Call_trace.create () in
  let token = Channel.new_token () in
  let tok_r, tok_w = Unix.pipe ~cloexec:true () in
  ignore (Unix.write_substring tok_w token 0 (String.length token));
  Unix.close tok_w;
  (* The child's descriptors: 1 and 2 its output, 3 the channel, 4 the page,
     5 the token. *)
  let env = Array.append (Array.of_list (Channel.environment ~fd:3 ~token_fd:5 ~calls_fd:4)) (Unix.environment ()) in
  let pid =
    Fun.protect
      ~finally:(fun () -> Unix.close out_w; Unix.close chan_w; Unix.close tok_r)
      (fun () ->
        let argv0 = Option.value argv0 ~default:prog and fds = [| out_w; out_w; chan_w; calls; tok_r |] in
        try
          match Zygote.spawn ~argv0 ~prog ~args ~env ~fds with
          | Some pid -> pid
          | None -> Group_spawn.spawn prog (Array.of_list (argv0 :: args)) env fds
        with e -> Unix.close out_r; Unix.close chan_r; Unix.close calls; raise e)
  in
  Unix.set_nonblock out_r;
  Unix.set_nonblock chan_r;
  { pid; out = out_r; chan = chan_r; calls; reader = Channel.reader ~token;
    output = { head = Buffer.create 1024; tail = ""; total = 0 }; open_ = true; at_end = []; flight = []; entered = [] }

(* A pipe at its end would wake every select at once: left out. *)
let descriptors c = if c.open_ then List.filter (fun fd -> not (List.memq fd c.at_end)) [ c.out; c.chan ] else []

let add_output o s =
  o.total <- o.total + String.length s;
  let room = keep_head - Buffer.length o.head in
  let s =
    if room > 0 then begin
      let k = min room (String.length s) in
      Buffer.add_string o.head (String.sub s 0 k);
      String.sub s k (String.length s - k)
    end
    else s
  in
  if s <> "" then begin
    let t = o.tail ^ s in
    o.tail <- (if String.length t > keep_tail then String.sub t (String.length t - keep_tail) keep_tail else t)
  end

let buf = Bytes.create 65536

(* Reads until the pipe is empty for now (or a bound, so that a child that
   floods cannot hold the certifier here). *)
let read_some c fd consume =
  let rec go budget =
    if budget > 0 then
      match Unix.read fd buf 0 (Bytes.length buf) with
      | 0 -> if not (List.memq fd c.at_end) then c.at_end <- fd :: c.at_end
      | n -> consume (Bytes.sub_string buf 0 n); go (budget - 1)
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> ()
      | exception Unix.Unix_error _ -> if not (List.memq fd c.at_end) then c.at_end <- fd :: c.at_end
  in
  go 64

let drain c =
  if c.open_ then begin
    read_some c c.out (add_output c.output);
    read_some c c.chan (Channel.feed c.reader)
  end

let of_poll = function
  | 1, n -> Some (Exited n)
  | 2, s -> Some (Killed (rev_signal s))
  | 3, s -> Some (Stopped (rev_signal s))
  | _ -> None

let ended c = of_poll (poll c.pid)

let finish c =
  let how = ended c in
  kill_group c.pid;
  kill c.pid;
  reap c.pid;
  if c.open_ then begin
    drain c;
    c.flight <- Call_trace.in_flight c.calls;
    c.entered <- Call_trace.entered c.calls;
    List.iter (fun fd -> try Unix.close fd with Unix.Unix_error _ -> ()) [ c.out; c.chan; c.calls ];
    c.open_ <- false
  end;
  how

let records c = Channel.records c.reader
let foreign_bytes c = Channel.foreign_bytes c.reader
let in_flight c = if c.open_ then Call_trace.in_flight c.calls else c.flight
let entered c = if c.open_ then Call_trace.entered c.calls else c.entered
let output c = (Buffer.contents c.output.head, c.output.tail, c.output.total)

let last_lines c n =
  let head, tail, total = output c in
  let text = if total <= keep_head + keep_tail then head ^ tail else tail in
  let printable = String.map (fun ch -> if ch = '\n' || (ch >= ' ' && ch < '\127') then ch else '?') text in
  let lines = List.filter (fun l -> String.trim l <> "") (String.split_on_char '\n' printable) in
  let k = List.length lines in
  let cut l = if String.length l > 300 then String.sub l 0 297 ^ "..." else l in
  String.concat " | " (List.map cut (List.filteri (fun i _ -> i >= k - n) lines))

let become_subreaper () = subreaper ()

(* A /proc file's first 4 KiB: In_channel.input_all starts with a 64-KiB
   buffer, and the runner reads every process's stat each time a child ends
   (the certifier's own time went to collecting those buffers).  A buffer
   per call: threads of the certifier read at once (Lock_wait's). *)
let read_small path =
  let buf = Bytes.create 4096 in
  let fd = Unix.openfile path [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  Fun.protect ~finally:(fun () -> Unix.close fd) (fun () -> Bytes.sub_string buf 0 (Unix.read fd buf 0 (Bytes.length buf)))

let stat_fields pid =
  match read_small (Printf.sprintf "/proc/%d/stat" pid) with
  | s -> (
      (* The command name may hold spaces and parentheses: read after the last ')'. *)
      match String.rindex_opt s ')' with
      | Some i -> Some (String.split_on_char ' ' (String.sub s (i + 2) (String.length s - i - 2)))
      | None -> None)
  | exception _ -> None

(* The parent and process group of a process, from /proc. *)
let parent_and_group pid =
  match stat_fields pid with
  | Some (_state :: ppid :: pgrp :: _) -> (
      match (int_of_string_opt ppid, int_of_string_opt pgrp) with Some p, Some g -> Some (p, g) | _ -> None)
  | _ -> None

(* pid, parent and process group of each process. *)
let processes () =
  match Sys.readdir "/proc" with
  | entries ->
      Array.to_list entries
      |> List.filter_map (fun e ->
             match int_of_string_opt e with
             | Some pid -> Option.map (fun (ppid, pgrp) -> (pid, ppid, pgrp)) (parent_and_group pid)
             | None -> None)
  | exception Sys_error _ -> []

(* A /proc file whole, for a list that may be long (a driver's fork flood). *)
let read_whole path =
  let fd = Unix.openfile path [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  Fun.protect ~finally:(fun () -> Unix.close fd) (fun () ->
      let out = Buffer.create 256 and buf = Bytes.create 4096 in
      let rec go () = match Unix.read fd buf 0 4096 with 0 -> Buffer.contents out | n -> Buffer.add_subbytes out buf 0 n; go () in
      go ())

(* The certifier's children, orphans re-parented to it included: each of its
   threads' /proc children list, a few files instead of every process's
   stat each time a child ends (hundreds of files under a busy test suite).
   [None] on a kernel without those lists (CONFIG_PROC_CHILDREN), or when
   one could not be read (a signal meanwhile): then every process is read. *)
let own_children me =
  let pids path = List.filter_map int_of_string_opt (String.split_on_char ' ' (String.trim (read_whole path))) in
  let of_task t = Printf.sprintf "/proc/self/task/%s/children" t in
  (* A thread that ended meanwhile has no list, and no children. *)
  let of_other t =
    if t = string_of_int me then [] else try pids (of_task t) with Unix.Unix_error ((Unix.ENOENT | Unix.ESRCH), _, _) -> []
  in
  match pids (of_task (string_of_int me)) @ List.concat_map of_other (Array.to_list (Sys.readdir "/proc/self/task")) with
  | all -> Some all
  | exception (Unix.Unix_error _ | Sys_error _) -> None

(* Children of [me], with their process groups. *)
let children me =
  match own_children me with
  | None -> List.filter (fun (_, ppid, _) -> ppid = me) (processes ())
  | Some pids ->
      List.filter_map
        (fun pid -> match parent_and_group pid with Some (ppid, pgrp) when ppid = me -> Some (pid, ppid, pgrp) | _ -> None)
        pids

let end_strays ~keep =
  let me = Unix.getpid () in
  let keep = Option.to_list (Zygote.pid ()) @ keep in
  let rec round n ended =
    if n = 0 then ended
    else
      let strays = List.filter (fun (pid, _, pgrp) -> not (List.mem pid keep || List.mem pgrp keep)) (children me) in
      if strays = [] then ended
      else begin
        List.iter (fun (pid, _, _) -> kill pid; reap pid) strays;
        round (n - 1) (ended + List.length strays)
      end
  in
  round 50 0
