/* fake_core.h: the fake rig device, in C, for the reference fake driver.
 *
 * A fake device is host memory with per-kind byte budgets, a queue of
 * submission parts run in order by a worker pthread, a 64-bit timeline
 * word, and loaded images whose functions spin, fault, hang, fill or do
 * nothing.  fake_stubs.c exposes it to OCaml (fake.ml); rig calls its queue
 * functions (fake_queue_fns) directly.
 *
 * Locking: each device has one mutex; no function takes two device mutexes
 * at once, so the driver's locks have a single order (LOCK-8).  Every take
 * is counted with rig_hold/rig_give (LOCK-3).
 */
#ifndef FAKE_CORE_H
#define FAKE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "rig_edge.h"

/* Memory kinds, in the order of Rig_edge.memory's constructors. */
enum fake_kind { FAKE_DEVICE = 0, FAKE_MAPPED = 1, FAKE_PINNED = 2 };
#define FAKE_KINDS 3

/* Ops of an image's functions.  A submit of a launch of a FAKE_REFUSE
 * function fails (kit_more's refused_launch). */
enum fake_op { FAKE_NOP = 0, FAKE_SPIN, FAKE_FAULT, FAKE_HANG, FAKE_FILL, FAKE_REFUSE };

/* Each mutant breaks one clause (the list, with clause IDs, is in fake.ml,
 * whose codes must match these). */
