/* blinds3: the C side the s3-* drivers add to hostmem: a monotonic clock,
 * naps (one that releases the OCaml runtime, one that does not), an
 * "interrupt" condition with its wait helper, a "deep idle" pause, and an
 * eventfd the driver polls.
 *
 * Which of these release the runtime while they block, as a wait's step
 * must (SIG-3), is said at each.  The ones that do not are the s3-* broken
 * drivers' bugs; each is still called inside Rig_edge_primitives.wait, so
 * that signals are unblocked right before it and blocked right after it
 * (SIG-2 holds).
 *
 * irq_mu is only ever held inside C code that runs no OCaml code and no
 * signal handler, so it is not one of the locks rig_hold counts (LOCK-3).
 * It is taken with the runtime released.
 *
 * The state is freed by the OCaml custom block's finaliser, which takes no
 * lock, allocates nothing and runs no OCaml code. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

struct s3 {
  pthread_mutex_t irq_mu;
  pthread_cond_t irq_cv;
  int irq_pending;
  int efd; /* the device's "interrupt" eventfd, -1 if none */
};

#define S3_val(v) (*(struct s3 **)Data_custom_val(v))

static void s3_finalize(value v) {
  struct s3 *t = S3_val(v);
  if (!t) return;
  if (t->efd >= 0) close(t->efd);
  pthread_mutex_destroy(&t->irq_mu);
  pthread_cond_destroy(&t->irq_cv);
  free(t);
}

static struct custom_operations s3_ops = {
  "rig.blinds3.state", s3_finalize, custom_compare_default, custom_hash_default,
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

static void nap_us(long us) {
  if (us < 0) us = 0;
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

value s3_new(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct s3 *t = calloc(1, sizeof *t);
  if (!t) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->irq_mu, NULL);
  pthread_cond_init(&t->irq_cv, &ca);
  pthread_condattr_destroy(&ca);
  t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (t->efd < 0) {
    pthread_mutex_destroy(&t->irq_mu);
    pthread_cond_destroy(&t->irq_cv);
    free(t);
    caml_failwith("blinds3: eventfd failed");
  }
  v = caml_alloc_custom(&s3_ops, sizeof(struct s3 *), 0, 1);
  S3_val(v) = t;
  CAMLreturn(v);
}

value s3_now_ms(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((intnat)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* s3_nap_us us: sleeps us microseconds WITHOUT the runtime: a blocking
 * stub.  (s3-ok-many-waits' step.) */
value s3_nap_us(value vus) {
  long us = Long_val(vus);
  caml_enter_blocking_section();
  nap_us(us);
  caml_leave_blocking_section();
  return Val_unit;
}

/* s3_nap_held ms: sleeps ms milliseconds.
 *
 * BUG (SIG-3, s3-nap-held): declared [@@noalloc] on the OCaml side and
 * written as a "tiny" helper, it never releases the runtime: the thread
 * keeps the OCaml runtime for the whole nap. */
value s3_nap_held(value vms) {
  nap_us(Long_val(vms) * 1000L);
  return Val_unit;
}

/* ------------------------------------------------------ the interrupt */

/* s3_irq_wait st ms: waits for the interrupt (irq_pending, which hostmem's
 * device never raises: the wait times out and the caller polls the word) or
 * ms milliseconds.  true: the interrupt came; false: timed out.
 *
 * BUG (SIG-3, s3-wait-reacquires): its fast path looks at the interrupt
 * with the runtime released, then takes the runtime back (to return to
 * OCaml at once if the interrupt is pending), and its slow path then blocks
 * in pthread_cond_timedwait without releasing the runtime again: the
 * blocking step runs with the runtime held.
 *
 * irq_mu is never held by a thread waiting for the runtime (the fast path
 * gives it back before caml_leave_blocking_section), so two such waits
 * cannot deadlock: the one holding the runtime only waits for irq_mu, which
 * every other holder gives back without waiting for anything. */
value s3_irq_wait(value v, value vms) {
  struct s3 *t = S3_val(v);
  struct timespec ts;
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->irq_mu);
  int got = t->irq_pending;
  t->irq_pending = 0;
  pthread_mutex_unlock(&t->irq_mu);
  caml_leave_blocking_section();
  if (got) return Val_true;
  deadline_after(&ts, Long_val(vms));
  pthread_mutex_lock(&t->irq_mu);
  int rc = 0;
  while (!t->irq_pending && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->irq_cv, &t->irq_mu, &ts);
  got = t->irq_pending;
  t->irq_pending = 0;
  pthread_mutex_unlock(&t->irq_mu);
  return Val_bool(got);
}

/* ------------------------------------------------------- deep idle */

#define DEEP_IDLE_MS 50

/* s3_idle slice_ms still_ms: pauses slice_ms milliseconds, a slice of a
 * sleep that asked for still_ms.
 *
 * Short sleeps release the runtime, as a blocking stub does.  Sleeps of
 * still_ms >= DEEP_IDLE_MS take the "deep idle" path, a loop of 1-ms naps
 * copied from the device thread's idle loop (a C thread that never held the
 * runtime).  BUG (SIG-3, s3-long-idle-held): that path never releases the
 * runtime, so every long sleep blocks with it held. */
value s3_idle(value vslice, value vstill) {
  long slice = Long_val(vslice), still = Long_val(vstill);
  if (still >= DEEP_IDLE_MS) {
    for (long i = 0; i < slice; i++) nap_us(1000);
    return Val_unit;
  }
  caml_enter_blocking_section();
  nap_us(slice * 1000L);
  caml_leave_blocking_section();
  return Val_unit;
}

/* ------------------------------------------------------- the eventfd */

/* s3_efd_wait st ms: poll(2)s the device's eventfd for at most ms
 * milliseconds, WITHOUT the runtime.  true if it is readable (hostmem's
 * device never raises this line: the wait times out and the caller polls
 * the word). */
value s3_efd_wait(value v, value vms) {
  struct s3 *t = S3_val(v);
  int ms = (int)Long_val(vms);
  if (ms < 0) ms = 0;
  struct pollfd p = { t->efd, POLLIN, 0 };
  int rc;
  caml_enter_blocking_section();
  do rc = poll(&p, 1, ms);
  while (rc < 0 && errno == EINTR);
  caml_leave_blocking_section();
  return Val_bool(rc > 0 && (p.revents & POLLIN));
}
