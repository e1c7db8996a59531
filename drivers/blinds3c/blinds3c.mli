(** blinds3c: hostmem with sleep changed, about SIG-3 ("A wait's blocking
    step releases the OCaml runtime while it blocks, as a blocking stub
    does").  The table at the top of blinds3c.ml says what each driver's
    sleep does and which clause it breaks. *)

(** Every s3c-* driver, with the clause it breaks ("SIG-3") or
    "conforming". *)
val drivers : (string * (module Rig_edge.Package)) list

(** What every driver registers beyond its kit: hostmem's (the same device
    and image format). *)
val kit_more : Rig_edge.kit_more
