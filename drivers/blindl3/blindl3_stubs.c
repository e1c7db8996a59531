/* blindl3: the C locks of the l3-* drivers (see blindl3.ml's table).
 *
 * A lock (struct l3_lock) is a pthread mutex and a counter, one per driver
 * (module-level in blindl3.ml), kept in a custom block that is never freed
 * (the drivers keep it for the process's life).
 *
 * Taking a lock never blocks while holding the OCaml runtime: a trylock
 * first, and where another thread holds it, the wait runs in a blocking
 * section (the holder may be running OCaml code and need the runtime to get
 * to its give).  So the mutex is held across a caml_leave_blocking_section,
 * which runs no OCaml code (it only notes pending signals), never across a
 * caml_enter_blocking_section, which may run pending signal handlers.
 *
 * The stubs:
 *   l3_bump        pure C: take, count, give; no OCaml code while held.
 *   l3_account     pure C: take, add to a total, give; box after the give.
 *   l3_locked_uncounted  take, caml_callback_exn, give: held UNCOUNTED while
 *                  OCaml code runs (broken, LOCK-3).
 *   l3_locked_counted    rig_hold, take, callback, give, rig_give (conforms).
 *   l3_locked_late       take, callback (UNCOUNTED), rig_hold, callback,
 *                  rig_give, give (broken: the hold one step late).
 *   l3_locked_early      rig_hold, take, callback, rig_give, callback
 *                  (UNCOUNTED), give (broken: the give one step early).
 * Every callback stub gives the lock back right after the callback returns
 * or raises, before anything else (ASYNC-2), and re-raises.
 *   l3_held        for the author's check: whether the mutex is held (by
 *                  any thread); trylock, never blocks.
 *   l3_test_page   for the author's check: a page of host memory.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/threads.h>

#include "rig_edge.h"

struct l3_lock {
  pthread_mutex_t mu;
  int64_t count;
};

#define Lock_val(v) (*(struct l3_lock **)Data_custom_val(v))

static struct custom_operations lock_ops = {
  "rig.blindl3.lock", custom_finalize_default, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

CAMLprim value l3_lock_create(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct l3_lock *l = calloc(1, sizeof *l);
  if (!l) caml_raise_out_of_memory();
  pthread_mutex_init(&l->mu, NULL);
  v = caml_alloc_custom(&lock_ops, sizeof(struct l3_lock *), 0, 1);
  Lock_val(v) = l;
  CAMLreturn(v);
}

/* Take l->mu without blocking while holding the runtime.  No OCaml code
 * runs between the take and the return: leave_blocking_section only notes
 * pending signals. */
static void take(struct l3_lock *l) {
  if (pthread_mutex_trylock(&l->mu) == 0) return;
  caml_enter_blocking_section();
  pthread_mutex_lock(&l->mu);
  caml_leave_blocking_section();
}

static void give(struct l3_lock *l) { pthread_mutex_unlock(&l->mu); }

/* l3_bump l: one more in l's counter, in pure C. */
CAMLprim value l3_bump(value vl) {
  struct l3_lock *l = Lock_val(vl);
  take(l);
  l->count++;
  give(l);
  return Val_unit;
}

/* l3_account l n: adds n to l's total, in pure C; the new total, boxed after
 * the give. */
CAMLprim value l3_account(value vl, value vn) {
  struct l3_lock *l = Lock_val(vl);
  int64_t total;
  take(l);
  l->count += Long_val(vn);
  total = l->count;
  give(l);
  return Val_long((intnat)total);
}

CAMLprim value l3_count(value vl) {
  struct l3_lock *l = Lock_val(vl);
  int64_t n;
  take(l);
  n = l->count;
  give(l);
  return Val_long((intnat)n);
}

/* l3_locked_uncounted l f: f () with l held, uncounted (broken). */
CAMLprim value l3_locked_uncounted(value vl, value f) {
  CAMLparam2(vl, f);
  CAMLlocal1(r);
  struct l3_lock *l = Lock_val(vl);
  take(l);
  r = caml_callback_exn(f, Val_unit);
  give(l);
  if (Is_exception_result(r)) caml_raise(Extract_exception(r));
  CAMLreturn(r);
}

/* l3_locked_counted l f: f () with l held and counted, from right before
 * the take to right after the give (conforms).  Where the trylock fails the
 * count is given back across the blocking wait (whose enter may run pending
 * signal handlers, which could raise) and held again right after the take:
 * between the take and that hold no OCaml code runs. */
CAMLprim value l3_locked_counted(value vl, value f) {
  CAMLparam2(vl, f);
  CAMLlocal1(r);
  struct l3_lock *l = Lock_val(vl);
  rig_hold();
  if (pthread_mutex_trylock(&l->mu) != 0) {
    rig_give();
    caml_enter_blocking_section();
    pthread_mutex_lock(&l->mu);
    caml_leave_blocking_section();
    rig_hold();
  }
  r = caml_callback_exn(f, Val_unit);
  give(l);
  rig_give();
  if (Is_exception_result(r)) caml_raise(Extract_exception(r));
  CAMLreturn(r);
}

/* l3_locked_late l hook f: takes l, runs hook () uncounted, and only then
 * counts l (one step late) for f (); gives the count, then l (broken). */
CAMLprim value l3_locked_late(value vl, value hook, value f) {
  CAMLparam3(vl, hook, f);
  CAMLlocal1(r);
  struct l3_lock *l = Lock_val(vl);
  take(l);
  r = caml_callback_exn(hook, Val_unit);
  if (Is_exception_result(r)) {
    give(l);
    caml_raise(Extract_exception(r));
  }
  rig_hold();
  r = caml_callback_exn(f, Val_unit);
  give(l);
  rig_give();
  if (Is_exception_result(r)) caml_raise(Extract_exception(r));
  CAMLreturn(r);
}

/* l3_locked_early l f hook: counts and takes l for f (), then uncounts l
 * (one step early) and runs hook () still holding it; gives l (broken).  On
 * a raise of f, gives l then the count, as it should. */
CAMLprim value l3_locked_early(value vl, value f, value hook) {
  CAMLparam3(vl, f, hook);
  CAMLlocal2(r, h);
  struct l3_lock *l = Lock_val(vl);
  rig_hold();
  if (pthread_mutex_trylock(&l->mu) != 0) {
    rig_give();
    caml_enter_blocking_section();
    pthread_mutex_lock(&l->mu);
    caml_leave_blocking_section();
    rig_hold();
  }
  r = caml_callback_exn(f, Val_unit);
  if (Is_exception_result(r)) {
    give(l);
    rig_give();
    caml_raise(Extract_exception(r));
  }
  rig_give();
  h = caml_callback_exn(hook, Val_unit);
  give(l);
  if (Is_exception_result(h)) caml_raise(Extract_exception(h));
  CAMLreturn(r);
}

/* For the author's check only: whether l's mutex is held (by any thread). */
CAMLprim value l3_held(value vl) {
  struct l3_lock *l = Lock_val(vl);
  if (pthread_mutex_trylock(&l->mu) != 0) return Val_true;
  pthread_mutex_unlock(&l->mu);
  return Val_false;
}

/* For the author's check only: a page of host memory, never freed. */
CAMLprim value l3_test_page(value unit) {
  (void)unit;
  void *p = NULL;
  if (posix_memalign(&p, 4096, 4096) != 0) caml_raise_out_of_memory();
  return caml_copy_nativeint((intnat)p);
}