enum fake_mutant {
  FAKE_M_NONE = 0,
  FAKE_M_ALLOC_OVERLAP,          /* MEM-2 */
  FAKE_M_PEER_LIVE,              /* MEM-4 (OCaml side) */
  FAKE_M_MAP_PEER_COPY,          /* MEM-5 */
  FAKE_M_MAP_HOST_EXACT,         /* MEM-7 */
  FAKE_M_DMA_VAGUE,              /* MEM-8 (OCaml side) */
  FAKE_M_IMAGE_TAKES_ANYTHING,   /* CODE-1 (OCaml side) */
  FAKE_M_ENTRY_REMAKES,          /* CODE-2 */
  FAKE_M_ENTRY_LEAKS,            /* CODE-3 */
  FAKE_M_ENTRY_TOO_BIG_NO_MEMORY,/* CODE-5 */
  FAKE_M_PREPARE_REPORTS,        /* CODE-6 (OCaml side) */
  FAKE_M_PREPARE_RESTARTS,       /* CODE-7 */
  FAKE_M_SLEEP_NO_EARLY_RETURN,  /* TIME-3 */
  FAKE_M_SLEEP_OVERSTAYS,        /* TIME-4 */
  FAKE_M_SLEEP_CONSUMES_FAULT,   /* TIME-5 */
  FAKE_M_STOP_WAITS,             /* STOP-2 */
  FAKE_M_STOP_NO_LAST_VALUE,     /* STOP-3 */
  FAKE_M_STOP_RUNS_ENCODED,      /* STOP-4 */
  FAKE_M_STOP_DROPS_WORD,        /* STOP-5 (OCaml side) */
  FAKE_M_LATE_WORD_WRITE,        /* STOP-6 */
  FAKE_M_FREE_TOUCHES_NEW,       /* STOP-8 (OCaml side) */
  FAKE_M_GROW_UNUSED,            /* QUEUE-2 */
  FAKE_M_GROW_SHORT_DROPS,       /* QUEUE-3 */
  FAKE_M_SIGNALED_SHADOW,        /* TIME-1 (OCaml side) */
  FAKE_M_GROW_WRITES_QUEUE,      /* QUEUE-1: grow puts its slots straight into the free pool */
  /* Found by the sanitizers, not by the harness's probes: */
  FAKE_M_WORD_RACE,              /* TIME-1: plain (non-atomic) word write and read: TSan */
  FAKE_M_STOP_FREES_REGIONS,     /* STOP-5: stop frees rig's regions: use after free (ASan) */
  /* 30..36 live on the OCaml side (fake.ml). */
  FAKE_M_WORKER_UNMASKED = 37,   /* SIG-8: the worker thread leaves signals unblocked */
  FAKE_M_SLEEP_AWAITS_COMMIT = 45, /* TIME-6: sleep first waits for the commits in flight */
  /* The bus (fake_bus_*): */
  FAKE_M_DMA_MOVES = 50,         /* MEM-9: dma moves r's bytes to new memory */
  FAKE_M_DMA_STALE = 51,         /* MEM-10: fn reaches a copy taken at dma, never synced */
  FAKE_M_FREE_UNPINS = 52,       /* MEM-11: free gives dma'd memory to the next alloc */
  FAKE_M_STOP_RELEASES_FN = 53,  /* MEM-11: stop lets another open take d's function */
  FAKE_M_STOP_DRAINS_BRIEFLY = 54, /* STOP-2: stop waits for the running work, 1000 ms at most */
  FAKE_M_SLEEP_SETTLES = 60,     /* TIME-3: sleep waits 50 ms before it looks at the word */
  FAKE_M_MAP_PEER_ONE_WINDOW = 62, /* MEM-5: a map_peer unmaps the device's previous peer mapping */
  FAKE_M_SLEEP_WAITS_TWICE = 61, /* TIME-4: a sleep that saw nothing in still_ms waits still_ms again */
  FAKE_M_SUBMIT_AWAITS_SLEEP = 66, /* TIME-6: submit and commit first wait until no sleep of the device waits */
  FAKE_M_FAILED_SUBMIT_FORGOTTEN = 67, /* STOP-3: a submit that fails does not record its value */
  FAKE_M_SLEEP_WORD_FIRST = 68,  /* TIME-5: sleep returns on a word that differs before it looks for a fault */
  FAKE_M_ENTRY_FULL_NO_MEMORY = 71, /* CODE-3: entry answers No_memory when the free memory is exactly f's scratch */
  FAKE_M_ENTRY_TOO_BIG_TWICE = 72, /* CODE-5: Invalid_argument only past twice the device's memory */
  FAKE_M_ROOM_NO_HOLD = 73,      /* QUEUE-2: a room that answers RIG_GROW holds none of the free slots */
  FAKE_M_MAP_HOST_ONE_WINDOW = 75, /* MEM-7: a map_host unmaps the device's previous host mapping */
  FAKE_M_PREPARE_C_LOCK_UNCOUNTED = 76, /* LOCK-3 (stubs only): prepare holds a C mutex uncounted across OCaml code */
  FAKE_M_PREPARE_FLUSHES_ENTRIES = 80, /* CODE-2: a prepare that makes f's entry drops the image's other entries */
  FAKE_M_PREPARE_RESTARTS_AFTER_UNLOAD = 81, /* CODE-7: after an unload, a prepare of an f with an entry makes it again */
  FAKE_M_FREED_REUSED_TWICE = 82, /* MEM-2: the memory of a freed region goes to the next two allocs */
  FAKE_M_MAP_HOST_REMAP_COPIES = 84, /* MEM-7: a map_host of the pages the last one began at maps a copy */
  FAKE_M_STOP_EARLY_VALUE = 85,  /* STOP-3: stop writes the last value at once; the running and queued work go on */
  FAKE_M_STOP_VALUE_MID_PART = 86, /* STOP-3: stop writes the last value at once; the running part goes on to its end */
  FAKE_M_PREPARE_RESTARTS_PREPARED = 87, /* CODE-7: a prepare of an f whose entry only a prepare made makes it again */
  FAKE_M_ENTRY_KEEPS_SCRATCH = 90, /* CODE-3: entry takes f's scratch, then is refused the table it also needs, and keeps the scratch */
  FAKE_M_GROW_PUBLISHES_REST = 103, /* QUEUE-1: grow makes whole chunks of 16 slots and puts what its thread does not need into the free pool */
  FAKE_M_PEER_MAP_SHARED = 104, /* MEM-5: the free of a peer mapping unmaps the device's other mappings of the same memory */
  FAKE_M_DMA_MOVES_HIGH = 107,  /* MEM-9: dma moves a region allocated with over half the Device budget in use */
  FAKE_M_FREE_SETS_ASIDE = 108, /* MEM-11: a dma'd region's memory, freed, stays charged and aside; an alloc the budget refuses takes it */
  FAKE_M_SCRATCH_AT_LAUNCH = 109,  /* CODE-2: entry checks the room but makes f's scratch at its first launch, whose submit fails without room */
  FAKE_M_ROOM_GROWERS_IN_ORDER = 106, /* QUEUE-2: room answers RIG_GROW to a grown thread while a thread that asked before it is still short */
  FAKE_M_STOP_REVOKES_MAPS = 110, /* STOP-5: a device's stop revokes the peer mappings other devices made of its memory */
  FAKE_M_STOP_POOLS_WORD = 111, /* STOP-5: stop gives the word to a pool; the next open takes it and resets it to 0 */
  FAKE_M_FREE_KEEPS_CHARGE = 119, /* MEM-2: free of a Device region leaves its bytes charged: alloc answers None for memory freed */
  FAKE_M_WORD_HALVES = 121, /* TIME-1: the word is written as two 32-bit halves, low first, 500 us apart: signaled can read half a write */
  FAKE_M_STOP_REVOKES_IMPORTS = 139 /* STOP-5: an importer's stop revokes the regions it mapped by map_peer, at their own device too */
};

