/* fake_stubs.c: the OCaml stubs of the fake driver (fake.ml) over the
 * fake device of fake_core.c.
 *
 * A device is an OCaml custom block holding one reference on the C device,
 * so that it outlives every OCaml value (regions, images, the queue) that
 * reaches it.  Regions and images are raw C pointers, as nativeints, freed
 * by free and unload.  The stubs that block (sleep, stop) release the OCaml
 * runtime while they do (SIG-3).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "fake_core.h"

#define Dev_val(v) (*(struct fake_dev **)Data_custom_val(v))
#define Region_val(v) ((struct fake_region *)Nativeint_val(v))
#define Image_val(v) ((struct fake_image *)Nativeint_val(v))

/* A finaliser: shielded from signals (SIG-7), though it neither waits nor
 * runs OCaml code. */
static void dev_finalize(value v) {
  struct fake_dev *d = Dev_val(v);
  if (!d) return;
  sigset_t old;
  rig_shield_begin(&old);
  fake_dev_release(d);
  rig_shield_end(&old);
}

static struct custom_operations dev_ops = {
    "rig_conform.fake.dev", dev_finalize, custom_compare_default,
    custom_hash_default, custom_serialize_default, custom_deserialize_default,
    custom_compare_ext_default, custom_fixed_length_default};

static value ptr_value(const void *p) { return caml_copy_nativeint((intnat)p); }

