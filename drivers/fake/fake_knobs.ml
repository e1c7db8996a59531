(* The fake's knobs: its configuration and its mutants; see fake_knobs.mli. *)

type config = {
  device_bytes : int;
  mapped_bytes : int;
  pinned_bytes : int;
  queue_slots : int;
  may_block : bool;
  host_addresses : bool;
  maps_host : bool;
  commit_hold_ms : int;  (** fake_set_commit_hold *)
}

let mib = 1 lsl 20

let defaults =
  {
    device_bytes = mib;
    mapped_bytes = mib;
    pinned_bytes = mib;
    queue_slots = 64;
    may_block = false;
    host_addresses = false;
    maps_host = true;
    commit_hold_ms = 0;
  }

(* Read at each open; atomics so that no lock is needed. *)
let config = Atomic.make defaults

(* (name, clause, description, code of enum fake_mutant) *)
let mutant_table =
  [
    ("alloc-overlap", "MEM-2", "every second alloc aliases the previous region's memory", 1);
    ("freed-reused-twice", "MEM-2", "the memory of a freed Device region goes to each of the next two allocs, which then share it", 82);
    ("peer-live", "MEM-4", "peer answers false once either device is stopped or faulted", 2);
    ("peer-two-opens", "MEM-4", "peer answers false for a device opened under a name that two opens before it had (its peer table holds two per name), though map_peer maps", 83);
    ("map-peer-copy", "MEM-5", "map_peer copies r's current bytes instead of aliasing them", 3);
    ("peer-map-shared", "MEM-5", "the free of a peer mapping unmaps the device's other mappings of the same memory (one mapping per memory, shared with no count)", 104);
    ("free-keeps-charge", "MEM-2", "free of a Device region leaves its bytes charged to the device: alloc answers None for memory free gave back", 119);
    ("stop-pools-word", "STOP-5", "stop gives the device's word to a pool: the next device opened takes it and resets it to 0, while rig has not freed it", 111);
    ("stop-revokes-maps", "STOP-5", "a device's stop revokes the peer mappings other devices made of its memory: a read through one then raises Fault", 110);
    ("map-peer-one-window", "MEM-5", "a map_peer unmaps the device's previous map_peer mapping (which keeps a copy), not yet freed", 62);
    ("map-host-one-window", "MEM-7", "a map_host takes the device's one host window: the previous host mapping, not yet freed, is left with a copy of its pages", 75);
    ("map-host-remap-copies", "MEM-7", "a map_host of the pages where the device's last map_host began maps a copy of them, which the host never sees", 84);
    ("map-host-exact", "MEM-7", "map_host maps exactly n bytes, not the whole pages", 4);
    ("dma-vague", "MEM-8", "dma's Error for a malformed bus address does not name it", 5);
    ("image-takes-anything", "CODE-1", "image takes a binary without its header as empty", 6);
    ("entry-remakes", "CODE-2", "a second entry for f makes new scratch and a new handle", 7);
    ("scratch-at-launch", "CODE-2", "entry checks that f's scratch fits but makes it at f's first launch, whose submit fails when the Device memory is full by then", 109);
    ("prepare-flushes-entries", "CODE-2", "a prepare that makes f's entry drops the entries of the image's other functions (a one-slot cache), so that their next entry makes a new handle", 80);
    ("entry-leaks", "CODE-3", "entry keeps the scratch it could allocate on No_memory", 8);
    ("entry-full-no-memory", "CODE-3", "entry answers No_memory also when the free Device memory is exactly what f's scratch needs", 71);
    ( "entry-too-big-no-memory",
      "CODE-5",
      "entry answers No_memory instead of Invalid_argument for more than the device has",
      9 );
    ("entry-too-big-twice", "CODE-5", "entry raises Invalid_argument only for more than twice the device's memory, No_memory below", 72);
    ("prepare-reports", "CODE-6", "prepare of an absent function raises Not_found", 10);
    ("prepare-reports-oom", "CODE-6", "prepare raises Failure when the entry it makes finds no memory for the function's scratch", 48);
    ("prepare-restarts", "CODE-7", "prepare of an f with an entry makes (and leaks) its scratch again", 11);
    ("prepare-restarts-after-unload", "CODE-7", "after an image of the device is unloaded, the next prepare of an f with an entry makes (and leaks) its scratch again", 81);
    ("prepare-restarts-prepared", "CODE-7", "a prepare of an f whose entry a prepare made, and no entry asked for yet, makes (and leaks) its scratch again", 87);
    ("prepare-reserves-then-logs", "CODE-7", "prepare reserves f's scratch, writes a line of trace (an allocation), then hands the reservation to the entry it makes: an asynchronous exception at the trace leaves the scratch taken for good", 88);
    ("prepare-marks-then-logs", "CODE-7", "prepare records f as started, writes a line of trace (an allocation), then makes the entry; a prepare of a recorded f does nothing: an asynchronous exception at the trace leaves f recorded with nothing made", 89);
    ("entry-keeps-scratch", "CODE-3", "entry takes f's scratch, then a 256-byte table f also needs; when only the scratch fits, it answers No_memory and keeps the scratch", 90);
    ("prepare-fault-after-make", "CODE-7", "prepare makes f's entry, then looks at the device and raises Fault if its work faulted: the entry stays made by a prepare that raised", 92);
    ("prepare-fault-marks", "CODE-7", "prepare records f (by name and scratch, in the process) as being made, raises Fault if the device's work faulted, and clears the record once f is made; a recorded f is not made again: after that Fault, no device of the process makes f through prepare", 93);
    ("prepare-evicts-first", "CODE-7", "prepare drops the image's other prepared entries that no entry asked for (a one-program cache), writes a line of trace (an allocation), then makes f: an asynchronous exception at the trace leaves the others' programs dropped", 95);
    ("prepare-evicts-pooled", "CODE-7", "prepare-evicts-first whose cache keeps the dropped programs' memory in a pool of its own until unload: an asynchronous exception at the trace leaves the others' programs dropped, so that their entries make them again", 96);
    ("prepare-steals-when-short", "CODE-7", "prepare-evicts-first only where f's scratch does not fit in free Device memory: an asynchronous exception at the trace, with memory short, leaves the others' programs given back", 97);
    ("prepare-oom-stuck", "CODE-6", "prepare marks f as being made and clears the mark only when the making succeeds; the next entry of f waits for the mark to clear, for good after a making that found no memory", 91);
    ("sleep-no-early-return", "TIME-3", "sleep waits still_ms even when the word already differs", 12);
    ("sleep-overstays", "TIME-4", "sleep ignores still_ms and waits for the word (3000 ms cap)", 13);
    ("sleep-settles", "TIME-3", "sleep first waits 50 ms (for completions to settle), also when the word already differs", 60);
    ("sleep-waits-twice", "TIME-4", "a sleep that saw no change in still_ms waits still_ms once more", 61);
    ("sleep-consumes-fault", "TIME-5", "only the first sleep after a fault raises Fault", 14);
    ("signaled-consumes-fault", "TIME-5", "a signaled that reads the word of a faulted device takes the fault as reported: later sleeps return without raising Fault", 79);
    ("sleep-word-first", "TIME-5", "sleep returns when the word differs from seen before it looks for a fault", 68);
    ("stop-waits", "STOP-2", "stop waits for the running work to finish (3000 ms cap)", 15);
    ("stop-drains-briefly", "STOP-2", "stop waits for the running work to finish, 1000 ms at most", 54);
    ("stop-no-last-value", "STOP-3", "stop never writes the last value when no work runs", 16);
    ("stop-early-value", "STOP-3", "stop writes the last value at once, while the running spin and the work queued behind it go on to their end", 85);
    ("stop-value-mid-part", "STOP-3", "stop writes the last value at once, while the running part (a large Fill mid-write) goes on to its end; the queued work is dropped", 86);
    ("failed-submit-forgotten", "STOP-3", "a submit that fails does not record its value, so stop writes the one before", 67);
    ("stop-runs-encoded", "STOP-4", "stop runs the work encoded but not committed", 17);
    ("stop-drops-word", "STOP-5", "stop releases the word: signaled answers 0 after it", 18);
    (* OCaml side only (fake_core.c ignores these codes). *)
    ("stop-forgets-regions", "STOP-5", "stop takes the regions alloc made for released: rig's free of one after stop raises Invalid_argument", 98);
    ("signaled-gone-after-stop", "STOP-5", "after stop, signaled reads the word once, then raises Fault (what it reads released)", 99);
    ("late-word-write", "STOP-6", "the running spin's value lands after stop wrote the last one", 19);
    ("free-touches-new", "STOP-8", "free after stop charges the newest device of the name", 20);
    ("grow-unused", "QUEUE-2", "grow answers Grown having made nothing, so room answers RIG_GROW again", 21);
    ("room-growers-in-order", "QUEUE-2", "room serves the threads that answered RIG_GROW in the order they first did: one whose grow answered Grown gets RIG_GROW again while an older one's grow was Short", 106);
    ("room-no-hold", "QUEUE-2", "a room that answers RIG_GROW holds none of the free slots, so that another thread's room takes those its growth counted on", 73);
    ("grow-short-drops", "QUEUE-3", "grow answering Short loses what it made (still charged)", 22);
    ("grow-writes-queue", "QUEUE-1", "grow puts the slots it makes straight into the pool room reads", 24);
    ("grow-publishes-rest", "QUEUE-1", "grow makes whole chunks of 16 slots, keeps for its thread what it needs and puts the rest straight into the pool room reads", 103);
    ("signaled-low-word", "TIME-1", "signaled answers the word's low 32 bits", 49);
    ("signaled-shadow", "TIME-1", "signaled answers the word as the last sleep saw it, not the word", 23);
    ("signaled-cached", "TIME-1", "signaled answers a copy of the word it refreshes on every 8th call only (a cheap read for a hot path)", 129);
    ("sleep-awaits-commit", "TIME-6", "sleep first waits until no commit of the device runs (3000 ms cap)", 45);
    ("submit-awaits-sleep", "TIME-6", "submit and commit first wait until no sleep of the device waits (3000 ms cap)", 66);
    ("commit-fails-beside-sleep", "TIME-6", "commit fails while a sleep of the device waits (OCaml side only)", 100);
    (* OCaml side only (fake_core.c ignores these codes): the locks of alloc. *)
    ("unlock-by-hand", "ASYNC-2", "alloc counts and takes a lock by hand and gives it back after the call, not in a handler", 30);
    ("alloc-in-protect-gap", "ASYNC-2", "alloc allocates between the take of its lock and the handler that gives it back", 31);
    ("signaled-takes-lock", "LOCK-5", "signaled takes the lock alloc holds while it runs", 32);
    ("exit-handler-unshielded", "SIG-7", "each open registers an exit handler that logs the device (allocating) without rig_shield", 102);
    ("exit-handler-half-shielded", "SIG-7", "each open registers an exit handler that logs the device inside rig_shield, then formats a summary line outside it", 124);
    ("exit-handler-waits-unshielded", "SIG-7", "each open registers an exit handler that logs the device inside rig_shield, then waits 1 ms (a wait of the primitives) outside it", 125);
    ("sleep-retry-masked", "SIG-2", "sleep waits the first quarter of still_ms in a wait; the word unmoved, it blocks for the rest outside any wait, with rig's signals blocked", 116);
    ("alloc-grow-order", "LOCK-8", "alloc takes two driver locks in one order, grow in the other", 115);
    ("locate-faults-when-lost", "LOCK-6", "locate raises Fault for a region of a device whose work faulted (or that stopped)", 113);
    ("peer-waits-link", "LOCK-6", "peer sleeps (Thread.delay, no wait of the primitives) until 250 ms after the later of the two devices' opens, when their link is known", 114);
    ("word-halves", "TIME-1", "the device writes the word as two 32-bit halves, low first, 500 us apart (busy): signaled can read half a write", 121);
    ("signaled-last-submitted", "TIME-1", "signaled answers the last value given to submit, not the word: ahead of the work", 118);
    ("signaled-checks-holds", "LOCK-5", "signaled starts as make does: it raises Invalid_argument while rig_holds () is not 0", 120);
    ("peer-takes-lock", "LOCK-5", "peer reads the peer table under a counted lock of its own (never held long)", 123);
    ("locate-logs", "LOCK-6", "locate writes a line to stderr and flushes it: it blocks while the pipe is full", 122);
    ("locate-checks-holds", "LOCK-5", "locate starts as make does: it raises Invalid_argument while rig_holds () is not 0", 117);
    ("locate-mapping-checks-holds", "LOCK-5", "locate of a peer or host mapping (not of other regions) starts as make does: it raises Invalid_argument while rig_holds () is not 0", 132);
    ("locate-waits-every-4th", "LOCK-6", "every 4th locate (process-wide) enters a wait (a statistics flush); the others answer at once", 133);
    ("locate-cache-self", "LOCK-9", "locate keeps a one-entry cache per thread that it fills itself on a miss, its key and value written with an allocation between them: a locate from a callback inside locate leaves one region's key beside another's place", 112);
    ("locate-cache-torn", "LOCK-9", "locate keeps a one-entry cache per thread that alloc primes, its key and value written with an allocation between them: a locate from a callback there leaves one region's key beside another's place", 101);
    ("signaled-try-lock", "LOCK-5", "signaled counts its reads under a try-lock of its own (counted with rig_hold; it never blocks)", 64);
    ("signaled-locks-inside-alloc", "LOCK-5", "signaled takes a counted lock of its own (never held long) only on a thread inside alloc, where it reads the word under the lock that alloc's bookkeeping would use: a signaled from a callback of alloc's takes it", 127);
    ("alloc-not-reentrant", "LOCK-9", "alloc takes no lock but raises when a thread already inside alloc calls it (from a callback)", 63);
    ("signaled-busy", "LOCK-9", "signaled raises while an alloc is running (a device channel it shares, no lock)", 33);
    ("openers-cached", "LOCK-4", "the capability keeps its list from the first call and answers later calls from it without the check of rig_holds ()", 47);
    ("make-in-lock", "LOCK-4", "an opener's make opens a device also when called inside a lock", 34);
    ("sleep-unmasks", "SIG-2", "sleep unblocks every signal for its whole run, not only around its wait", 35);
    ("sleep-wait-masked", "SIG-2", "sleep blocks in its C step without Rig_edge_primitives.wait: rig's signals stay blocked for the whole wait", 69);
    ("sleep-fault-unblocked", "SIG-2", "sleep's wait calls rig_block after its blocking step only when it saw no fault: a sleep that raises Fault leaves signals unblocked", 65);
    ("sleep-keeps-runtime", "SIG-3", "sleep's blocking step keeps the OCaml runtime", 36);
    ("sleep-keeps-runtime-late", "SIG-3", "sleep's blocking step releases the OCaml runtime for the first half of still_ms, then, the word unmoved, waits out the rest with it kept", 94);
    ("sleep-keeps-runtime-short", "SIG-3", "sleep's blocking step keeps the OCaml runtime when still_ms is 5 or less (too short to block for, it spins); longer sleeps release it", 130);
    ("sleep-keeps-runtime-busy", "SIG-3", "sleep's blocking step keeps the OCaml runtime while the device has work given and not done (it polls for a near completion); on an idle device it releases it", 128);
    ("sleep-keeps-runtime-beside-feed", "SIG-3", "sleep's blocking step keeps the OCaml runtime when another thread called room, submit or commit (of any device) in the last 2 ms (\"work is being fed, poll for it\"); otherwise it releases it", 131);
    ("sleep-keeps-runtime-beside-sleeper", "SIG-3", "sleep's blocking step keeps the OCaml runtime while another thread sleeps on the same device (the first sleeper \"owns the interrupt\", the others poll); a lone sleeper releases it", 134);
    ("sleep-keeps-runtime-beside-alloc", "SIG-3", "sleep's blocking step keeps the OCaml runtime when another thread called alloc or free (of any device) in the last 2 ms (\"memory is moving, completion soon\"); otherwise it releases it", 135);
    ("sleep-keeps-runtime-amid-alloc", "SIG-3", "sleep's blocking step keeps the OCaml runtime while another thread is inside alloc or free (of any device) when a 1-ms slice starts; otherwise it releases it: a sleep that starts amid such a call holds the caller there until still_ms passed", 136);
    ("stop-forgets-images", "STOP-5", "stop takes the images loaded for released: rig's unload of one after stop raises Invalid_argument (OCaml side only)", 138);
    ("stop-revokes-imports", "STOP-5", "the stop of a device that mapped another device's region by map_peer revokes that region: its own device's reach of it raises Fault", 139);
    ("sleep-keeps-runtime-while-fed", "SIG-3", "sleep's blocking step keeps the OCaml runtime while another thread's room on the device answered Room and its commit has not come (\"the queue is being fed, poll for it\"); otherwise it releases it", 137);
    ("worker-unmasked", "SIG-8", "the device's worker thread leaves signals unblocked", 37);
    ("lock-order-inversion", "LOCK-8", "alloc takes two driver locks in one order, free in the other", 38);
    ("public-unmasked", "SIG-6", "its functions that start with the check of rig_holds () leave signals as the caller had them", 39);
    ("make-records-unmasked", "SIG-6", "an opener's make records the device it opened in a table after its masked block, with signals unblocked", 46);
    ("masks-by-hand", "SIG-9", "its functions block signals with Thread.sigmask, not through Rig_edge_primitives", 40);
    ("locate-waits", "LOCK-6", "locate enters a wait (for the device's channel) before it answers", 41);
    ("finaliser-unshielded", "SIG-7", "the finaliser that notes a device dropped without stop runs without rig_shield", 42);
    ("finaliser-waits-unshielded", "SIG-7", "the finaliser that notes a device dropped without stop notes it inside rig_shield, then waits 1 ms (a wait of the primitives) outside it", 126);
    ("entry-lock-uncounted", "LOCK-3", "entry holds a mutex of its own (its cache's) while its OCaml code runs, without counting it", 70);
    ("free-lock-uncounted", "LOCK-3", "free holds a mutex of its own (its statistics') while its OCaml code records what it freed, without counting it", 74);
    ("prepare-c-lock-uncounted", "LOCK-3", "prepare makes an entry not yet made under a C mutex of its own, held uncounted while its OCaml trace hook runs", 76);
    ("make-table-uncounted", "LOCK-3", "an opener's make records the device in a table under a mutex it holds uncounted while its OCaml code runs (alloc takes that mutex, counted)", 77);
    ("grow-stats-uncounted", "LOCK-3", "grow keeps statistics under a mutex it holds uncounted while its OCaml code runs (alloc takes that mutex, counted)", 78);
    ("lock-uncounted", "LOCK-3", "alloc holds a mutex of its own while its OCaml code runs, without counting it (rig_hold)", 43);
    ("wait-drops-lock", "ASYNC-2", "sleep gives its mutex back around its wait by hand and takes it again after: an exception that ends the wait skips the re-take, and its handler gives back a mutex it does not hold", 44);
    (* The bus (fake_bus_* of fake_core.c). *)
    ("dma-moves-high", "MEM-9", "dma moves a region allocated with over half the Device budget in use (beyond what fn reaches) to new memory", 107);
    ("dma-moves", "MEM-9", "dma moves the region's bytes to new memory that fn reaches, and answers Ok", 50);
    ("dma-stale", "MEM-10", "fn reaches a copy of the region taken at dma, never brought up to date either way", 51);
    ("free-sets-aside", "MEM-11", "a dma'd region's memory, freed, stays charged and is set aside; an alloc the Device budget refuses takes it back, still on the bus", 108);
    ("free-unpins", "MEM-11", "free of a dma'd region gives its memory, still on the bus, to the next alloc", 52);
    ("stop-releases-function", "MEM-11", "stop lets another open's dma take the function a dma of the device kept", 53);
  ]

(* The mutants of enum fake_mutant that only the sanitizers (mk/sanitize.mk)
   find, not the harness's probes: kept out of mutant_table, since selftest
   runs every mutant there against the cases of its clause and would report
   the word race (no functional effect) as missed and the use after free as
   a crash, or as nothing.  Same shape and codes. *)
let fuzz_mutant_table =
  [
    ("word-race", "TIME-1", "the worker writes the word and signaled reads it with plain accesses (a data race)", 25);
    ("stop-frees-regions", "STOP-5", "stop frees the regions rig made, so rig's later free uses them after free", 26);
  ]

let mutants = List.map (fun (n, c, d, _) -> (n, c, d)) mutant_table
let m_peer_live = 2
let m_dma_vague = 5
let m_image_takes_anything = 6
let m_prepare_reports = 10
let m_stop_drops_word = 18
let m_signaled_shadow = 23
let m_signaled_cached = 129
let m_free_touches_new = 20
let m_unlock_by_hand = 30
let m_alloc_in_protect_gap = 31
let m_signaled_takes_lock = 32
let m_signaled_busy = 33
let m_make_in_lock = 34
let m_sleep_unmasks = 35
let m_sleep_keeps_runtime = 36
let m_lock_order_inversion = 38
let m_public_unmasked = 39
let m_masks_by_hand = 40
let m_make_records_unmasked = 46
let m_openers_cached = 47
let m_prepare_reports_oom = 48
let m_signaled_low_word = 49
let m_stop_forgets_regions = 98
let m_signaled_gone_after_stop = 99
let m_commit_fails_beside_sleep = 100
let m_locate_cache_torn = 101
let m_locate_cache_self = 112
let m_locate_faults_when_lost = 113
let m_peer_waits_link = 114
let m_alloc_grow_order = 115
let m_sleep_retry_masked = 116
let m_locate_checks_holds = 117
let m_signaled_last_submitted = 118
let m_signaled_checks_holds = 120
let m_locate_logs = 122
let m_peer_takes_lock = 123
let m_exit_handler_unshielded = 102
let m_exit_handler_half_shielded = 124
let m_exit_handler_waits_unshielded = 125
let m_alloc_not_reentrant = 63
let m_signaled_try_lock = 64
let m_signaled_locks_inside_alloc = 127
let m_sleep_fault_unblocked = 65
let m_sleep_wait_masked = 69
let m_entry_lock_uncounted = 70
let m_free_lock_uncounted = 74
let m_prepare_c_lock_uncounted = 76
let m_make_table_uncounted = 77
let m_grow_stats_uncounted = 78
let m_signaled_consumes_fault = 79
let m_peer_two_opens = 83
let m_prepare_reserves_then_logs = 88
let m_prepare_marks_then_logs = 89
let m_prepare_oom_stuck = 91
let m_prepare_fault_after_make = 92
let m_prepare_fault_marks = 93
let m_sleep_keeps_runtime_late = 94
let m_sleep_keeps_runtime_busy = 128
let m_sleep_keeps_runtime_short = 130
let m_sleep_keeps_runtime_beside_feed = 131
let m_sleep_keeps_runtime_beside_sleeper = 134
let m_sleep_keeps_runtime_beside_alloc = 135
let m_sleep_keeps_runtime_amid_alloc = 136
let m_sleep_keeps_runtime_while_fed = 137
let m_stop_forgets_images = 138
let m_locate_mapping_checks_holds = 132
let m_locate_waits_every_4th = 133
let m_prepare_evicts_first = 95
let m_prepare_evicts_pooled = 96
let m_prepare_steals_when_short = 97
let m_locate_waits = 41
let m_finaliser_unshielded = 42
let m_finaliser_waits_unshielded = 126
let m_lock_uncounted = 43
let m_wait_drops_lock = 44

(* The code of the mutant of devices opened from now on; 0 for none. *)
let mutant = Atomic.make 0