/* Bytes of Device memory a queue slot (one part) costs. */
#define FAKE_PART_BYTES 64

struct fake_config {
  uint64_t budget[FAKE_KINDS]; /* bytes per kind; 0: the device has none */
  uint32_t queue_slots;        /* initial queue capacity, in parts */
  int mutant;                  /* enum fake_mutant */
};

struct fake_dev;
struct fake_region;
struct fake_image;

/* ------------------------------------------------------------ devices */

/* A new device with its worker running, or NULL.  The caller owns one
 * reference (fake_dev_release); the worker owns another until it exits. */
struct fake_dev *fake_dev_open(const struct fake_config *cfg);
void fake_dev_release(struct fake_dev *d);

/* The word, read with acquire order.  Takes no lock. */
uint64_t fake_dev_word(struct fake_dev *d);
/* The last value given to submit (the signaled-last-submitted mutant's answer). */
uint64_t fake_dev_last_value(struct fake_dev *d);

/* Whether the device stopped or faulted.  Takes no lock. */
int fake_dev_dead(struct fake_dev *d);

/* Bytes of kind k in use (regions, scratch, queue slots). */
uint64_t fake_dev_used(struct fake_dev *d, int kind);

/* Adds delta to the bytes of kind k in use (free-touches-new mutant). */
void fake_dev_charge(struct fake_dev *d, int kind, int64_t delta);

/* The device's word region, made at open. */
struct fake_region *fake_dev_word_region(struct fake_dev *d);

/* ------------------------------------------------------------ regions */

struct fake_region *fake_alloc(struct fake_dev *d, int kind, size_t n);
struct fake_region *fake_map_peer(struct fake_dev *d, struct fake_region *r);
/* p is page-aligned; NULL if not or on no memory. */
struct fake_region *fake_map_host(struct fake_dev *d, void *p, size_t n);
void fake_free(struct fake_dev *d, struct fake_region *r);

uint64_t fake_region_handle(const struct fake_region *r);
size_t fake_region_size(const struct fake_region *r);
/* Host copies; 0 on success, -1 out of bounds.  Take no lock. */
int fake_region_read(struct fake_region *r, size_t off, void *into, size_t len);
/* Whether r is a peer mapping its exporter's stop revoked (the
 * stop-revokes-maps mutant); rig's reads of it then fault. */
int fake_region_revoked(struct fake_region *r);
int fake_region_write(struct fake_region *r, size_t off, const void *from, size_t len);

/* ---------------------------------------------------------------- bus */

/* The machine's bus, process-wide: a PCI function reaches a region through
 * a window of its bus addresses that dma opens (fake_bus_dma).  A window
 * holds a reference on the region's memory and is never closed, so the
 * memory stays where it is, out of every later allocation, until the
 * process exits (MEM-11); fn's bus addresses are never handed out twice.
 * The first open whose dma answered Ok for fn keeps fn (MEM-11's "d's
 * function", as spec/decisions.md reads it). */

#define FAKE_BUS_KEPT (-1)   /* fn is kept by another open */
#define FAKE_BUS_NOMEM (-2)
/* fn reaches r: 0 and its bus address in *addr (the same for the same r and
 * fn), or one of the codes above.  fn is a bus address the caller checked,
 * at most 15 characters. */
