(** Driver-side probes of what dma's [Ok (Bus a)] binds the driver to, with
    the certifier acting as the PCI function through [kit.bus_agent]:
    - MEM-9: dma leaves r where it lies (locate, its bytes, and a map_peer
      of r made before the dma all still show the same memory);
    - MEM-10: what each value's work wrote into r is what fn reads at the
      Bus address once the word reads the value, and what fn wrote there is
      what work submitted afterwards reads;
    - MEM-11: what fn wrote stays at the Bus address through free, stop and
      a new open of the name, no later allocation shares that memory, and
      no other open's dma gets fn (the reading of "d's function" is a guess,
      spec/decisions.md).

    Each case checks one clause and needs [kit.bus_agent] and
    [kit.bus_function]: without them it is Not_applicable, the agent named
    first (MEM-9 and MEM-11's function case make no call of the agent, but
    without it the harness does not stand for fn).  A dma of the kit's function that answers Error leaves
    nothing for these clauses to see and is Not_applicable too (whether it
    should reach is MEM-8's).  Probes.mli says how the probes call a
    driver; the seed picks sizes, offsets, bytes and rounds. *)

val cases : Case.t list
