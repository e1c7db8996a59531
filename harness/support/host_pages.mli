(** Page-aligned host memory with a known address, for map_host: a shared
    mapping of an unlinked temporary file, found in /proc/self/maps
    (Linux).  OCaml gives no address of its own memory; this needs no C. *)

type t = (char, Bigarray.int8_unsigned_elt, Bigarray.c_layout) Bigarray.Array1.t

(** [alloc size] is [(address, pages)]: [size] bytes starting a page.
    Raises Failure when the mapping cannot be found. *)
val alloc : int -> nativeint * t