int fake_bus_dma(struct fake_dev *d, struct fake_region *r, const char *fn, uint64_t *addr);
/* What fn reads and writes by DMA at addr: 0, or -1 when [addr, addr+len)
 * is not within one window of fn.  The harness's bus agent. */
int fake_bus_read(const char *fn, uint64_t addr, void *into, size_t len);
int fake_bus_write(const char *fn, uint64_t addr, const void *from, size_t len);

/* ------------------------------------------------------------- images */

/* An image of n functions (names copied), or NULL on no memory. */
struct fake_image *fake_image_load(struct fake_dev *d, size_t n,
                                   const char *const *names,
                                   const uint64_t *scratch, const int *ops);

#define FAKE_ENTRY_TOO_BIG (-1)
#define FAKE_ENTRY_NO_MEMORY (-2)
/* The entry handle (> 0) of function i, or one of the codes above. */
int64_t fake_entry(struct fake_image *im, size_t i);
/* Makes the entry of function i if it has none; reports nothing. */
void fake_prepare(struct fake_image *im, size_t i);
/* Drops the entries of im's functions other than i that a prepare made and
 * no entry asked for, giving their scratch back unless keep_memory (kept
 * memory is given back at unload); if only_if_short, only where function i
 * has no entry and its scratch does not fit (the prepare-evicts-* and
 * prepare-steals-when-short mutants). */
void fake_evict_prepared(struct fake_image *im, size_t i, int keep_memory, int only_if_short);
/* Whether function i of im has its entry made (prepare-c-lock-uncounted). */
int fake_has_entry(struct fake_image *im, size_t i);
uint64_t fake_image_scratch(const struct fake_image *im, size_t i);
void fake_unload(struct fake_image *im);

/* ------------------------------------------------- queues and timeline */

extern const struct rig_queue_fns fake_queue_fns;

/* 0 for Grown, else the bytes the growth still lacks. */
uint64_t fake_grow(struct fake_dev *d);

/* 0 when it returns, 1 when the device faulted (fake_fault_reason). */
int fake_sleep(struct fake_dev *d, uint64_t seen, int64_t still_ms);
void fake_fault_reason(struct fake_dev *d, char *buf, size_t len);

void fake_stop(struct fake_dev *d);

/* ------------------------------------- testing hooks (fuzz/, C only) */

/* Devices opened from now on (on any thread) start no worker thread when
 * on != 0: their committed work runs only when the caller asks, one part at
 * a time, with fake_debug_work_begin (takes the next part off the run queue
 * and runs it: 1, or 0 if nothing may run) and fake_debug_work_end (ends
 * it: writes its value if it ends a submission, and the last value if stop
 * came while it ran, as the worker does).  Between the two the device sees
 * a part running, as stop would.  This makes a run replayable: the fuzzer's
 * scheduler decides when work runs.  Not reachable from OCaml. */
/* Each commit of d, once it has committed, holds its caller until d stops
 * or ms milliseconds pass: a slow commit of a device that declares
 * may_block, so that rig has a C call in flight to count (CNT-3). */
void fake_set_commit_hold(struct fake_dev *d, int64_t ms);

void fake_debug_manual_worker(int on);
int fake_debug_work_begin(struct fake_dev *d);
void fake_debug_work_end(struct fake_dev *d);

/* A hash of everything the queue functions (room, submit, commit) read,
 * but a thread's growth (the slots grow made and the next room of that
 * thread puts into the queues) and its missing count (read by grow only):
 * QUEUE-1 demands that grow leaves it unchanged. */
uint64_t fake_debug_queue_digest(struct fake_dev *d);

/* --------------------------------------------------- fault injection */

enum fake_inj_fn { FAKE_INJ_SUBMIT = 0, FAKE_INJ_COMMIT = 1, FAKE_INJ_ROOM = 2 };
enum fake_inj_mode { FAKE_INJ_NONE = 0, FAKE_INJ_FAIL = 1, FAKE_INJ_FAULT = 2 };
/* The nth call of fn from now fails (FAIL), or faults the device with why
 * and fails (FAULT); for ROOM, either answers RIG_GROW however much room
 * there is.  mode NONE clears. */
void fake_inject(int fn, long nth, int mode, const char *why);

#endif /* FAKE_CORE_H */
