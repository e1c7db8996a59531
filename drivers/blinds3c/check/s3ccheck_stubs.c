/* s3ccheck's C side: who keeps another OCaml thread from running.
 *
 * Two records, both in CLOCK_MONOTONIC ns:
 *  - the observer's gaps: an OCaml thread spins calling s3cc_obs_note; each
 *    pause of more than GAP_NS between two of its calls is a time it did not
 *    run (another thread had the runtime, or the OS had its CPU);
 *  - the sleeper's hold: the thread that installed the hooks (the check's
 *    main thread, which calls sleep) is followed through the runtime's
 *    blocking-section hooks while a sleep call is in flight: from the call's
 *    start to its first caml_enter_blocking_section, and from each return of
 *    caml_leave_blocking_section (the runtime taken back) to the next enter
 *    or the call's end, it holds (or competes for) the runtime.
 * The time the observer did not run while the sleeper held the runtime is
 * the time the sleep kept another OCaml thread from running.  A helper
 * thread of the driver that takes the runtime while the sleeper is inside a
 * blocking section is not counted: the sleeper had released it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>

/* The runtime's blocking-section hooks (caml/signals.h, under CAML_INTERNALS),
 * which the threads library sets as it starts. */
extern void (*caml_enter_blocking_section_hook)(void);
extern void (*caml_leave_blocking_section_hook)(void);

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------ the sleeper */

#define MAXEV (1 << 20)
enum { HELD = 1, FREE = 0 };
static int64_t ev_t[MAXEV];
static char ev_k[MAXEV];
static int nev;            /* written by the sleeper thread only */
static atomic_int active;  /* a sleep call is in flight */
static pthread_t sleeper;
static void (*saved_enter)(void);
static void (*saved_leave)(void);

static void note(int k) {
  if (nev < MAXEV) {
    ev_t[nev] = now_ns();
    ev_k[nev] = (char)k;
    nev++;
  }
}

static void enter_hook(void) {
  if (atomic_load(&active) && pthread_equal(pthread_self(), sleeper)) note(FREE);
  saved_enter();
}

static void leave_hook(void) {
  saved_leave();
  if (atomic_load(&active) && pthread_equal(pthread_self(), sleeper)) note(HELD);
}

/* Called by the main thread before any other thread starts. */
CAMLprim value s3cc_install(value unit) {
  (void)unit;
  sleeper = pthread_self();
  saved_enter = caml_enter_blocking_section_hook;
  saved_leave = caml_leave_blocking_section_hook;
  caml_enter_blocking_section_hook = enter_hook;
  caml_leave_blocking_section_hook = leave_hook;
  return Val_unit;
}

CAMLprim value s3cc_sleep_begin(value unit) {
  (void)unit;
  note(HELD);
  atomic_store(&active, 1);
  return Val_unit;
}

CAMLprim value s3cc_sleep_end(value unit) {
  (void)unit;
  atomic_store(&active, 0);
  note(FREE);
  return Val_unit;
}

/* ----------------------------------------------------- the observer */

#define GAP_NS 100000LL /* 0.1 ms */
#define MAXGAP (1 << 20)
static int64_t gap_a[MAXGAP], gap_b[MAXGAP];
static int ngap;
static int64_t obs_last;
static int64_t obs_turns;

CAMLprim value s3cc_obs_note(value unit) {
  (void)unit;
  int64_t t = now_ns();
  if (obs_last && t - obs_last > GAP_NS && ngap < MAXGAP) {
    gap_a[ngap] = obs_last;
    gap_b[ngap] = t;
    ngap++;
  }
  obs_last = t;
  obs_turns++;
  return Val_unit;
}

/* Called while neither the observer nor a sleep runs. */
CAMLprim value s3cc_reset(value unit) {
  (void)unit;
  nev = 0;
  ngap = 0;
  obs_last = 0;
  obs_turns = 0;
  return Val_unit;
}

/* s3cc_result (): (stolen ns, longest stolen stretch ns, held ns, observer
 * gaps ns, observer turns, events overflowed).  Called once the observer
 * stopped. */
CAMLprim value s3cc_result(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(r);
  int64_t stolen = 0, longest = 0, held = 0, gaps = 0;
  /* held intervals, in order */
  int g = 0;
  for (int i = 0; i < ngap; i++) gaps += gap_b[i] - gap_a[i];
  for (int i = 0; i + 1 < nev; i++) {
    if (ev_k[i] != HELD) continue;
    int64_t a = ev_t[i], b = ev_t[i + 1];
    held += b - a;
    while (g < ngap && gap_b[g] <= a) g++;
    for (int j = g; j < ngap && gap_a[j] < b; j++) {
      int64_t x = gap_a[j] > a ? gap_a[j] : a, y = gap_b[j] < b ? gap_b[j] : b;
      if (y > x) {
        stolen += y - x;
        if (y - x > longest) longest = y - x;
      }
    }
  }
  r = caml_alloc_tuple(6);
  Store_field(r, 0, Val_long(stolen));
  Store_field(r, 1, Val_long(longest));
  Store_field(r, 2, Val_long(held));
  Store_field(r, 3, Val_long(gaps));
  Store_field(r, 4, Val_long(obs_turns));
  Store_field(r, 5, Val_bool(nev >= MAXEV || ngap >= MAXGAP));
  CAMLreturn(r);
}

CAMLprim value s3cc_now_ns(value unit) {
  (void)unit;
  return Val_long(now_ns());
}
