/* blinds3b: the blocking steps of the s3b-* drivers' sleeps.
 *
 * The device is hostmem's (hostmem_stubs.c, linked in the same plugin); its
 * struct is private, so these stubs reach it only through hostmem's own
 * stubs, called with the value of the device: hm_signaled, hm_stopped,
 * hm_fault (which allocates only once the device faulted) and hm_wait
 * (which blocks on the device's events without the runtime).  The value may
 * be read only while the runtime is held, so a step that releases it in
 * slices of its own takes it back between slices to look at the device.
 *
 * The s3b_held_* stubs and the second parts of s3b_retake_wait and
 * s3b_half_wait block WITHOUT releasing the runtime: that is the SIG-3 bug
 * of the broken drivers.  The others release it for every block. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* hostmem's stubs (hostmem_stubs.c). */
extern value hm_signaled(value);
extern value hm_stopped(value);
extern value hm_fault(value);
extern value hm_wait(value, value, value);

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(int64_t us) {
  if (us <= 0) return;
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* Whether the wait is over on the device's side: the word moved, the
 * device stopped or faulted.  Runtime held; v rooted by the caller. */
static int settled(value v, value vseen) {
  if (Long_val(hm_signaled(v)) != Long_val(vseen)) return 1;
  if (Bool_val(hm_stopped(v))) return 1;
  if (hm_fault(v) != Val_none) return 1;
  return 0;
}

/* ---------------------------------------------- broken: runtime held */

/* s3b_held_wait dev seen ms slice_us: polls the device every slice_us
 * microseconds until settled or ms pass, sleeping in nanosleep between
 * polls WITH the runtime held (s3b-every3rd, s3b-shortheld). */
CAMLprim value s3b_held_wait(value v, value vseen, value vms, value vslice) {
  CAMLparam4(v, vseen, vms, vslice);
  int64_t deadline = now_us() + (int64_t)Long_val(vms) * 1000;
  int64_t slice = Long_val(vslice);
  for (;;) {
    if (settled(v, vseen)) break;
    int64_t left = deadline - now_us();
    if (left <= 0) break;
    sleep_us(left < slice ? left : slice);
  }
  CAMLreturn(Val_unit);
}

/* s3b_held_nap us: one slice of a wait, nanosleep WITH the runtime held
 * (s3b-slices: the OCaml loop around it looks at the device). */
CAMLprim value s3b_held_nap(value vus) {
  sleep_us(Long_val(vus));
  return Val_unit;
}

/* The driver's own event (s3b-retake): a condition nothing signals but its
 * timeouts, standing for "the completion interrupt's bottom half". */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

/* s3b_retake_wait dev seen ms: a first wait on the device's events that
 * releases the runtime (hm_wait, up to 3 ms), then, the runtime taken back
 * to look at the device, a second block on the driver's own event, in
 * timed waits of 2 ms, WITHOUT releasing it again. */
CAMLprim value s3b_retake_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t ms = Long_val(vms);
  int64_t deadline = now_us() + ms * 1000;
  hm_wait(v, vseen, Val_long(ms < 3 ? ms : 3));
  while (!settled(v, vseen)) {
    int64_t left = deadline - now_us();
    if (left <= 0) break;
    if (left > 2000) left = 2000;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += left * 1000;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&ev_mu);
    pthread_cond_timedwait(&ev_cv, &ev_mu, &ts);
    pthread_mutex_unlock(&ev_mu);
  }
  CAMLreturn(Val_unit);
}

/* s3b_half_wait dev seen ms: releases the runtime around the first half of
 * its block only (hm_wait for ms/2), then blocks the second half in 1-ms
 * nanosleeps WITH the runtime held. */
CAMLprim value s3b_half_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t ms = Long_val(vms);
  int64_t deadline = now_us() + ms * 1000;
  hm_wait(v, vseen, Val_long(ms / 2));
  while (!settled(v, vseen)) {
    int64_t left = deadline - now_us();
    if (left <= 0) break;
    sleep_us(left < 1000 ? left : 1000);
  }
  CAMLreturn(Val_unit);
}

