/* blindw: the C side the w-* drivers add to hostmem: a monotonic clock, a
 * nap, an "interrupt" condition (w-wait-forgets-block's wait helper) and a
 * compile queue of function names behind a pthread mutex (w-prepare-c-lock-
 * hook's).
 *
 * Every blocking step here releases the OCaml runtime while it blocks
 * (caml_enter_blocking_section), as a wait's step must (SIG-3).  irq_mu is
 * only held inside C code that runs no OCaml code.  pq_mu is held by
 * w_pq_push across a call back into OCaml (the trace hook) and is NOT
 * counted with rig_hold: that is w-prepare-c-lock-hook's bug (LOCK-3).
 * w_pq_drop holds it in C alone.
 *
 * The state is freed by the OCaml custom block's finaliser, which takes no
 * lock, allocates nothing and runs no OCaml code. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

#define PQ_MAX 256

struct w {
  pthread_mutex_t irq_mu;
  pthread_cond_t irq_cv;
  int irq_pending;
  pthread_mutex_t pq_mu;   /* the compile queue's lock */
  int pq_n;
  char *pq[PQ_MAX];
};

#define W_val(v) (*(struct w **)Data_custom_val(v))

static void w_finalize(value v) {
  struct w *t = W_val(v);
  if (!t) return;
  for (int i = 0; i < t->pq_n; i++) free(t->pq[i]);
  pthread_mutex_destroy(&t->irq_mu);
  pthread_cond_destroy(&t->irq_cv);
  pthread_mutex_destroy(&t->pq_mu);
  free(t);
}

static struct custom_operations w_ops = {
  "rig.blindw.state", w_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

static void deadline_after(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  if (ms < 0) ms = 0;
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

value w_new(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct w *t = calloc(1, sizeof *t);
  if (!t) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->irq_mu, NULL);
  pthread_cond_init(&t->irq_cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&t->pq_mu, NULL);
  v = caml_alloc_custom(&w_ops, sizeof(struct w *), 0, 1);
  W_val(v) = t;
  CAMLreturn(v);
}

value w_now_ms(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((intnat)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* w_nap ms: sleeps ms milliseconds without the runtime.  Touches no signal
 * mask: a caller that means it as a wait's step runs it inside
 * Rig_edge_primitives.wait. */
value w_nap(value vms) {
  long ms = Long_val(vms);
  if (ms < 0) ms = 0;
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  caml_enter_blocking_section();
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  caml_leave_blocking_section();
  return Val_unit;
}

/* ------------------------------------------------------ the interrupt */

/* w_irq_wait st ms: the wait helper of w-wait-forgets-block.  Waits for the
 * interrupt (w_irq_kick) or ms milliseconds, signals unblocked around the
 * blocking step.  true: the interrupt came; false: timed out.
 *
 * BUG (SIG-2): the timeout path returns before rig_block, so the thread
 * goes on with its signals unblocked for the rest of the driver's call. */
value w_irq_wait(value v, value vms) {
  struct w *t = W_val(v);
  struct timespec ts;
  deadline_after(&ts, Long_val(vms));
  int got;
  rig_unblock();
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->irq_mu);
  int rc = 0;
  while (!t->irq_pending && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->irq_cv, &t->irq_mu, &ts);
  got = t->irq_pending;
  t->irq_pending = 0;
  pthread_mutex_unlock(&t->irq_mu);
  caml_leave_blocking_section();
  if (!got) return Val_false; /* timed out: the caller polls the fence */
  rig_block();
  return Val_true;
}

value w_irq_kick(value v) {
  struct w *t = W_val(v);
  pthread_mutex_lock(&t->irq_mu);
  t->irq_pending = 1;
  pthread_cond_broadcast(&t->irq_cv);
  pthread_mutex_unlock(&t->irq_mu);
  return Val_unit;
}

/* ------------------------------------------------- the compile queue */

static int pq_find(struct w *t, const char *f) {
  for (int i = 0; i < t->pq_n; i++)
    if (strcmp(t->pq[i], f) == 0) return i;
  return -1;
}

/* Takes pq_mu without the runtime (so that a thread that holds it and waits
 * for the runtime cannot deadlock with one that holds the runtime). */
static void pq_lock(struct w *t) {
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->pq_mu);
  caml_leave_blocking_section();
}

/* w_pq_push st f hook: queues f for compilation unless it is queued, and
 * tells the trace hook, under the queue lock so that the trace's order is
 * the queue's.
 *
 * BUG (LOCK-3): pq_mu is held while the OCaml hook runs, never counted with
 * rig_hold/rig_give. */
value w_pq_push(value v, value vf, value hook) {
  CAMLparam3(v, vf, hook);
  struct w *t = W_val(v);
  char *f = strdup(String_val(vf));
  if (!f) caml_raise_out_of_memory();
  pq_lock(t);
  if (pq_find(t, f) >= 0 || t->pq_n == PQ_MAX) {
    pthread_mutex_unlock(&t->pq_mu);
    free(f);
    CAMLreturn(Val_unit);
  }
  value r = caml_callback_exn(hook, vf);
  if (Is_exception_result(r)) {
    pthread_mutex_unlock(&t->pq_mu);
    free(f);
    caml_raise(Extract_exception(r));
  }
  t->pq[t->pq_n++] = f;
  pthread_mutex_unlock(&t->pq_mu);
  CAMLreturn(Val_unit);
}

/* w_pq_drop st f: f's entry is made: out of the queue.  C only. */
value w_pq_drop(value v, value vf) {
  CAMLparam2(v, vf);
  struct w *t = W_val(v);
  char *f = strdup(String_val(vf));
  if (!f) caml_raise_out_of_memory();
  pq_lock(t);
  int i = pq_find(t, f);
  if (i >= 0) {
    free(t->pq[i]);
    t->pq[i] = t->pq[--t->pq_n];
  }
  pthread_mutex_unlock(&t->pq_mu);
  free(f);
  CAMLreturn(Val_unit);
}
