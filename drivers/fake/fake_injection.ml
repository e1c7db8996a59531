(* The fake's fault injection; see fake_injection.mli. *)

exception Fault of string

type failure = [ `Fault of string | `Raise of exn | `Fail | `Answer ]
type injection = { fn : string; left : int Atomic.t; what : failure }

let injectable =
  [ "alloc"; "free"; "map_peer"; "map_host"; "dma"; "image"; "entry"; "prepare"; "grow";
    "signaled"; "sleep"; "unload"; "reach"; "room"; "submit"; "commit"; "peer"; "locate"; "stop" ]

(* The functions that can answer the failure the document allows as an
   answer (`Answer): None, Error, No_memory, Short, an early return,
   RIG_GROW. *)
let answerable = [ "alloc"; "dma"; "image"; "entry"; "grow"; "sleep"; "room" ]

(* submit, commit and room are injected on the C side (enum fake_inj_fn). *)
let c_injected = [ ("submit", 0); ("commit", 1); ("room", 2) ]

let injections : injection list Atomic.t = Atomic.make []

(* Raises the injected failure of this call of fn, or is true when the call
   is to answer its failure answer.  Lock-free, since signaled checks it
   too; allocates nothing when nothing is injected, so that the check adds
   no allocation point to the fake's calls (Async_inject counts them). *)
let injected fn =
  match Atomic.get injections with
  | [] -> false
  | l ->
      List.fold_left
        (fun answer i ->
          if i.fn = fn && Atomic.fetch_and_add i.left (-1) = 1 then
            match i.what with
            | `Fault why -> raise (Fault why)
            | `Raise e -> raise e
            | `Fail -> failwith ("fake: " ^ fn ^ ": injected failure")
            | `Answer -> true
          else answer)
        false l

let rec update a f =
  let old = Atomic.get a in
  if not (Atomic.compare_and_set a old (f old)) then update a f