/* ------------------------------------------ conforming: runtime released */

/* s3b_tiny_wait dev seen ms: blocks in slices of 200 us, each a nanosleep
 * inside a blocking section; the runtime is taken back between slices only
 * to look at the device. */
CAMLprim value s3b_tiny_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  int64_t deadline = now_us() + (int64_t)Long_val(vms) * 1000;
  while (!settled(v, vseen)) {
    int64_t left = deadline - now_us();
    if (left <= 0) break;
    caml_enter_blocking_section();
    sleep_us(left < 200 ? left : 200);
    caml_leave_blocking_section();
  }
  CAMLreturn(Val_unit);
}

/* The driver's doorbell (s3b-ok-eventfd): an eventfd its stop kicks. */
static int efd = -1;
static pthread_once_t efd_once = PTHREAD_ONCE_INIT;
static void efd_init(void) { efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

CAMLprim value s3b_efd_kick(value unit) {
  (void)unit;
  pthread_once(&efd_once, efd_init);
  if (efd >= 0) {
    uint64_t one = 1;
    ssize_t r = write(efd, &one, sizeof one);
    (void)r;
  }
  return Val_unit;
}

/* s3b_efd_wait dev seen ms: poll(2) on the doorbell, timeouts of at most
 * 5 ms, inside a blocking section; the device looked at between polls. */
CAMLprim value s3b_efd_wait(value v, value vseen, value vms) {
  CAMLparam3(v, vseen, vms);
  pthread_once(&efd_once, efd_init);
  int64_t deadline = now_us() + (int64_t)Long_val(vms) * 1000;
  while (!settled(v, vseen)) {
    int64_t left = deadline - now_us();
    if (left <= 0) break;
    int tmo = (int)((left + 999) / 1000);
    if (tmo > 5) tmo = 5;
    caml_enter_blocking_section();
    if (efd >= 0) {
      struct pollfd p = { efd, POLLIN, 0 };
      if (poll(&p, 1, tmo) > 0) {
        uint64_t n;
        ssize_t r = read(efd, &n, sizeof n);
        (void)r;
      }
    } else sleep_us((int64_t)tmo * 1000);
    caml_leave_blocking_section();
  }
  CAMLreturn(Val_unit);
}

/* The burner (s3b-ok-burner): a C thread of the driver's own, never an
 * OCaml thread, which burns CPU while any sleep of the driver blocks.
 * Started with every signal blocked but the fault signals (SIG-8). */
static atomic_int sleepers;
static atomic_ulong burnt;
static pthread_mutex_t burn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t burn_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t burn_once = PTHREAD_ONCE_INIT;

static void *burner(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&burn_mu);
    while (atomic_load(&sleepers) == 0) pthread_cond_wait(&burn_cv, &burn_mu);
    pthread_mutex_unlock(&burn_mu);
    volatile unsigned long x = 0;
    while (atomic_load(&sleepers) > 0) {
      for (int i = 0; i < 10000; i++) x += (unsigned long)i * 2654435761u;
      atomic_fetch_add(&burnt, 1);
    }
  }
  return NULL;
}

static void burn_init(void) {
  sigset_t old;
  rig_mask(&old);
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&tid, &attr, burner, NULL);
  pthread_attr_destroy(&attr);
  rig_restore(&old);
}

CAMLprim value s3b_burn_enter(value unit) {
  (void)unit;
  pthread_once(&burn_once, burn_init);
  pthread_mutex_lock(&burn_mu);
  atomic_fetch_add(&sleepers, 1);
  pthread_cond_signal(&burn_cv);
  pthread_mutex_unlock(&burn_mu);
  return Val_unit;
}

CAMLprim value s3b_burn_leave(value unit) {
  (void)unit;
  atomic_fetch_sub(&sleepers, 1);
  return Val_unit;
}

CAMLprim value s3b_burnt(value unit) {
  (void)unit;
  return Val_long((intnat)atomic_load(&burnt));
}
