(* Drivers that die or never answer, to show that the certifier turns a
   crash or a hang into a verdict and still writes its whole report.  Each
   is hostmem with one function replaced:
   - crashing-segfault: alloc dies of a segmentation fault;
   - crashing-abort: stop aborts the process;
   - crashing-locate-spins: locate never returns;
   - crashing-stop-hangs: stop never returns;
   - crashing-exit-aborts: each opener's make registers an exit handler
     that aborts the process, after the case has ended;
   - crashing-once: the first stop of all the processes that share the
     file $CRASHING_ONCE_MARK aborts, no later one (a crash that does not
     come again when its case runs again);
   - crashing-stop-releases: stop frees every region alloc made on the
     device (STOP-5's violation), and rig's later unload of one of its
     images aborts, as a use of what stop freed may: a crash that STOP-5's
     finding explains, not its own case's clauses. *)

external segfault : unit -> unit = "crashing_segfault"
external abort : unit -> unit = "crashing_abort"
external first : string -> bool = "crashing_first"

let rec forever () = Thread.yield (); forever ()

let register name (module D : Rig_edge.Driver with type t = Hostmem.D.t and type region = Hostmem.D.region and type image = Hostmem.D.image) =
  Rig_edge_registry.register
    (module struct
      module D = D
      let name = name
      let openers = Hostmem.openers
      let kit = Hostmem.kit
    end : Rig_edge.Package)

let () =
  register "crashing-segfault"
    (module struct
      include Hostmem.D
      let alloc _ _ _ = segfault (); None
    end);
  register "crashing-abort"
    (module struct
      include Hostmem.D
      let stop _ ~fault:_ = abort ()
    end);
  register "crashing-once"
    (module struct
      include Hostmem.D
      let stop d ~fault =
        match Sys.getenv_opt "CRASHING_ONCE_MARK" with
        | Some mark when first mark -> abort ()
        | _ -> Hostmem.D.stop d ~fault
    end);
  register "crashing-stop-releases"
    (let regions = ref [] and images = ref [] and stopped = ref [] and m = Mutex.create () in
     let mine d l = List.filter_map (fun (d', x) -> if d' == d then Some x else None) l in
     (module struct
       include Hostmem.D
       let alloc d mem n =
         let r = Hostmem.D.alloc d mem n in
         Option.iter (fun r -> Mutex.protect m (fun () -> regions := (d, r) :: !regions)) r;
         r
       let free d r =
         let live = Mutex.protect m (fun () ->
             let live = List.exists (fun (_, r') -> r' == r) !regions in
             regions := List.filter (fun (_, r') -> r' != r) !regions;
             live)
         in
         if live then Hostmem.D.free d r
       let image d b =
         let i = Hostmem.D.image d b in
         Result.iter (fun i -> Mutex.protect m (fun () -> images := (d, i) :: !images)) i;
         i
       let stop d ~fault =
         let rs = Mutex.protect m (fun () ->
             stopped := d :: !stopped;
             let rs = mine d !regions in
             regions := List.filter (fun (d', _) -> d' != d) !regions;
             rs)
         in
         List.iter (fun r -> try Hostmem.D.free d r with _ -> ()) rs;
         Hostmem.D.stop d ~fault
       let unload i =
         let after_stop = Mutex.protect m (fun () ->
             List.exists (fun (d, i') -> i' == i && List.memq d !stopped) !images)
         in
         if after_stop then abort () else Hostmem.D.unload i
     end));
  register "crashing-locate-spins"
    (module struct
      include Hostmem.D
      let locate _ _ = forever ()
    end);
  register "crashing-stop-hangs"
    (module struct
      include Hostmem.D
      let stop _ ~fault:_ = forever ()
    end);
  Rig_edge_registry.register
    (module struct
      module D = Hostmem.D
      let name = "crashing-exit-aborts"
      let openers () =
        List.map
          (fun (o : Hostmem.D.t Rig_edge.opener) -> { o with make = (fun () -> at_exit abort; o.make ()) })
          (Hostmem.openers ())
      let kit = Hostmem.kit
    end : Rig_edge.Package)