/* budgets: [| device; mapped; pinned |] */
value fake_stub_open(value budgets, value slots, value mutant) {
  CAMLparam3(budgets, slots, mutant);
  CAMLlocal1(v);
  struct fake_config cfg;
  for (int k = 0; k < FAKE_KINDS; k++) cfg.budget[k] = (uint64_t)Long_val(Field(budgets, k));
  cfg.queue_slots = (uint32_t)Long_val(slots);
  cfg.mutant = Int_val(mutant);
  struct fake_dev *d = fake_dev_open(&cfg);
  if (!d) caml_failwith("fake: cannot open a device (no memory or no thread)");
  v = caml_alloc_custom(&dev_ops, sizeof d, 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

value fake_stub_dev_ptr(value dev) { return ptr_value(Dev_val(dev)); }

value fake_stub_queue_fns(value unit) {
  (void)unit;
  return ptr_value(&fake_queue_fns);
}

/* locate, peer and signaled use these two: no lock, no allocation. */
value fake_stub_word(value dev) { return Val_long((intnat)fake_dev_word(Dev_val(dev))); }
value fake_stub_last_value(value dev) { return Val_long((intnat)fake_dev_last_value(Dev_val(dev))); }
value fake_stub_dead(value dev) { return Val_bool(fake_dev_dead(Dev_val(dev))); }

value fake_stub_set_commit_hold(value dev, value ms) {
  fake_set_commit_hold(Dev_val(dev), Long_val(ms));
  return Val_unit;
}

value fake_stub_used(value dev, value kind) {
  return Val_long((intnat)fake_dev_used(Dev_val(dev), Int_val(kind)));
}

value fake_stub_charge(value dev, value kind, value delta) {
  fake_dev_charge(Dev_val(dev), Int_val(kind), (int64_t)Long_val(delta));
  return Val_unit;
}

value fake_stub_word_region(value dev) { return ptr_value(fake_dev_word_region(Dev_val(dev))); }

value fake_stub_alloc(value dev, value kind, value n) {
  return ptr_value(fake_alloc(Dev_val(dev), Int_val(kind), (size_t)Long_val(n)));
}

value fake_stub_map_peer(value dev, value r) {
  return ptr_value(fake_map_peer(Dev_val(dev), Region_val(r)));
}

value fake_stub_map_host(value dev, value p, value n) {
  return ptr_value(fake_map_host(Dev_val(dev), (void *)Nativeint_val(p), (size_t)Long_val(n)));
}

value fake_stub_free(value dev, value r) {
  fake_free(Dev_val(dev), Region_val(r));
  return Val_unit;
}

value fake_stub_region_handle(value r) {
  return caml_copy_int64((int64_t)fake_region_handle(Region_val(r)));
}

value fake_stub_region_size(value r) { return Val_long((intnat)fake_region_size(Region_val(r))); }

value fake_stub_region_revoked(value r) { return Val_bool(fake_region_revoked(Region_val(r))); }

/* off is checked non-negative by the caller. */
value fake_stub_read(value r, value off, value into) {
  return Val_bool(fake_region_read(Region_val(r), (size_t)Long_val(off), Bytes_val(into),
                                   caml_string_length(into)) == 0);
}

value fake_stub_write(value r, value off, value from) {
  return Val_bool(fake_region_write(Region_val(r), (size_t)Long_val(off), String_val(from),
                                    caml_string_length(from)) == 0);
}

/* names: string array, scratch and ops: int arrays of the same length. */
value fake_stub_image_load(value dev, value names, value scratch, value ops) {
  CAMLparam4(dev, names, scratch, ops);
  size_t n = Wosize_val(names);
  const char **cn = calloc(n ? n : 1, sizeof *cn);
  uint64_t *cs = calloc(n ? n : 1, sizeof *cs);
  int *co = calloc(n ? n : 1, sizeof *co);
  struct fake_image *im = NULL;
  if (cn && cs && co) {
    for (size_t i = 0; i < n; i++) {
      cn[i] = String_val(Field(names, i));
      cs[i] = (uint64_t)Long_val(Field(scratch, i));
      co[i] = Int_val(Field(ops, i));
    }
    im = fake_image_load(Dev_val(dev), n, cn, cs, co);
  }
  free(cn);
  free(cs);
  free(co);
  if (!im) caml_raise_out_of_memory();
  CAMLreturn(ptr_value(im));
}

value fake_stub_entry(value im, value i) {
  return Val_long((intnat)fake_entry(Image_val(im), (size_t)Long_val(i)));
}

value fake_stub_prepare(value im, value i) {
  fake_prepare(Image_val(im), (size_t)Long_val(i));
  return Val_unit;
}

value fake_stub_evict_prepared(value im, value i, value keep_memory, value only_if_short) {
  fake_evict_prepared(Image_val(im), (size_t)Long_val(i), Bool_val(keep_memory), Bool_val(only_if_short));
  return Val_unit;
}

/* The prepare-c-lock-uncounted mutant's prepare (LOCK-3): a function with
 * no entry yet is made under the compile lock, a C mutex, held while the
 * OCaml trace hook runs, which nothing counts with rig_hold.  A function
 * with its entry made returns before the lock. */
static pthread_mutex_t compile_mu = PTHREAD_MUTEX_INITIALIZER;

value fake_stub_prepare_traced(value im, value i, value trace) {
  CAMLparam3(im, i, trace);
  struct fake_image *fi = Image_val(im);
  size_t k = (size_t)Long_val(i);
  if (fake_has_entry(fi, k)) CAMLreturn(Val_unit);
  caml_release_runtime_system(); /* so that the holder never waits for the runtime */
  pthread_mutex_lock(&compile_mu);
  caml_acquire_runtime_system();
  value r = caml_callback_exn(trace, i);
  if (!Is_exception_result(r)) fake_prepare(fi, k);
  pthread_mutex_unlock(&compile_mu);
  if (Is_exception_result(r)) caml_raise(Extract_exception(r));
  CAMLreturn(Val_unit);
}

value fake_stub_scratch(value im, value i) {
  return Val_long((intnat)fake_image_scratch(Image_val(im), (size_t)Long_val(i)));
}

value fake_stub_unload(value im) {
  fake_unload(Image_val(im));
  return Val_unit;
}

value fake_stub_grow(value dev) { return Val_long((intnat)fake_grow(Dev_val(dev))); }

/* The blocking step of sleep: true when the device faulted. */
value fake_stub_sleep(value dev, value seen, value still_ms) {
  CAMLparam1(dev); /* a root while the runtime is released */
  struct fake_dev *d = Dev_val(dev);
  uint64_t s = (uint64_t)Long_val(seen);
  int64_t ms = (int64_t)Long_val(still_ms);
  caml_release_runtime_system();
  int faulted = fake_sleep(d, s, ms);
  caml_acquire_runtime_system();
  CAMLreturn(Val_bool(faulted));
}

/* The sleep-fault-unblocked mutant's whole wait (SIG-2): rig_unblock
 * before the blocking step, but rig_block after it only when the step saw
 * no fault; on a fault, sleep raises with the thread's signals unblocked. */
value fake_stub_sleep_fault_unblocked(value dev, value seen, value still_ms) {
  CAMLparam1(dev);
  struct fake_dev *d = Dev_val(dev);
  uint64_t s = (uint64_t)Long_val(seen);
  int64_t ms = (int64_t)Long_val(still_ms);
  rig_unblock();
  caml_release_runtime_system();
  int faulted = fake_sleep(d, s, ms);
  caml_acquire_runtime_system();
  if (!faulted) rig_block();
  CAMLreturn(Val_bool(faulted));
}

/* The sleep-keeps-runtime mutant's step (SIG-3): it blocks holding the
 * OCaml runtime, so no other OCaml thread runs meanwhile. */
value fake_stub_sleep_holding(value dev, value seen, value still_ms) {
  return Val_bool(fake_sleep(Dev_val(dev), (uint64_t)Long_val(seen), (int64_t)Long_val(still_ms)));
}

value fake_stub_fault_reason(value dev) {
  char buf[256];
  fake_fault_reason(Dev_val(dev), buf, sizeof buf);
  return caml_copy_string(buf);
}

value fake_stub_stop(value dev) {
  CAMLparam1(dev);
  struct fake_dev *d = Dev_val(dev);
  caml_release_runtime_system();
  fake_stop(d);
  caml_acquire_runtime_system();
  CAMLreturn(Val_unit);
}

value fake_stub_inject(value fn, value nth, value mode, value why) {
  fake_inject(Int_val(fn), Long_val(nth), Int_val(mode), String_val(why));
  return Val_unit;
}

/* ---------------------------------------------------------------- bus */

/* Some address, 0 (fn kept by another open) or -1 (no memory); fn is
 * lowercase, checked by the caller.  A boxed answer: addresses use 64 bits. */
value fake_stub_bus_dma(value dev, value r, value fn) {
  CAMLparam3(dev, r, fn);
  CAMLlocal1(v);
  uint64_t addr = 0;
  int rc = fake_bus_dma(Dev_val(dev), Region_val(r), String_val(fn), &addr);
  v = caml_copy_int64(rc == 0 ? (int64_t)addr : rc == FAKE_BUS_KEPT ? 0 : -1);
  CAMLreturn(v);
}

/* fn's DMA at addr: writes buf there when to_bus, else reads into it. */
value fake_stub_bus_copy(value fn, value addr, value buf, value to_bus) {
  uint64_t a = (uint64_t)Int64_val(addr);
  size_t n = caml_string_length(buf);
  int rc = Bool_val(to_bus) ? fake_bus_write(String_val(fn), a, Bytes_val(buf), n)
                            : fake_bus_read(String_val(fn), a, Bytes_val(buf), n);
  return Val_bool(rc == 0);
}
