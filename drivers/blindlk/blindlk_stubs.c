/* blindlk: a ticker thread of the device's own (a heartbeat a watchdog
 * reads), started in C.  lk_ticker_start masked: the thread is created
 * under the caller's mask, which a make running under rig_mask
 * (Prim.masked) blocks, so with masked true the ticker blocks signals for
 * its life (SIG-8); with masked false (lk-ticker-clean-mask) the ticker
 * empties its own mask as it starts (see blindlk.ml). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#include "rig_edge.h"

struct ticker {
  atomic_int refs;
  atomic_int stop;
  atomic_long ticks;
  atomic_long tid;
  atomic_int clean;
};

static void ticker_release(struct ticker *t) {
  if (atomic_fetch_sub(&t->refs, 1) == 1) free(t);
}

static void *tick(void *arg) {
  struct ticker *t = arg;
  if (atomic_load(&t->clean)) {
    /* a daemon thread should not keep whatever mask its creator had */
    sigset_t empty;
    sigemptyset(&empty);
    pthread_sigmask(SIG_SETMASK, &empty, NULL);
  }
  atomic_store(&t->tid, (long)syscall(SYS_gettid));
  struct timespec ts = { 0, 5 * 1000000L };
  while (!atomic_load(&t->stop)) {
    nanosleep(&ts, NULL);
    atomic_fetch_add(&t->ticks, 1);
  }
  ticker_release(t);
  return NULL;
}

#define Ticker_val(v) (*(struct ticker **)Data_custom_val(v))
static void ticker_finalize(value v) {
  struct ticker *t = Ticker_val(v);
  if (t) {
    atomic_store(&t->stop, 1);
    ticker_release(t);
  }
}
static struct custom_operations ticker_ops = {
  "rig.blindlk.ticker", ticker_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

CAMLprim value lk_ticker_start(value vmasked) {
  CAMLparam1(vmasked);
  CAMLlocal1(v);
  struct ticker *t = calloc(1, sizeof *t);
  if (!t) caml_raise_out_of_memory();
  atomic_init(&t->refs, 2);
  atomic_init(&t->clean, !Bool_val(vmasked));
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&tid, &attr, tick, t);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(t);
    caml_failwith("blindlk: cannot start the ticker");
  }
  v = caml_alloc_custom(&ticker_ops, sizeof(struct ticker *), 0, 1);
  Ticker_val(v) = t;
  CAMLreturn(v);
}

CAMLprim value lk_ticker_stop(value v) {
  atomic_store(&Ticker_val(v)->stop, 1);
  return Val_unit;
}
CAMLprim value lk_ticker_ticks(value v) { return Val_long(atomic_load(&Ticker_val(v)->ticks)); }
CAMLprim value lk_ticker_tid(value v) { return Val_long(atomic_load(&Ticker_val(v)->tid)); }
