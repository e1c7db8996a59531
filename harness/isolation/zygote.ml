(* The zygote; see zygote.mli. *)

external send : Unix.file_descr -> string -> Unix.file_descr array -> bool = "rig_zyg_send"
external receive : Unix.file_descr -> string * Unix.file_descr array = "rig_zyg_receive"
external fork : Unix.file_descr array -> int = "rig_zyg_fork"
external set_environment : string array -> unit = "rig_zyg_set_environment"

(* Set in the zygote's environment only: the subcommand "zygote" is no
   command a user types. *)
let marker = "RIG_CONFORM_ZYGOTE_SOCKET"
let socket_fd : Unix.file_descr = Obj.magic 3

(* A request: the directory, the count of arguments, the arguments, the
   environment, NUL-separated (none of them can hold a NUL). *)
let encode ~cwd ~args ~env = String.concat "\000" ((cwd :: string_of_int (List.length args) :: args) @ Array.to_list env)

let decode payload =
  match String.split_on_char '\000' payload with
  | cwd :: n :: rest ->
      let n = int_of_string n in
      (cwd, List.filteri (fun i _ -> i < n) rest, Array.of_list (List.filteri (fun i _ -> i >= n) rest))
  | _ -> failwith "Zygote.decode: malformed request"

(* ---------------------------------------------------------- the zygote *)

let alone () = match Sys.readdir "/proc/self/task" with tasks -> Array.length tasks = 1 | exception Sys_error _ -> false

let reply pid =
  let b = Bytes.create 8 in
  Bytes.set_int64_le b 0 (Int64.of_int pid);
  ignore (Unix.write socket_fd b 0 8)

(* What the runtime and the C library read as a process starts
   (OCAMLRUNPARAM, LD_PRELOAD, ASAN_OPTIONS...) is the zygote's: a child is
   made only for an environment that differs from the zygote's in the
   channel's variables alone, which are read later. *)
let own_variable v = List.exists (fun p -> String.starts_with ~prefix:(p ^ "=") v) Channel.variables

let same_start env ~zygote's =
  List.sort compare (List.filter (fun v -> not (own_variable v)) (Array.to_list env)) = zygote's

let serve_if_asked ~warm ~run =
  if Sys.getenv_opt marker = Some "3" && List.tl (Array.to_list Sys.argv) = [ "zygote" ] then begin
    warm ();
    let zygote's =
      List.sort compare (List.filter (fun v -> not (String.starts_with ~prefix:(marker ^ "=") v || own_variable v)) (Array.to_list (Unix.environment ())))
    in
    let rec loop () =
      match receive socket_fd with
      | exception End_of_file -> exit 0
      | payload, fds ->
          let request = match decode payload with r -> Some r | exception Failure _ -> None in
          let servable = match request with Some (_, _, env) -> same_start env ~zygote's && alone () | None -> false in
          let pid = if servable then (try fork fds with Unix.Unix_error _ -> -1) else -1 in
          if pid = 0 then begin
            let cwd, args, env = Option.get request in
            (try
               set_environment env;
               Sys.chdir cwd
             with e ->
               prerr_endline ("rig-conform: a child the zygote made could not start: " ^ Printexc.to_string e);
               exit 125);
            (* What escapes [run] ends the child as it ends an executed one. *)
            run args;
            exit 0
          end
          else begin
            Array.iter Unix.close fds;
            reply pid;
            loop ()
          end
    in
    loop ()
  end

(* ------------------------------------------------------ the certifier *)

type state = Unstarted | Running of { pid : int; sock : Unix.file_descr } | Off

let state = ref (if Sys.getenv_opt "RIG_CONFORM_ZYGOTE" = Some "off" then Off else Unstarted)

let pid () = match !state with Running z -> Some z.pid | _ -> None

let start ~argv0 ~prog =
  match Unix.socketpair ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 with
  | exception Unix.Unix_error _ -> Off
  | mine, theirs -> (
      let env = Array.append [| marker ^ "=3" |] (Unix.environment ()) in
      (* Its stdout and stderr are the certifier's stderr: it prints only
         why it could not make a child. *)
      match Group_spawn.spawn prog [| argv0; "zygote" |] env [| Unix.stderr; Unix.stderr; theirs |] with
      | pid -> Unix.close theirs; Running { pid; sock = mine }
      | exception Unix.Unix_error _ -> Unix.close theirs; Unix.close mine; Off)

let give_up pid sock =
  Unix.close sock;
  (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
  (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
  state := Off

(* The zygote answers at once; one that does not in a minute (stopped by a
   signal a driver sent, so it made no child) is given up rather than
   waited for. *)
let reply_within = 60.

let read_reply sock =
  let b = Bytes.create 8 in
  let deadline = Unix.gettimeofday () +. reply_within in
  let rec fill k =
    if k = 8 then Some (Int64.to_int (Bytes.get_int64_le b 0))
    else
      match Unix.select [ sock ] [] [] (Float.max 0. (deadline -. Unix.gettimeofday ())) with
      | exception Unix.Unix_error (Unix.EINTR, _, _) -> fill k
      | [], _, _ -> None
      | _ ->
      match Unix.read sock b k (8 - k) with
      | 0 -> None
      | n -> fill (k + n)
      | exception Unix.Unix_error (Unix.EINTR, _, _) -> fill k
      | exception Unix.Unix_error _ -> None
  in
  fill 0

let spawn ~argv0 ~prog ~args ~env ~fds =
  if prog <> "/proc/self/exe" then None
  else begin
    if !state = Unstarted then state := start ~argv0 ~prog;
    match !state with
    | Running { pid; sock } -> (
        if not (send sock (encode ~cwd:(Sys.getcwd ()) ~args ~env) fds) then (give_up pid sock; None)
        else
          match read_reply sock with
          | Some child when child > 0 -> Some child
          | Some _ -> None (* not alone this time: executed instead *)
          | None -> give_up pid sock; None)
    | Unstarted | Off -> None
  end
