/* rig_fuzz_driver.h: what the room/grow fuzzer (room_grow_fuzz.c) needs of
 * a driver, as a struct of function pointers.  The fake driver's adapter is
 * fake_adapter.c; a driver author fuzzes their own C functions by writing
 * one more adapter and linking it instead (see fuzz/README.md).
 *
 * The fuzzer calls everything from ONE real thread.  Its logical submitting
 * threads are told apart by set_thread: the driver's C functions must see
 * the logical thread as "the calling thread" (the fake's are compiled with
 * fake_shim.h, which makes pthread_self() answer the logical thread).
 */
#ifndef RIG_FUZZ_DRIVER_H
#define RIG_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "rig_edge.h"

struct rig_fuzz_config {
  uint64_t device_bytes; /* budget of the memory queues and regions share */
  uint32_t queue_slots;  /* initial queue capacity, in parts */
  int may_block;         /* the device declares may_block (CNT-3) */
  int mutant;            /* driver-specific; 0 for the conforming driver */
};

/* Kinds of region the fuzzer asks for. */
enum rig_fuzz_mem {
  RIG_FUZZ_MEM_BUDGET = 0, /* charged to device_bytes: competes with grow */
  RIG_FUZZ_MEM_OTHER = 1   /* not charged to it (the witness region) */
};

/* Entries the fuzzer launches: a function that does nothing, and one that
 * fills (a[1]=region handle, a[2]=offset, a[3]=length, a[4]=byte). */
enum rig_fuzz_fn { RIG_FUZZ_FN_NOP = 0, RIG_FUZZ_FN_FILL = 1 };

struct rig_fuzz_driver {
  const char *name;
  /* Once per process, before the first open: 1 for a deterministic worker
   * (the driver runs work only in work_begin/work_end), 0 for its own. */
  void (*init)(int deterministic);
  void *(*open)(const struct rig_fuzz_config *cfg);
  /* The C functions and the device pointer rig passes them. */
  const struct rig_queue_fns *(*queue)(void *dev, void **qdev);
  /* Driver.grow: 0 for Grown, else n of Short n. */
  uint64_t (*grow)(void *dev);
  uint64_t (*signaled)(void *dev);
  /* Driver.sleep: 0 when it returns, 1 for Fault. */
  int (*sleep)(void *dev, uint64_t seen, int64_t still_ms);
  void (*stop)(void *dev);
  void *(*alloc)(void *dev, int mem, size_t n);
  uint64_t (*handle)(void *dev, void *region);
  void (*free)(void *dev, void *region);
  /* Host read of a region's bytes (for the STOP-4 witness): 0 on success. */
  int (*read)(void *dev, void *region, size_t off, void *into, size_t len);
  /* The entry handle of fn, made once after open. */
  uint64_t (*entry)(void *dev, int fn);
  /* Frees what open made (images, the word) once stop has returned and the
   * word reads the last value, and drops the device. */
  void (*close)(void *dev);
  /* Makes the next calls of the C functions and grow come from logical
   * thread i (0..7). */
  void (*set_thread)(int i);
  /* Optional (NULL): fail the nth next submit (fn 0) or commit (fn 1). */
  void (*inject_fail)(int fn, long nth);
  /* Optional (NULL when the driver runs work on its own threads, and in
   * non-deterministic mode): start the next committed part (1) or not (0);
   * end the started one. */
  int (*work_begin)(void *dev);
  void (*work_end)(void *dev);
  /* Optional (NULL): a digest of everything the C functions read but the
   * calling thread's growth; grow must leave it unchanged (QUEUE-1).  Without
   * it QUEUE-1 is checked only through its consequences (QUEUE-2). */
  uint64_t (*queue_digest)(void *dev);
};

/* The driver the fuzzer runs: defined by the adapter linked in. */
extern const struct rig_fuzz_driver rig_fuzz_driver;

#endif
