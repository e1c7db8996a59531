(** Memory probes of the document: MEM-2, MEM-4, MEM-5, MEM-7, MEM-8: regions of each kind, peers, map_peer, map_host's whole pages, dma's errors.  Built on {!Probes.Kit};
    names ["probe.<CLAUSE>.<what>"]. *)

(** In clause order. *)
val cases : Case.t list
