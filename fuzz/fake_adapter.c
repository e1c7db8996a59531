/* fake_adapter.c: the fake driver (drivers/fake/fake_core.c) seen through
 * rig_fuzz_driver.h.
 *
 * grow: in the real driver, Driver.grow is the OCaml Fake.D.grow, which
 * checks nothing and calls fake_grow through a stub (fake_stub_grow); the
 * fuzzer calls fake_grow directly.  A driver whose grow does more in OCaml
 * wraps it here through the OCaml runtime (caml_startup once, then
 * caml_callback on the closure caml_named_value gives): see README.md. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "fake_core.h"
#include "rig_fuzz_driver.h"

static _Thread_local int current; /* logical thread + 1; 0: the real thread */

pthread_t rig_fuzz_self(void) {
  if (current) return (pthread_t)current; /* small integers: no real pthread_t */
#undef pthread_self
  return pthread_self();
}

struct fa_dev {
  struct fake_dev *d;
  struct fake_image *im;
};

static void fa_init(int deterministic) { fake_debug_manual_worker(deterministic); }

static void *fa_open(const struct rig_fuzz_config *cfg) {
  struct fa_dev *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  struct fake_config fc = {0};
  fc.budget[FAKE_DEVICE] = cfg->device_bytes;
  fc.budget[FAKE_MAPPED] = 0;
  fc.budget[FAKE_PINNED] = 1 << 20;
  fc.queue_slots = cfg->queue_slots;
  fc.mutant = cfg->mutant;
  fake_inject(FAKE_INJ_SUBMIT, 0, FAKE_INJ_NONE, NULL);
  fake_inject(FAKE_INJ_COMMIT, 0, FAKE_INJ_NONE, NULL);
  a->d = fake_dev_open(&fc);
  if (!a->d) {
    free(a);
    return NULL;
  }
  static const char *const names[] = {"nop", "fill"};
  static const uint64_t scratch[] = {0, 0};
  static const int ops[] = {FAKE_NOP, FAKE_FILL};
  a->im = fake_image_load(a->d, 2, names, scratch, ops);
  return a;
}

static const struct rig_queue_fns *fa_queue(void *dev, void **qdev) {
  *qdev = ((struct fa_dev *)dev)->d;
  return &fake_queue_fns;
}

static uint64_t fa_grow(void *dev) { return fake_grow(((struct fa_dev *)dev)->d); }
static uint64_t fa_signaled(void *dev) { return fake_dev_word(((struct fa_dev *)dev)->d); }
static int fa_sleep(void *dev, uint64_t seen, int64_t ms) {
  return fake_sleep(((struct fa_dev *)dev)->d, seen, ms);
}
static void fa_stop(void *dev) { fake_stop(((struct fa_dev *)dev)->d); }

static void *fa_alloc(void *dev, int mem, size_t n) {
  return fake_alloc(((struct fa_dev *)dev)->d, mem == RIG_FUZZ_MEM_BUDGET ? FAKE_DEVICE : FAKE_PINNED, n);
}
static uint64_t fa_handle(void *dev, void *r) {
  (void)dev;
  return fake_region_handle(r);
}
static void fa_free(void *dev, void *r) { fake_free(((struct fa_dev *)dev)->d, r); }
static int fa_read(void *dev, void *r, size_t off, void *into, size_t len) {
  (void)dev;
  return fake_region_read(r, off, into, len);
}

static uint64_t fa_entry(void *dev, int fn) {
  struct fa_dev *a = dev;
  if (!a->im) return 0;
  int64_t e = fake_entry(a->im, (size_t)fn);
  return e > 0 ? (uint64_t)e : 0;
}

static void fa_close(void *dev) {
  struct fa_dev *a = dev;
  if (a->im) fake_unload(a->im);
  struct fake_region *w = fake_dev_word_region(a->d);
  if (w) fake_free(a->d, w);
  fake_dev_release(a->d);
  free(a);
}

static void fa_set_thread(int i) { current = i + 1; }

static void fa_inject_fail(int fn, long nth) {
  fake_inject(fn ? FAKE_INJ_COMMIT : FAKE_INJ_SUBMIT, nth, FAKE_INJ_FAIL, NULL);
}

static int fa_work_begin(void *dev) { return fake_debug_work_begin(((struct fa_dev *)dev)->d); }
static void fa_work_end(void *dev) { fake_debug_work_end(((struct fa_dev *)dev)->d); }
static uint64_t fa_digest(void *dev) { return fake_debug_queue_digest(((struct fa_dev *)dev)->d); }

const struct rig_fuzz_driver rig_fuzz_driver = {
    .name = "fake",
    .init = fa_init,
    .open = fa_open,
    .queue = fa_queue,
    .grow = fa_grow,
    .signaled = fa_signaled,
    .sleep = fa_sleep,
    .stop = fa_stop,
    .alloc = fa_alloc,
    .handle = fa_handle,
    .free = fa_free,
    .read = fa_read,
    .entry = fa_entry,
    .close = fa_close,
    .set_thread = fa_set_thread,
    .inject_fail = fa_inject_fail,
    .work_begin = fa_work_begin,
    .work_end = fa_work_end,
    .queue_digest = fa_digest,
};
