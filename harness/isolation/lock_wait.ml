(* Deadlocks on pthread mutexes, read from /proc; see lock_wait.mli. *)

(* The child may end before the open or between the open and the read
   (ENOENT, ESRCH): then there is nothing to read, not an error of the
   certifier. *)
let read_small path = match Child_process.read_small path with s -> Some s | exception Unix.Unix_error _ -> None

(* futex(2) on x86-64, and the operation glibc's lock takes to wait:
   FUTEX_WAIT (private or not) for the value 2, "locked, with waiters". *)
let futex_nr = 202
let futex_wait = 0
let futex_cmd_mask = 127
let contended = 2
let owner_offset = 8

(* The futex a sleeping thread waits on, as glibc's mutex lock waits. *)
let waits_on ~pid tid =
  match read_small (Printf.sprintf "/proc/%d/task/%d/syscall" pid tid) with
  | None -> None
  | Some line -> (
      match String.split_on_char ' ' (String.trim line) with
      | nr :: uaddr :: op :: value :: _ when int_of_string_opt nr = Some futex_nr -> (
          match (int_of_string_opt uaddr, int_of_string_opt op, int_of_string_opt value) with
          | Some a, Some o, Some v when o land futex_cmd_mask = futex_wait && v = contended -> Some a
          | _ -> None)
      | _ -> None)

let switches ~pid tid =
  match read_small (Printf.sprintf "/proc/%d/task/%d/status" pid tid) with
  | None -> None
  | Some s ->
      List.find_map
        (fun l ->
          match String.split_on_char ':' l with
          | [ "voluntary_ctxt_switches"; n ] -> int_of_string_opt (String.trim n)
          | _ -> None)
        (String.split_on_char '\n' s)

(* The lock word and the owner of the mutex at [addr], from the child's
   memory. *)
let mutex_at ~pid addr =
  match Unix.openfile (Printf.sprintf "/proc/%d/mem" pid) [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 with
  | exception Unix.Unix_error _ -> None
  | fd ->
      let b = Bytes.create 12 in
      let got =
        try
          ignore (Unix.LargeFile.lseek fd (Int64.of_int addr) Unix.SEEK_SET);
          Unix.read fd b 0 12
        with Unix.Unix_error _ -> 0
      in
      Unix.close fd;
      if got < 12 then None
      else Some (Int32.to_int (Bytes.get_int32_le b 0), Int32.to_int (Bytes.get_int32_le b owner_offset))

(* One thread's state: what it waits on, and its wake-ups so far. *)
let state ~pid tid = match (waits_on ~pid tid, switches ~pid tid) with Some a, Some n -> Some (a, n) | _ -> None

(* The thread that holds a mutex, from its owner field.  A child the zygote
   made (a raw clone) keeps the zygote's tid in its main thread's glibc
   descriptor, so its main thread's locks name the zygote. *)
let holder ~pid owner =
  if Sys.file_exists (Printf.sprintf "/proc/%d/task/%d" pid owner) then Some owner
  else if Zygote.pid () = Some owner then Some pid
  else None

let forever ~pid tid =
  (* Follows the owners from [tid]: Some chain (each thread with its state)
     once a thread comes back, None when one does not wait on a mutex. *)
  let rec follow chain t =
    if List.mem_assoc t chain then Some chain
    else if List.length chain > 64 then None
    else
      match state ~pid t with
      | None -> None
      | Some ((addr, _) as st) -> (
          match mutex_at ~pid addr with
          | Some (word, owner) when word = contended && owner > 0 -> (
              match holder ~pid owner with Some h -> follow ((t, st) :: chain) h | None -> None)
          | _ -> None)
  in
  match follow [] tid with
  | None -> false
  | Some chain -> List.for_all (fun (t, st) -> state ~pid t = Some st) chain
