/* blindst6: the timeline word of the st6-* drivers, their completion
 * ("interrupt") bookkeeping, and the helper threads some of them start.
 * See blindst6.ml for the table of drivers and what each mode does.
 *
 * The device's work runs on hostmem (drivers/hostmem).  hostmem's own word
 * plays the device's fence register ("hw"): it is read by OCaml code
 * (Hostmem.D.signaled) and handed to these stubs.  The word rig reads
 * (own_word, signaled) is [word] below, written only here.
 *
 * Locking: [mu] guards every field but [word]; it is held only inside these
 * stubs, never while OCaml code runs, and is given back before the OCaml
 * runtime is taken again (st6_nap), so it is not a lock rig_hold counts.
 *
 * Lifetime: reference counted; the OCaml custom block holds one reference,
 * every C thread one more.  The word lives here, so it outlives stop for as
 * long as rig may read it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
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

/* The modes: keep in step with blindst6.ml. */
enum {
  M_IRQ_EXIT_FLUSH = 1,   /* broken */
  M_WB_TIMER = 2,         /* broken */
  M_RELEASE_RESET = 3,    /* broken */
  M_RELEASE_BLIP = 4,     /* broken */
  M_POSTED_FENCE = 5,     /* broken */
  M_OK_CANCEL = 11,
  M_OK_REAPER_STEPS = 12,
  M_OK_REFRESH = 13,
  M_OK_COALESCE = 14,
};

/* Delays, microseconds. */
#define EXIT_FLUSH_US 2000        /* st6-irq-exit-flush: callbacks before the flush */
#define WB_TIMER_US 150000        /* st6-wb-timer: the write-back after stop */
#define RELEASE_RESET_US 300000   /* st6-release-reset: the release worker */
#define RELEASE_BLIP_US 4000      /* st6-release-blip: the release worker */
#define RELEASE_BLIP_FINI_US 10000/* ... and the fence fini after the teardown */
#define POSTED_FENCE_US 100000    /* st6-posted-fence: the posted fence write */
#define REAPER_STEP_US 40000      /* st6-ok-reaper-steps: the reaper's period */
#define COALESCE_US 2000          /* st6-ok-coalesce: the coalescing window */
#define REFRESH_US 200            /* st6-ok-refresh: the refresh period */
#define POLL_BUSY_US 500          /* the IRQ thread's poll while work is pending */
#define POLL_IDLE_US 50000        /* ... while none is (a commit kicks it) */

#define NSUBS 4096

struct st6 {
  _Atomic uint64_t word;        /* the timeline word rig reads */
  pthread_mutex_t mu;
  pthread_cond_t cv;            /* the IRQ thread's naps; kicked by commit, stop */
  atomic_int refs;
  int mode;
  int kick;
  uint64_t last;                /* the last value given to submit (failed ones too) */
  uint64_t completed;           /* the last value retired from hw before stop */
  uint64_t subs[NSUBS];         /* values of the successful submits (a ring) */
  unsigned nsubs;
  uint64_t last_ok;             /* the last value of a successful submit */
  uint64_t committed;           /* the last value a successful commit made run */
  int ran_at_stop;              /* committed work had not retired when stop was called */
  int stopped;                  /* stop has run */
  int final_written;            /* the last value went into the word */
  int done;                     /* the IRQ thread is to exit */
  uint64_t v_run;               /* the value of the work running at stop (0: none) */
  int step;                     /* per-mode state after stop */
  int64_t step_at;              /* per-mode deadline (us, monotonic) */
  int64_t pending_since;        /* st6-ok-coalesce: first interrupt not yet written */
  int64_t writes_after_final;   /* for the check: stores after the final one */
};

/* ------------------------------------------------------------ helpers */

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void nap_us(int64_t us) {
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

static void deadline_after_us(struct timespec *ts, int64_t us) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += us / 1000000;
  ts->tv_nsec += (us % 1000000) * 1000;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static void dev_release(struct st6 *d) {
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  free(d);
}

static void store_word(struct st6 *d, uint64_t v) {
  atomic_store_explicit(&d->word, v, memory_order_release);
  if (d->final_written) d->writes_after_final++;
}

/* A C thread of the driver's: every signal blocked but the fault signals,
 * for its life (SIG-8): created with them blocked, so that it starts so. */
static int start_thread(void *(*fn)(void *), struct st6 *d, void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  for (int s = 1; s < NSIG; s++)
    if (rig_fault_signal(s)) sigdelset(&all, s);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  atomic_fetch_add(&d->refs, 1);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) atomic_fetch_sub(&d->refs, 1);
  return rc;
}

