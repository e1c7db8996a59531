/* blindhw: the hw-* drivers' own timeline word, in host memory this file
 * owns, and the clock and nap they use.
 *
 * A word (struct hw_word) is `size` bytes (8 or more, a multiple of 8,
 * 64-byte aligned) of host memory; the value lives in its first 8 bytes,
 * in one of three layouts:
 *   0  little-endian 64-bit (the host's own order here),
 *   1  big-endian 64-bit,
 *   2  two 32-bit halves in swapped order (the high half first).
 * Every layout is written with one 64-bit atomic store, release order, and
 * read with one 64-bit atomic load, acquire order (hw_load).
 *
 * Writers (the driver's helper thread, its sleep, its stop) take a ticket
 * BEFORE they read hostmem's word, and hw_copy drops a copy whose ticket is
 * older than the last one it took: a value read earlier never lands after
 * one read later (hostmem's word only moves forward).  hw_copy writes only
 * when the value differs from the last one it wrote, unless forced (stop),
 * so once hostmem's word holds its last value no copy of it writes again
 * (STOP-6), whatever the host wrote into the word meanwhile.
 *
 * The mutex is held only inside hw_copy, around a few stores, never while
 * OCaml code runs or a signal handler may: it is not a lock rig_hold counts
 * (LOCK-3), like hostmem's own. */
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

struct hw_word {
  _Atomic uint64_t *mem; /* size bytes; the value in mem[0] */
  intnat size;
  int layout;
  pthread_mutex_t mu;
  intnat last_ticket; /* under mu */
  uint64_t written;   /* under mu: the last value hw_copy wrote */
  atomic_int freed;   /* rig freed the word: nothing writes it any more */
};

static uint64_t encode(int layout, uint64_t v) {
  switch (layout) {
  case 1: return __builtin_bswap64(v);
  case 2: return (v << 32) | (v >> 32);
  default: return v;
  }
}

static uint64_t decode(int layout, uint64_t m) {
  switch (layout) {
  case 1: return __builtin_bswap64(m);
  case 2: return (m << 32) | (m >> 32);
  default: return m;
  }
}

#define Word_val(v) (*(struct hw_word **)Data_custom_val(v))

static void word_finalize(value v) {
  struct hw_word *w = Word_val(v);
  if (!w) return;
  pthread_mutex_destroy(&w->mu);
  free((void *)w->mem);
  free(w);
}

static struct custom_operations word_ops = {
  "rig.blindhw.word", word_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* hw_word_new size layout: a zeroed word (value 0 in every layout). */
CAMLprim value hw_word_new(value vsize, value vlayout) {
  CAMLparam2(vsize, vlayout);
  CAMLlocal1(v);
  intnat size = Long_val(vsize);
  if (size < 8 || size % 8) caml_invalid_argument("blindhw: word size");
  struct hw_word *w = calloc(1, sizeof *w);
  if (!w) caml_raise_out_of_memory();
  void *p = NULL;
  if (posix_memalign(&p, 64, (size_t)size) != 0) {
    free(w);
    caml_raise_out_of_memory();
  }
  memset(p, 0, (size_t)size);
  w->mem = p;
  w->size = size;
  w->layout = Int_val(vlayout);
  pthread_mutex_init(&w->mu, NULL);
  w->last_ticket = -1;
  w->written = 0;
  atomic_init(&w->freed, 0);
  v = caml_alloc_custom(&word_ops, sizeof(struct hw_word *), 0, 1);
  Word_val(v) = w;
  CAMLreturn(v);
}

/* The value in the word: one atomic load, acquire order (TIME-1).  No lock,
 * no allocation, no block. */
CAMLprim value hw_load(value vw) {
  struct hw_word *w = Word_val(vw);
  uint64_t m = atomic_load_explicit(&w->mem[0], memory_order_acquire);
  return Val_long((intnat)decode(w->layout, m));
}

/* hw_copy w ticket v force: writes v into the word (release order) unless
 * the word is freed, ticket is older than one already taken, or v is the
 * last value written and force is false.  true iff it wrote. */
CAMLprim value hw_copy(value vw, value vticket, value vv, value vforce) {
  struct hw_word *w = Word_val(vw);
  intnat ticket = Long_val(vticket);
  uint64_t v = (uint64_t)Long_val(vv);
  int wrote = 0;
  pthread_mutex_lock(&w->mu);
  if (!atomic_load(&w->freed) && ticket >= w->last_ticket) {
    w->last_ticket = ticket;
    if (Bool_val(vforce) || v != w->written) {
      atomic_store_explicit(&w->mem[0], encode(w->layout, v), memory_order_release);
      w->written = v;
      wrote = 1;
    }
  }
  pthread_mutex_unlock(&w->mu);
  return Val_bool(wrote);
}

CAMLprim value hw_free(value vw) {
  struct hw_word *w = Word_val(vw);
  pthread_mutex_lock(&w->mu);
  atomic_store(&w->freed, 1);
  pthread_mutex_unlock(&w->mu);
  return Val_unit;
}

CAMLprim value hw_freed(value vw) { return Val_bool(atomic_load(&Word_val(vw)->freed)); }

/* hw_access w off buf boff len write: copies between the word's bytes
 * [off, off+len) and buf, 8 aligned bytes at a time with atomic loads and
 * stores (a partly covered chunk is merged with a compare-and-swap), so
 * that a copy never tears the value.  Bounds are checked by the caller. */
CAMLprim value hw_access(value vw, value voff, value vbuf, value vboff, value vlen, value vwrite) {
  struct hw_word *w = Word_val(vw);
  intnat off = Long_val(voff), len = Long_val(vlen);
  unsigned char *b = (unsigned char *)Bytes_val(vbuf) + Long_val(vboff);
  int write = Bool_val(vwrite);
  intnat end = off + len;
  for (intnat c = off & ~(intnat)7; c < end; c += 8) {
    _Atomic uint64_t *cell = &w->mem[c / 8];
    intnat lo = c < off ? off : c, hi = c + 8 > end ? end : c + 8;
    if (!write) {
      uint64_t m = atomic_load_explicit(cell, memory_order_acquire);
      memcpy(b + (lo - off), (unsigned char *)&m + (lo - c), (size_t)(hi - lo));
    } else {
      uint64_t old = atomic_load_explicit(cell, memory_order_relaxed), nw;
      do {
        nw = old;
        memcpy((unsigned char *)&nw + (lo - c), b + (lo - off), (size_t)(hi - lo));
      } while (!atomic_compare_exchange_weak_explicit(cell, &old, nw, memory_order_release, memory_order_relaxed));
    }
  }
  return Val_unit;
}
CAMLprim value hw_access_byte(value *argv, int argn) {
  (void)argn;
  return hw_access(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5]);
}

CAMLprim value hw_now_us(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((intnat)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

/* hw_nap_us n: sleeps n microseconds without the OCaml runtime. */
CAMLprim value hw_nap_us(value vn) {
  intnat n = Long_val(vn);
  if (n < 0) n = 0;
  struct timespec ts = { n / 1000000, (n % 1000000) * 1000 };
  caml_enter_blocking_section();
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
  caml_leave_blocking_section();
  return Val_unit;
}
