/* blindt6: the C side the t6-* drivers add to hostmem: a few pthread
 * mutexes and condition variables of the driver's own (a device-wide lock,
 * an interrupt lock and condition, a ring lock), a doorbell thread for
 * t6-ok-commit-handshake, a monotonic clock and a nap.
 *
 * Every blocking step here releases the OCaml runtime while it blocks
 * (caml_enter_blocking_section), as a wait's step must (SIG-3).  The locks
 * that OCaml code holds across OCaml code (dl, ring) are taken here and
 * counted by the OCaml side with Rig_edge_primitives.hold/give (LOCK-3);
 * ev_mu and db_mu are only ever held inside C code that runs no OCaml code
 * and no signal handler, as hostmem's mu is, so they are not counted.
 *
 * The state (struct t6) is reference counted: one reference for the OCaml
 * custom block, one for the doorbell thread when it runs. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

struct t6 {
  atomic_int refs;
  pthread_mutex_t dl;     /* the device-wide lock (t6-irq-under-devlock) */
  pthread_mutex_t ring;   /* the ring lock (t6-sleep-waits-commit) */
  pthread_mutex_t ev_mu;  /* the interrupt lock, with ev_cv */
  pthread_cond_t ev_cv;
  pthread_mutex_t db_mu;  /* the doorbell's, with db_cv */
  pthread_cond_t db_cv;
  int db_started, quit;
  uint64_t req, ack;
};

static void t6_release(struct t6 *t) {
  if (atomic_fetch_sub(&t->refs, 1) != 1) return;
  pthread_mutex_destroy(&t->dl);
  pthread_mutex_destroy(&t->ring);
  pthread_mutex_destroy(&t->ev_mu);
  pthread_cond_destroy(&t->ev_cv);
  pthread_mutex_destroy(&t->db_mu);
  pthread_cond_destroy(&t->db_cv);
  free(t);
}

#define T6_val(v) (*(struct t6 **)Data_custom_val(v))

static void t6_finalize(value v) {
  struct t6 *t = T6_val(v);
  if (!t) return;
  /* The doorbell thread, if any, ends with the last OCaml reference. */
  pthread_mutex_lock(&t->db_mu);
  t->quit = 1;
  pthread_cond_broadcast(&t->db_cv);
  pthread_mutex_unlock(&t->db_mu);
  t6_release(t);
}

static struct custom_operations t6_ops = {
  "rig.blindt6.state", t6_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

static void deadline_after(struct timespec *ts, clockid_t clk, int64_t ms) {
  clock_gettime(clk, ts);
  if (ms < 0) ms = 0;
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

value t6_new(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(v);
  struct t6 *t = calloc(1, sizeof *t);
  if (!t) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->dl, NULL);
  pthread_mutex_init(&t->ring, NULL);
  pthread_mutex_init(&t->ev_mu, NULL);
  pthread_cond_init(&t->ev_cv, &ca);
  pthread_mutex_init(&t->db_mu, NULL);
  pthread_cond_init(&t->db_cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&t->refs, 1);
  v = caml_alloc_custom(&t6_ops, sizeof(struct t6 *), 0, 1);
  T6_val(v) = t;
  CAMLreturn(v);
}

/* t6_now_ms (): a monotonic clock, in milliseconds. */
value t6_now_ms(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((intnat)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* t6_nap ms: sleeps ms milliseconds without the runtime. */
value t6_nap(value vms) {
  long ms = Long_val(vms);
  if (ms < 0) ms = 0;
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  caml_enter_blocking_section();
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  caml_leave_blocking_section();
  return Val_unit;
}

/* ------------------------------------------------ the device-wide lock */

/* Takes dl, blocking without the runtime.  The caller counted it first. */
value t6_dl_lock(value v) {
  struct t6 *t = T6_val(v);
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->dl);
  caml_leave_blocking_section();
  return Val_unit;
}

value t6_dl_unlock(value v) {
  pthread_mutex_unlock(&T6_val(v)->dl);
  return Val_unit;
}

/* ------------------------------------------------------ the interrupt */

/* t6_ev_wait st ms: waits on the interrupt condition for at most ms, or
 * until t6_ev_kick.  Gives back ev_mu (only) while it waits. */
value t6_ev_wait(value v, value vms) {
  struct t6 *t = T6_val(v);
  struct timespec ts;
  deadline_after(&ts, CLOCK_MONOTONIC, Long_val(vms));
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->ev_mu);
  pthread_cond_timedwait(&t->ev_cv, &t->ev_mu, &ts);
  pthread_mutex_unlock(&t->ev_mu);
  caml_leave_blocking_section();
  return Val_unit;
}

value t6_ev_kick(value v) {
  struct t6 *t = T6_val(v);
  pthread_mutex_lock(&t->ev_mu);
  pthread_cond_broadcast(&t->ev_cv);
  pthread_mutex_unlock(&t->ev_mu);
  return Val_unit;
}

/* ------------------------------------------------------ the ring lock */

value t6_ring_lock(value v) {
  struct t6 *t = T6_val(v);
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->ring);
  caml_leave_blocking_section();
  return Val_unit;
}

