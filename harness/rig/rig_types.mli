(** The reference rig's records of devices, buffers and images, shared by
    the calls' discipline ({!Rig_calls}) and the program's calls ({!Rig}).
    ['t], ['r] and ['i] are the driver's device, region and image.  Types
    only: there is no implementation. *)

type ('t, 'r, 'i) device = {
  d : 't;
  name : string;
  facts : 'r Rig_edge.facts;
  mutable in_flight : int;
  mutable lost : string option;
  mutable fault : string option;  (** for stop: a Fault's text or the hang bound *)
  mutable stopped : bool;
  mutable released : bool;
  mutable word_freed : bool;
  mutable drained : bool;  (** stopped, and its word read the last value: its memory may go *)
  mutable next_value : int;
  mutable last_submitted : int;
  mutable observed : int;
  mutable last_move : float;
  mutable buffers : ('t, 'r, 'i) buffer list;  (** live: not yet given back to the driver *)
  mutable images : ('t, 'r, 'i) image list;
  mutable kept : (int * Obj.t list) list;  (** Rig.Submission.make: values work keeps alive *)
}

and ('t, 'r, 'i) buffer = {
  b : 'r;
  dev : ('t, 'r, 'i) device;
  bsize : int;
  kind : ('t, 'r, 'i) kind;
  mutable user_freed : bool;
  mutable freed : bool;
  mutable maps : int;  (** live map_peer buffers over it *)
  mutable last_use : int;  (** the value of the last work that uses it *)
}

and ('t, 'r, 'i) kind = Allocated | Peer_of of ('t, 'r, 'i) buffer | Host
and ('t, 'r, 'i) image = { i : 'i; idev : ('t, 'r, 'i) device; mutable unloaded : bool }
