(** The driver's locks have one order (LOCK-8): a workload over every
    driver function, after which the edge's lock-order record
    (Rig_edge_primitives.Lock.order_inversions) must hold no pair of locks
    taken both ways.  Only locks the driver takes through the edge's Lock are
    seen (SIG-9 asks drivers to use the primitives). *)

val cases : Case.t list
