(** The process's one Gc.Memprof profile, sampling every allocation (rate
    1.0): the probes that act at allocation points (Async_inject,
    Mask_probes) each install the handler it calls.  Gc.Memprof allows one
    profile per domain; sharing it lets any of them run in any process. *)

(** [use h]: from now on every allocation's callback calls [h ()] on the
    allocating thread (an exception [h] raises surfaces at that
    allocation); starts the profile on the first call. *)
val use : (unit -> unit) -> unit
