/* blind: the few blocking steps the blind drivers need, each releasing the
 * OCaml runtime while it blocks (SIG-3), as a wait's step must. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
#include <caml/threads.h>

/* blind_nap ms: sleeps ms milliseconds. */
value blind_nap(value vms) {
  long ms = Long_val(vms);
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  caml_enter_blocking_section();
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  caml_leave_blocking_section();
  return Val_unit;
}

/* blind_now_ms (): the monotonic clock, in milliseconds. */
value blind_now_ms(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* blind_block_forever (): waits on a condition nobody signals. */
static pthread_mutex_t never_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never_cv = PTHREAD_COND_INITIALIZER;

value blind_block_forever(value unit) {
  (void)unit;
  caml_enter_blocking_section();
  pthread_mutex_lock(&never_mu);
  for (;;) pthread_cond_wait(&never_cv, &never_mu);
  /* not reached */
  return Val_unit;
}