/* Under mu: the last value given to submit goes into the word. */
static void publish_final(struct st6 *d) {
  if (d->final_written) return;
  atomic_store_explicit(&d->word, d->last, memory_order_release);
  d->final_written = 1;
  pthread_cond_broadcast(&d->cv);
}

/* Under mu, before stop: retire hw into the word (monotonic). */
static void forward_locked(struct st6 *d, uint64_t hw) {
  if (d->stopped) return;
  if (hw > atomic_load_explicit(&d->word, memory_order_relaxed)) {
    store_word(d, hw);
    d->completed = hw;
  }
}

/* ------------------------------------------- late writers (broken ones) */

/* A timer or worker that stores [v1] into the word [t1] us after it starts,
 * and [v2] [t2] us after that if [t2] > 0.  It checks nothing: that is the
 * bug of the modes that start one. */
struct late {
  struct st6 *d;
  int64_t t1, t2;
  uint64_t v1, v2;
};

static void *late_writer(void *arg) {
  struct late *l = arg;
  struct st6 *d = l->d;
  nap_us(l->t1);
  pthread_mutex_lock(&d->mu);
  store_word(d, l->v1);
  pthread_mutex_unlock(&d->mu);
  if (l->t2 > 0) {
    nap_us(l->t2);
    pthread_mutex_lock(&d->mu);
    store_word(d, l->v2);
    pthread_mutex_unlock(&d->mu);
  }
  free(l);
  dev_release(d);
  return NULL;
}

static void arm_late(struct st6 *d, int64_t t1, uint64_t v1, int64_t t2, uint64_t v2) {
  struct late *l = malloc(sizeof *l);
  if (!l) return;
  l->d = d;
  l->t1 = t1;
  l->v1 = v1;
  l->t2 = t2;
  l->v2 = v2;
  if (start_thread(late_writer, d, l) != 0) free(l);
}

/* Under mu: what a mode does once the final value is in the word (by stop
 * or by the reaper). */
static void after_final(struct st6 *d, int64_t now) {
  switch (d->mode) {
  case M_RELEASE_RESET:
    /* The queue's release, deferred to a release worker: its teardown
     * zeroes the fence word "for the ring's next user". */
    arm_late(d, RELEASE_RESET_US, 0, 0, 0);
    d->done = 1;
    break;
  case M_RELEASE_BLIP:
    /* The release worker's ring teardown writes back the ring's retired
     * fence; the fence fini forces completion (the last value) again. */
    arm_late(d, RELEASE_BLIP_US, d->completed, RELEASE_BLIP_FINI_US, d->last);
    d->done = 1;
    break;
  case M_IRQ_EXIT_FLUSH:
    /* Only when work ran at stop's call: the IRQ thread runs the cancelled
     * work's callbacks, then flushes its retired counter. */
    if (d->ran_at_stop) {
      d->step = 1;
      d->step_at = now + EXIT_FLUSH_US;
    } else d->done = 1;
    break;
  case M_POSTED_FENCE:
    /* The running work's own fence write, still posted in the device's
     * write buffer, lands late. */
    if (d->v_run) arm_late(d, POSTED_FENCE_US, d->v_run, 0, 0);
    d->done = 1;
    break;
  default:
    d->done = 1;
  }
}

/* ------------------------------------------------- st6-ok-refresh's writer */

static void *refresher(void *arg) {
  struct st6 *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    if (d->stopped) break;
    uint64_t w = atomic_load_explicit(&d->word, memory_order_relaxed);
    if (w < d->last) {
      /* Work pending: the fence is refreshed every REFRESH_US, under mu,
       * so that stop's take of mu fences every refresh. */
      store_word(d, d->completed > w ? d->completed : w);
      pthread_mutex_unlock(&d->mu);
      nap_us(REFRESH_US);
      pthread_mutex_lock(&d->mu);
    } else {
      struct timespec ts;
      deadline_after_us(&ts, POLL_IDLE_US);
      pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
  }
  pthread_mutex_unlock(&d->mu);
  dev_release(d);
  return NULL;
}

