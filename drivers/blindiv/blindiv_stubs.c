/* blindiv: a monotonic clock, a nap that releases the runtime, and a
 * per-thread random draw seeded from the pid, the clock and the thread
 * (re-seeded in a forked child). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define CAML_NAME_SPACE
#include <caml/mlvalues.h>
#include <caml/threads.h>

CAMLprim value iv_now_us(value unit) {
  (void)unit;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Val_long((intnat)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

/* iv_nap_us n: sleeps n microseconds without the OCaml runtime. */
CAMLprim value iv_nap_us(value vn) {
  intnat n = Long_val(vn);
  if (n < 0) n = 0;
  struct timespec ts = { n / 1000000, (n % 1000000) * 1000 };
  caml_enter_blocking_section();
  nanosleep(&ts, NULL);
  caml_leave_blocking_section();
  return Val_unit;
}

static __thread uint64_t st;
static __thread pid_t st_pid;

/* iv_draw permille: true with probability permille/1000. */
CAMLprim value iv_draw(value vp) {
  pid_t p = getpid();
  if (st == 0 || st_pid != p) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    st = ((uint64_t)p * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
         ((uint64_t)(uintptr_t)pthread_self() * 0xBF58476D1CE4E5B9ULL);
    if (st == 0) st = 1;
    st_pid = p;
  }
  st ^= st << 13;
  st ^= st >> 7;
  st ^= st << 17;
  return Val_bool((intnat)(st % 1000) < Long_val(vp));
}