/* t6_ring_timedlock st ms: takes the ring lock within ms, or answers false
 * having taken nothing. */
value t6_ring_timedlock(value v, value vms) {
  struct t6 *t = T6_val(v);
  struct timespec ts;
  deadline_after(&ts, CLOCK_REALTIME, Long_val(vms));
  int rc;
  caml_enter_blocking_section();
  rc = pthread_mutex_timedlock(&t->ring, &ts);
  caml_leave_blocking_section();
  return Val_bool(rc == 0);
}

value t6_ring_unlock(value v) {
  pthread_mutex_unlock(&T6_val(v)->ring);
  return Val_unit;
}

/* ------------------------------------------------------- the doorbell */

/* The doorbell thread: acks each ring after flushing the write-combining
 * buffer (a short nap).  Started with every signal blocked but the fault
 * signals, for its life (SIG-8).  Runs no OCaml code. */
static void *doorbell(void *arg) {
  struct t6 *t = arg;
  pthread_mutex_lock(&t->db_mu);
  for (;;) {
    while (!t->quit && t->ack == t->req) pthread_cond_wait(&t->db_cv, &t->db_mu);
    if (t->quit) break;
    uint64_t target = t->req;
    pthread_mutex_unlock(&t->db_mu);
    struct timespec ts = { 0, 300000L }; /* the flush: 0.3 ms */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    pthread_mutex_lock(&t->db_mu);
    t->ack = target;
    pthread_cond_broadcast(&t->db_cv);
  }
  t->ack = t->req;
  pthread_cond_broadcast(&t->db_cv);
  pthread_mutex_unlock(&t->db_mu);
  t6_release(t);
  return NULL;
}

/* t6_db_start st: starts the doorbell thread (once). */
value t6_db_start(value v) {
  struct t6 *t = T6_val(v);
  if (t->db_started) return Val_unit;
  sigset_t old;
  rig_mask(&old);
  atomic_fetch_add(&t->refs, 1);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, doorbell, t);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
  if (rc != 0) {
    atomic_fetch_sub(&t->refs, 1);
    caml_failwith("blindt6: cannot start the doorbell thread");
  }
  t->db_started = 1;
  return Val_unit;
}

/* t6_db_ring st: rings the doorbell; its ticket. */
value t6_db_ring(value v) {
  struct t6 *t = T6_val(v);
  pthread_mutex_lock(&t->db_mu);
  uint64_t ticket = ++t->req;
  pthread_cond_broadcast(&t->db_cv);
  pthread_mutex_unlock(&t->db_mu);
  return Val_long((intnat)ticket);
}

/* t6_db_wait st ticket ms: waits at most ms for the ack of ticket; true once
 * it came (or the doorbell quit). */
value t6_db_wait(value v, value vticket, value vms) {
  struct t6 *t = T6_val(v);
  uint64_t ticket = (uint64_t)Long_val(vticket);
  struct timespec ts;
  deadline_after(&ts, CLOCK_MONOTONIC, Long_val(vms));
  int done;
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->db_mu);
  while (!t->quit && t->ack < ticket)
    if (pthread_cond_timedwait(&t->db_cv, &t->db_mu, &ts) == ETIMEDOUT) break;
  done = t->quit || t->ack >= ticket;
  pthread_mutex_unlock(&t->db_mu);
  caml_leave_blocking_section();
  return Val_bool(done);
}

/* t6_db_quit st: ends the doorbell thread, without waiting for it. */
value t6_db_quit(value v) {
  struct t6 *t = T6_val(v);
  pthread_mutex_lock(&t->db_mu);
  t->quit = 1;
  pthread_cond_broadcast(&t->db_cv);
  pthread_mutex_unlock(&t->db_mu);
  return Val_unit;
}