/* ------------------------------------------------------- OCaml device */

#define Dev_val(v) (*(struct st6 **)Data_custom_val(v))

static void dev_finalize(value v) {
  struct st6 *d = Dev_val(v);
  if (d) dev_release(d);
}

static struct custom_operations dev_ops = {
  "rig.blindst6.dev", dev_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

CAMLprim value st6_open(value vmode) {
  CAMLparam1(vmode);
  CAMLlocal1(v);
  struct st6 *d = calloc(1, sizeof *d);
  if (!d) caml_raise_out_of_memory();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&d->word, 0);
  atomic_init(&d->refs, 1);
  d->mode = Int_val(vmode);
  if (d->mode == M_OK_REFRESH && start_thread(refresher, d, d) != 0) {
    dev_release(d);
    caml_failwith("blindst6: cannot start the refresh thread");
  }
  v = caml_alloc_custom(&dev_ops, sizeof(struct st6 *), 0, 1);
  Dev_val(v) = d;
  CAMLreturn(v);
}

/* The word, with acquire order: no lock, no allocation. */
CAMLprim value st6_signaled(value v) {
  return Val_long((intnat)atomic_load_explicit(&Dev_val(v)->word, memory_order_acquire));
}

CAMLprim value st6_last(value v) {
  struct st6 *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  uint64_t l = d->last;
  pthread_mutex_unlock(&d->mu);
  return Val_long((intnat)l);
}

/* After the queue's submit: [value] is the last value, also when the submit
 * failed; a successful one is remembered as work that may run. */
