(** The fake driver's knobs, read at each open: the configuration of the
    devices to open, and the mutant they are (each breaks one clause of
    spec/clauses.tsv).  Fake's configure and set_mutant set them. *)

(** What a device is made with. *)
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

val mib : int
val defaults : config

(** The configuration of the devices opened from now on. *)
val config : config Atomic.t

(** Every mutant: (name, clause, description, code of enum fake_mutant). *)
val mutant_table : (string * string * string * int) list

(** The C mutants only the sanitizers find (mk/sanitize.mk); same shape. *)
val fuzz_mutant_table : (string * string * string * int) list

(** {!mutant_table} without the codes. *)
val mutants : (string * string * string) list

(** {2 The codes of enum fake_mutant that the OCaml side tests} *)

val m_peer_live : int
val m_dma_vague : int
val m_image_takes_anything : int
val m_prepare_reports : int
val m_stop_drops_word : int
val m_signaled_shadow : int
val m_signaled_cached : int
val m_free_touches_new : int
val m_unlock_by_hand : int
val m_alloc_in_protect_gap : int
val m_signaled_takes_lock : int
val m_signaled_busy : int
val m_make_in_lock : int
val m_sleep_unmasks : int
val m_sleep_keeps_runtime : int
val m_lock_order_inversion : int
val m_public_unmasked : int
val m_masks_by_hand : int
val m_make_records_unmasked : int
val m_openers_cached : int
val m_prepare_reports_oom : int
val m_prepare_reserves_then_logs : int
val m_prepare_marks_then_logs : int
val m_prepare_oom_stuck : int
val m_prepare_evicts_first : int
val m_prepare_evicts_pooled : int
val m_prepare_steals_when_short : int
val m_prepare_fault_after_make : int
val m_prepare_fault_marks : int
val m_sleep_keeps_runtime_late : int
val m_sleep_keeps_runtime_busy : int
val m_sleep_keeps_runtime_short : int
val m_sleep_keeps_runtime_beside_feed : int
val m_sleep_keeps_runtime_beside_sleeper : int
val m_sleep_keeps_runtime_beside_alloc : int
val m_sleep_keeps_runtime_amid_alloc : int
val m_sleep_keeps_runtime_while_fed : int
val m_stop_forgets_images : int
val m_locate_mapping_checks_holds : int
val m_locate_waits_every_4th : int
val m_signaled_low_word : int
val m_stop_forgets_regions : int
val m_signaled_gone_after_stop : int
val m_commit_fails_beside_sleep : int
val m_locate_cache_torn : int
val m_locate_cache_self : int
val m_locate_faults_when_lost : int
val m_peer_waits_link : int
val m_alloc_grow_order : int
val m_sleep_retry_masked : int
val m_locate_checks_holds : int
val m_signaled_last_submitted : int
val m_signaled_checks_holds : int
val m_locate_logs : int
val m_peer_takes_lock : int
val m_exit_handler_unshielded : int
val m_exit_handler_half_shielded : int
val m_exit_handler_waits_unshielded : int
val m_alloc_not_reentrant : int
val m_signaled_try_lock : int
val m_signaled_locks_inside_alloc : int
val m_sleep_fault_unblocked : int
val m_sleep_wait_masked : int
val m_entry_lock_uncounted : int
val m_free_lock_uncounted : int
val m_prepare_c_lock_uncounted : int
val m_make_table_uncounted : int
val m_grow_stats_uncounted : int
val m_signaled_consumes_fault : int
val m_peer_two_opens : int
val m_locate_waits : int
val m_finaliser_unshielded : int
val m_finaliser_waits_unshielded : int
val m_lock_uncounted : int
val m_wait_drops_lock : int

(** The code of the mutant of devices opened from now on; 0 for none. *)
val mutant : int Atomic.t
