(* The child's channel; see channel.mli. *)

external channel_write : int -> string -> bool = "rig_iso_channel_write"
external unsetenv : string -> unit = "rig_iso_unsetenv"
external cloexec : int -> unit = "rig_iso_cloexec"

let channel_var = "RIG_CONFORM_CHANNEL"
let calls_var = "RIG_CONFORM_CALLS"
let variables = [ channel_var; calls_var ]

(* Under PIPE_BUF (4096 on Linux): one write, never interleaved. *)
let max_record = 3800

let target : (int * string) option ref = ref None
let since_point = ref 0

(* The token comes on a pipe of its own, read once and closed: it is in no
   environment a driver could read (/proc/self/environ keeps the first one). *)
let read_token fd =
  let buf = Bytes.create 64 in
  let rec go n =
    match Unix.read fd buf n (Bytes.length buf - n) with
    | 0 -> n
    | k -> go (n + k)
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> go n
    | exception Unix.Unix_error _ -> n
  in
  let n = go 0 in
  (try Unix.close fd with Unix.Unix_error _ -> ());
  Bytes.sub_string buf 0 n

let fd_of_int (n : int) : Unix.file_descr = Obj.magic n

let attach_from_environment () =
  (match Option.map (String.split_on_char ':') (Sys.getenv_opt channel_var) with
  | Some [ chan; tok ] -> (
      match (int_of_string_opt chan, int_of_string_opt tok) with
      | Some fd, Some tok_fd ->
          cloexec fd;
          let token = read_token (fd_of_int tok_fd) in
          if token <> "" then target := Some (fd, token)
      | _ -> ())
  | _ -> ());
  (match Option.bind (Sys.getenv_opt calls_var) int_of_string_opt with
  | Some fd -> ignore (Call_trace.attach fd)
  | None -> ());
  unsetenv channel_var;
  unsetenv calls_var

let to_certifier () = !target <> None

let one_line s = String.map (function '\n' | '\r' -> ' ' | c -> c) s

let write line =
  match !target with
  | None -> print_string line; flush stdout
  | Some (fd, token) ->
      let line = token ^ " " ^ line in
      (* A channel the driver closed: the run cannot report, which the
         certifier sees as a run without its end. *)
      if not (channel_write fd line) then exit 125

let say record =
  let r = one_line record in
  let r = if String.length r > max_record then String.sub r 0 (max_record - 3) ^ "..." else r in
  incr since_point;
  write (r ^ "\n")

let start_point what =
  since_point := 0;
  write ("POINT\t" ^ one_line what ^ "\n")

(* A person reading the records needs no count. *)
let say_done () =
  let n = !since_point in
  since_point := 0;
  write (if !target = None then "DONE\n" else Printf.sprintf "DONE\t%d\n" n)

let environment ~fd ~token_fd ~calls_fd =
  [ Printf.sprintf "%s=%d:%d" channel_var fd token_fd; Printf.sprintf "%s=%d" calls_var calls_fd ]

let new_token () =
  (* a read of 16 bytes, not a buffered channel's 64 KiB: one per child *)
  let fd = Unix.openfile "/dev/urandom" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  let b = Bytes.create 16 in
  let n = Fun.protect ~finally:(fun () -> Unix.close fd) (fun () -> Unix.read fd b 0 16) in
  if n <> 16 then failwith "Channel.new_token: short read of /dev/urandom";
  String.concat "" (List.init 16 (fun i -> Printf.sprintf "%02x" (Bytes.get_uint8 b i)))

(* A line longer than this is no record of ours: dropped as it comes. *)
let max_line = 8192

type reader = {
  prefix : string;
  partial : Buffer.t;
  mutable overlong : bool;
  mutable records : string list;  (* newest first *)
  mutable foreign : int;
}

let reader ~token = { prefix = token ^ " "; partial = Buffer.create 256; overlong = false; records = []; foreign = 0 }

let line r l =
  if String.starts_with ~prefix:r.prefix l then
    r.records <- String.sub l (String.length r.prefix) (String.length l - String.length r.prefix) :: r.records
  else r.foreign <- r.foreign + String.length l + 1

let feed r bytes =
  String.iter
    (fun c ->
      if c = '\n' then begin
        if r.overlong then r.foreign <- r.foreign + 1 else line r (Buffer.contents r.partial);
        Buffer.clear r.partial;
        r.overlong <- false
      end
      else if r.overlong then r.foreign <- r.foreign + 1
      else if Buffer.length r.partial >= max_line then begin
        r.foreign <- r.foreign + Buffer.length r.partial + 1;
        Buffer.clear r.partial;
        r.overlong <- true
      end
      else Buffer.add_char r.partial c)
    bytes

let records r = List.rev r.records
let foreign_bytes r = r.foreign + Buffer.length r.partial