CAMLprim value st6_note(value v, value vvalue, value vok) {
  struct st6 *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  d->last = (uint64_t)Long_val(vvalue);
  if (Bool_val(vok)) {
    d->subs[d->nsubs++ % NSUBS] = d->last;
    d->last_ok = d->last;
  }
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* After a successful commit of the queue: what was submitted runs. */
CAMLprim value st6_committed(value v) {
  struct st6 *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  d->committed = d->last_ok;
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* After the queue's commit: work may be pending, wake the IRQ thread. */
CAMLprim value st6_kick(value v) {
  struct st6 *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  d->kick = 1;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* From sleep (before stop): retire hw into the word now. */
CAMLprim value st6_forward(value v, value vhw) {
  struct st6 *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  forward_locked(d, (uint64_t)Long_val(vhw));
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* One round of the IRQ thread, with the fence register's value hw read
 * just before.  Answers how long to nap (us) before the next round, or -1
 * when the thread is to exit. */
CAMLprim value st6_irq_step(value v, value vhw) {
  struct st6 *d = Dev_val(v);
  uint64_t hw = (uint64_t)Long_val(vhw);
  int64_t now = mono_us(), nap = POLL_BUSY_US;
  pthread_mutex_lock(&d->mu);
  if (d->done) {
    nap = -1;
  } else if (!d->stopped) {
    if (d->mode == M_OK_COALESCE) {
      /* Interrupts are coalesced over COALESCE_US; the write re-checks
       * stopped under mu (forward_locked), so stop revokes a pending one. */
      if (hw > atomic_load_explicit(&d->word, memory_order_relaxed)) {
        if (!d->pending_since) d->pending_since = now;
        if (now - d->pending_since >= COALESCE_US) {
          forward_locked(d, hw);
          d->pending_since = 0;
        } else nap = COALESCE_US - (now - d->pending_since);
      }
    } else forward_locked(d, hw);
    if (atomic_load_explicit(&d->word, memory_order_relaxed) >= d->last && !d->pending_since) nap = POLL_IDLE_US;
  } else if (!d->final_written) {
    /* The reaper: work ran at stop; hw reaches the last value once it ran
     * no more (hostmem's stop writes it then). */
    if (d->mode == M_OK_REAPER_STEPS) {
      nap = REAPER_STEP_US;
      if (d->step == 0 && hw == d->last) {
        /* The work that ran at stop ended: its own value first, if a later
         * one is the last, and the last one a reaper period later. */
        if (d->v_run && d->v_run < d->last) store_word(d, d->v_run);
        d->step = 1;
        d->step_at = now + REAPER_STEP_US;
      } else if (d->step == 1 && now >= d->step_at) {
        publish_final(d);
        d->done = 1;
        nap = -1;
      }
    } else if (hw == d->last) {
      publish_final(d);
      after_final(d, now);
    }
  } else if (d->mode == M_IRQ_EXIT_FLUSH && d->step == 1) {
    if (now >= d->step_at) {
      store_word(d, d->completed);  /* the bug: nothing checks stop */
      d->step = 2;
      d->done = 1;
      nap = -1;
    } else nap = d->step_at - now;
  } else {
    d->done = 1;
    nap = -1;
  }
  if (nap > 0 && d->mode == M_IRQ_EXIT_FLUSH && d->step == 1 && d->step_at - now < nap)
    nap = d->step_at - now > 0 ? d->step_at - now : 0;
  pthread_mutex_unlock(&d->mu);
  return Val_long(nap);
}

/* The IRQ thread's nap: up to us microseconds, without the OCaml runtime,
 * ended early by a kick (commit, stop).  mu is given back before the
 * runtime is taken again. */
CAMLprim value st6_nap(value v, value vus) {
  struct st6 *d = Dev_val(v);
  int64_t us = Long_val(vus);
  struct timespec ts;
  deadline_after_us(&ts, us < 0 ? 0 : us);
  caml_enter_blocking_section();
  pthread_mutex_lock(&d->mu);
  if (!d->kick) pthread_cond_timedwait(&d->cv, &d->mu, &ts);
  d->kick = 0;
  pthread_mutex_unlock(&d->mu);
  caml_leave_blocking_section();
  return Val_unit;
}

/* A short busy-wait step (for st6-ok-cancel's bounded wait for the cancel's
 * acknowledgement): keeps the runtime, blocks nothing. */
CAMLprim value st6_spin_us(value vus) {
  nap_us(Long_val(vus));
  return Val_unit;
}

CAMLprim value st6_now_us(value unit) {
  (void)unit;
  return Val_long(mono_us());
}

/* stop, after hostmem's stop, with hw read before it (hw0) and after it
 * (hw).  Never waits for work: with no work running (hw is the last value:
 * hostmem wrote it once no part ran), the last value goes into the word
 * now; otherwise the IRQ thread (the reaper) writes it once hw reaches it.
 * Work ran at stop's call when committed work had not retired by hw0. */
CAMLprim value st6_stop(value v, value vhw0, value vhw) {
  struct st6 *d = Dev_val(v);
  uint64_t hw0 = (uint64_t)Long_val(vhw0);
  uint64_t hw = (uint64_t)Long_val(vhw);
  int64_t now = mono_us();
  pthread_mutex_lock(&d->mu); /* st6-ok-refresh: the fence of every refresh */
  if (!d->stopped) {
    d->stopped = 1;
    d->kick = 1;
    pthread_cond_broadcast(&d->cv);
    if (d->mode == M_WB_TIMER)
      /* "Flush the cached word once more so that memory is coherent": the
       * cache holds what was retired, the last value went past it. */
      arm_late(d, WB_TIMER_US, d->completed, 0, 0);
    d->ran_at_stop = hw0 < d->committed;
    if (d->ran_at_stop) {
      /* The work running at the call: the first committed value above hw0. */
      uint64_t best = 0;
      unsigned n = d->nsubs < NSUBS ? d->nsubs : NSUBS;
      for (unsigned i = 0; i < n; i++)
        if (d->subs[i] > hw0 && d->subs[i] <= d->committed && (best == 0 || d->subs[i] < best)) best = d->subs[i];
      d->v_run = best;
    }
    /* st6-ok-reaper-steps leaves the last value to its reaper whenever work
     * ran at the call ("Otherwise ... the driver does once that work runs
     * no more"), even if that work ended meanwhile. */
    if (hw == d->last && !(d->mode == M_OK_REAPER_STEPS && d->ran_at_stop)) {
      publish_final(d);
      after_final(d, now);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return Val_unit;
}

/* For the check: stores into the word after the final one, so far. */
CAMLprim value st6_writes_after_final(value v) {
  struct st6 *d = Dev_val(v);
  pthread_mutex_lock(&d->mu);
  int64_t n = d->writes_after_final;
  pthread_mutex_unlock(&d->mu);
  return Val_long(n);
}
