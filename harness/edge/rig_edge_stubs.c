/* C side of the edge: the per-thread lock count, the signal masks of
 * rig_edge.h, and the OCaml stubs of Rig_edge and Rig_edge_primitives
 * (submissions laid out in C memory, calls of a driver's queue functions). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/threads.h>

#include "rig_edge.h"

/* Exported by the runtime, declared only under CAML_INTERNALS. */
CAMLextern int caml_rev_convert_signal_number(int);

/* ---------------------------------------------------------------- locks */

static __thread int holds_count;

/* Takes of counted locks and waits entered on this thread, for the
 * certifier's LOCK-6 probe (locate and peer do neither). */
static __thread long activity;

int rig_holds(void) { return holds_count; }
void rig_hold(void) { holds_count++; activity++; }
void rig_give(void) { holds_count--; }

value caml_rig_holds(value unit) { (void)unit; return Val_int(holds_count); }
value caml_rig_hold(value unit) { (void)unit; holds_count++; activity++; return Val_unit; }
value caml_rig_give(value unit) { (void)unit; holds_count--; return Val_unit; }

/* ------------------------------------------------------------- signals */

static const int fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL,
                                    SIGTRAP, SIGSYS, SIGABRT};
#define N_FAULT_SIGNALS (sizeof fault_signals / sizeof fault_signals[0])

int rig_fault_signal(int signo) {
  for (size_t i = 0; i < N_FAULT_SIGNALS; i++)
    if (fault_signals[i] == signo) return 1;
  return 0;
}

static void rig_blocked_set(sigset_t *set) {
  sigfillset(set);
  for (size_t i = 0; i < N_FAULT_SIGNALS; i++) sigdelset(set, fault_signals[i]);
}

/* The mask the thread had when rig (or a driver function's own check)
 * last masked it: what rig_unblock lets through during a wait. */
static __thread sigset_t premask;
static __thread int masked_depth;

/* Shields open on this thread: inside one, a wait keeps every signal
 * blocked ("waits included", SIG-7), also when the shield began inside a
 * masked call, whose waits otherwise give back the mask from before it. */
static __thread int shield_depth;

/* Whether the calling thread is inside a wait: set by rig_unblock, cleared
 * by rig_block (Rig_edge_primitives.in_wait; for the certifier's signal
 * probes).  Set before the mask opens and cleared after it closes, so that
 * a handler that runs while the mask is open sees it set. */
static __thread int in_wait_flag;

/* The mask the primitives last left this thread with, as the kernel holds
 * it: a mask that differs was changed by other means (SIG-9). */
static __thread sigset_t left_mask;
static __thread int left_known;

/* Waits entered on this thread, and the count at which the next one sends
 * this thread SIGUSR2 (0: none), for the certifier's signal at every wait
 * (ASYNC-1, ASYNC-2): sent as the wait opens the mask, its OCaml handler
 * runs as rig_block closes it, and what it raises ends the wait. */
static __thread long waits;
static __thread long signal_at_wait;

/* Masks and shields the OCaml primitives took on this thread (SIG-6, SIG-7
 * probes); a C finaliser's rig_shield_begin, which runs inside the GC, is
 * not an OCaml finaliser's. */
static __thread long masks;

/* While the certifier's SIG-3 probe asks it of this thread: the time this
 * thread waited for a CPU inside its waits (from rig_unblock to rig_block),
 * in ns, from the kernel's per-thread figures.  What it waited outside
 * them it did holding the OCaml runtime, which the probe must not blame on
 * the wait.  Off, a wait reads nothing. */
static __thread int queue_accounting;
static __thread long long queued_at_unblock = -1;
static __thread long long queued_in_waits;

/* With the same switch, the wall time the thread spent inside waits and,
 * of it, the time it held the OCaml runtime: from the wait's start or a
 * blocking section's end to the next blocking section or the wait's end.
 * A step that released the runtime (caml_enter_blocking_section, or
 * caml_release_runtime_system, both through the runtime's hook) is seen
 * releasing it; any other way of letting it go (Thread.yield) counts as
 * held, so that figure only ever overstates what a wait kept.  What the
 * thread waited for a CPU while holding it stays counted: it kept the
 * runtime meanwhile (a step that naps holding it waits for a CPU at each
 * wake on a loaded machine; a step that holds it for microseconds is
 * seldom preempted there). */
static __thread long long in_wait_since = -1;
static __thread long long in_waits_ns;
static __thread long long held_since = -1;
static __thread long long held_in_waits_ns;
/* Inside a blocking section (the runtime let go), as the hooks saw it: a C
 * step may call rig_unblock and rig_block there, around its blocking call. */
static __thread int runtime_released;

static long long monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* This thread's time runnable but off a CPU so far, in ns; -1 unknown. */
static long long own_queued_ns(void) {
  int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  unsigned long long ran, queued;
  if (sscanf(buf, "%llu %llu", &ran, &queued) != 2) return -1;
  return (long long)queued;
}

static void held_begin(long long now) { held_since = now; }

static void held_end(long long now) {
  if (held_since < 0) return;
  held_in_waits_ns += now - held_since;
  held_since = -1;
}

/* The runtime's hooks (caml/signals.h keeps their declarations for the
 * runtime's own use). */
extern void (*caml_enter_blocking_section_hook)(void);
extern void (*caml_leave_blocking_section_hook)(void);

static void (*runtime_enter_hook)(void);
static void (*runtime_leave_hook)(void);

/* errno is kept: a C step may read it after its blocking section ends. */
static void noting_enter_hook(void) {
  if (queue_accounting) {
    runtime_released = 1;
    if (held_since >= 0) {
      int e = errno;
      held_end(monotonic_ns());
      errno = e;
    }
  }
  runtime_enter_hook();
}

static void noting_leave_hook(void) {
  runtime_leave_hook();
  if (queue_accounting) {
    runtime_released = 0;
    if (in_wait_flag) {
      int e = errno;
      held_begin(monotonic_ns());
      errno = e;
    }
  }
}

/* Chained once, as the primitives' module starts, after the threads
 * library's (a dependency, started first) and before any thread is made:
 * the runtime reads the hooks without a lock.  They stay; a thread that
 * accounts nothing pays one thread-local test per blocking section. */
value caml_rig_chain_runtime_hooks(value unit) {
  (void)unit;
  if (caml_enter_blocking_section_hook != noting_enter_hook) {
    runtime_enter_hook = caml_enter_blocking_section_hook;
    runtime_leave_hook = caml_leave_blocking_section_hook;
    caml_enter_blocking_section_hook = noting_enter_hook;
    caml_leave_blocking_section_hook = noting_leave_hook;
  }
  return Val_unit;
}

/* Whether the hooks are still the ones chained (a library that set its own
 * later would have dropped them): without them, the time held in waits is
 * the time in waits. */
value caml_rig_runtime_hooks_chained(value unit) {
  (void)unit;
  return Val_bool(caml_enter_blocking_section_hook == noting_enter_hook
                  && caml_leave_blocking_section_hook == noting_leave_hook);
}

static void note_left(void) {
  sigemptyset(&left_mask); /* the kernel fills only the signals it has */
  pthread_sigmask(SIG_BLOCK, NULL, &left_mask);
  left_known = 1;
}

/* The signals a mask can hold (all but SIGKILL, SIGSTOP and the C
 * library's own), found once by blocking every signal for a moment: with
 * them, the mask a primitive sets is known without reading it back, a
 * system call less at each of them. */
static sigset_t blockable;
static pthread_once_t blockable_found = PTHREAD_ONCE_INIT;

static void find_blockable(void) {
  sigset_t all, prev;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &prev);
  sigemptyset(&blockable); /* the kernel fills only the signals it has */
  pthread_sigmask(SIG_SETMASK, &prev, &blockable);
}

/* The primitive just set the mask to [m]: the thread holds [m] but for
 * the signals no mask holds (and [m]'s bits past the kernel's, which a
 * mask read back from it leaves as they were). */
static void left_set(const sigset_t *m) {
  pthread_once(&blockable_found, find_blockable);
  sigandset(&left_mask, m, &blockable);
  left_known = 1;
}

/* The primitive just blocked [set] on top of [prev]. */
static void left_added(const sigset_t *prev, const sigset_t *set) {
  sigset_t both;
  sigorset(&both, prev, set);
  left_set(&both);
}

void rig_mask(sigset_t *old) {
  sigset_t set, prev;
  rig_blocked_set(&set);
  pthread_sigmask(SIG_SETMASK, &set, &prev);
  if (masked_depth++ == 0) premask = prev;
  if (old) *old = prev;
  left_set(&set);
}

void rig_restore(const sigset_t *old) {
  if (masked_depth > 0) masked_depth--;
  pthread_sigmask(SIG_SETMASK, old, NULL);
  left_set(old);
}

void rig_unblock(void) {
  in_wait_flag = 1;
  activity++;
  if (++waits == signal_at_wait) {
    signal_at_wait = 0;
    pthread_kill(pthread_self(), SIGUSR2);
  }
  if (masked_depth > 0 && shield_depth == 0) {
    pthread_sigmask(SIG_SETMASK, &premask, NULL);
    left_set(&premask);
  } else
    note_left();
  if (queue_accounting) {
    queued_at_unblock = own_queued_ns();
    in_wait_since = monotonic_ns();
    if (!runtime_released) held_begin(in_wait_since);
  }
}

void rig_block(void) {
  int e = errno; /* the step's, for a C driver that reads it after this */
  /* the clock first: the read of the kernel's figure is no time held */
  if (queue_accounting && in_wait_since >= 0) {
    long long now = monotonic_ns();
    in_waits_ns += now - in_wait_since;
    held_end(now);
  }
  if (queue_accounting && queued_at_unblock >= 0) {
    long long q = own_queued_ns();
    if (q >= queued_at_unblock) queued_in_waits += q - queued_at_unblock;
    queued_at_unblock = -1;
  }
  errno = e;
  in_wait_since = held_since = -1;
  if (masked_depth > 0 && shield_depth == 0) {
    sigset_t set;
    rig_blocked_set(&set);
    pthread_sigmask(SIG_SETMASK, &set, NULL);
    left_set(&set);
  } else
    note_left();
  in_wait_flag = 0;
}

void rig_shield_begin(sigset_t *old) {
  sigset_t set;
  rig_blocked_set(&set);
  pthread_sigmask(SIG_BLOCK, &set, old);
  shield_depth++;
  left_added(old, &set);
}

void rig_shield_end(const sigset_t *old) {
  if (shield_depth > 0) shield_depth--;
  pthread_sigmask(SIG_SETMASK, old, NULL);
  left_set(old);
}

/* An OCaml mask is the bytes of a sigset_t, in a string. */
static value mask_to_value(const sigset_t *s) {
  value v = caml_alloc_string(sizeof(sigset_t));
  memcpy(Bytes_val(v), s, sizeof(sigset_t));
  return v;
}

value caml_rig_mask(value unit) {
  (void)unit;
  sigset_t old;
  rig_mask(&old);
  masks++;
  return mask_to_value(&old);
}

value caml_rig_restore(value m) {
  sigset_t s;
  memcpy(&s, String_val(m), sizeof s);
  rig_restore(&s);
  return Val_unit;
}

value caml_rig_unblock(value unit) { (void)unit; rig_unblock(); return Val_unit; }
value caml_rig_block(value unit) { (void)unit; rig_block(); return Val_unit; }
value caml_rig_in_wait(value unit) { (void)unit; return Val_bool(in_wait_flag); }

value caml_rig_shield_begin(value unit) {
  (void)unit;
  sigset_t old;
  rig_shield_begin(&old);
  masks++;
  return mask_to_value(&old);
}

value caml_rig_shield_end(value m) {
  sigset_t s;
  memcpy(&s, String_val(m), sizeof s);
  rig_shield_end(&s);
  return Val_unit;
}

/* Runs the OCaml handlers of pending signals now; raises what they raise. */
value caml_rig_run_pending(value unit) {
  (void)unit;
  caml_process_pending_actions();
  return Val_unit;
}

/* Blocks every signal of the calling thread, for the life of a thread a
 * driver starts (SIG-8). */
value caml_rig_block_all(value unit) {
  (void)unit;
  sigset_t set, prev;
  rig_blocked_set(&set);
  pthread_sigmask(SIG_BLOCK, &set, &prev);
  left_added(&prev, &set);
  return Val_unit;
}

/* ------------------------------------------- what the certifier observes */

static void current_mask(sigset_t *m) {
  sigemptyset(m);
  pthread_sigmask(SIG_BLOCK, NULL, m);
}

/* Whether the thread's mask is the one the primitives last left it with
 * (true on a thread where no primitive has set one yet). */
value caml_rig_mask_as_left(value unit) {
  (void)unit;
  if (!left_known) return Val_true;
  sigset_t now;
  current_mask(&now);
  for (int s = 1; s < NSIG; s++)
    if (sigismember(&now, s) != sigismember(&left_mask, s)) return Val_false;
  return Val_true;
}

/* Whether the thread blocks every signal rig_mask blocks, of those a
 * thread can block (not SIGKILL, SIGSTOP, nor the C library's own). */
value caml_rig_blocks_rig_set(value unit) {
  (void)unit;
  sigset_t now, rig;
  current_mask(&now);
  rig_blocked_set(&rig);
  for (int s = 1; s < NSIG; s++) {
    if (s == SIGKILL || s == SIGSTOP || (s >= 32 && s < SIGRTMIN)) continue;
    if (sigismember(&rig, s) && !sigismember(&now, s)) return Val_false;
  }
  return Val_true;
}

value caml_rig_activity(value unit) { (void)unit; return Val_long(activity); }
value caml_rig_masks(value unit) { (void)unit; return Val_long(masks); }
value caml_rig_waits(value unit) { (void)unit; return Val_long(waits); }

value caml_rig_account_queued_in_waits(value on) {
  queue_accounting = Bool_val(on);
  queued_at_unblock = in_wait_since = held_since = -1;
  runtime_released = 0; /* called from OCaml: the runtime is held */
  return Val_unit;
}

value caml_rig_time_in_waits(value unit) {
  CAMLparam1(unit);
  CAMLlocal1(pair);
  pair = caml_alloc_tuple(2);
  Store_field(pair, 0, caml_copy_double((double)in_waits_ns / 1e6));
  Store_field(pair, 1, caml_copy_double((double)held_in_waits_ns / 1e6));
  CAMLreturn(pair);
}

value caml_rig_queued_in_waits(value unit) {
  (void)unit;
  return caml_copy_double((double)queued_in_waits / 1e6);
}

value caml_rig_signal_at_wait(value n) {
  signal_at_wait = Long_val(n) > 0 ? waits + Long_val(n) : 0;
  return Val_unit;
}

value caml_rig_fault_signals(value unit) {
  CAMLparam1(unit);
  CAMLlocal2(list, cell);
  list = Val_emptylist;
  for (size_t i = N_FAULT_SIGNALS; i-- > 0;) {
    cell = caml_alloc(2, 0);
    Store_field(cell, 0, Val_int(caml_rev_convert_signal_number(fault_signals[i])));
    Store_field(cell, 1, list);
    list = cell;
  }
  CAMLreturn(list);
}

/* --------------------------------------------------------- submissions */

/* A submission's C memory lives outside the OCaml heap, so that a blocking
 * queue call may run without the runtime lock while the GC moves blocks. */
static void submission_finalize(value v) {
  struct rig_submission *s = *(struct rig_submission **)Data_custom_val(v);
  if (s) {
    free((void *)s->parts);
    free(s);
  }
}

static struct custom_operations submission_ops = {
    "rig_conform.submission", submission_finalize, custom_compare_default,
    custom_hash_default, custom_serialize_default, custom_deserialize_default,
    custom_compare_ext_default, custom_fixed_length_default};

#define Submission_val(v) (*(struct rig_submission **)Data_custom_val(v))

/* parts: an array of (op, int64 array of args) */
value caml_rig_encode(value parts) {
  CAMLparam1(parts);
  CAMLlocal1(v);
  mlsize_t n = Wosize_val(parts);
  struct rig_submission *s = calloc(1, sizeof *s);
  struct rig_part *p = calloc(n ? n : 1, sizeof *p);
  if (!s || !p) {
    free(s);
    free(p);
    caml_raise_out_of_memory();
  }
  for (mlsize_t i = 0; i < n; i++) {
    value part = Field(parts, i);
    value args = Field(part, 1);
    p[i].op = (uint32_t)Int_val(Field(part, 0));
    for (mlsize_t k = 0; k < Wosize_val(args) && k < RIG_PART_ARGS; k++)
      p[i].a[k] = (uint64_t)Int64_val(Field(args, k));
  }
  s->n_parts = (uint32_t)n;
  s->parts = p;
  v = caml_alloc_custom_mem(&submission_ops, sizeof s, sizeof *s + n * sizeof *p);
  Submission_val(v) = s;
  CAMLreturn(v);
}

/* ---------------------------------------------------------- queue calls */

#define Fns_val(v) ((const struct rig_queue_fns *)Nativeint_val(v))
#define Dev_val(v) ((void *)Nativeint_val(v))

/* Each call runs without the runtime lock when the device may block, so
 * that other OCaml threads run meanwhile. */
value caml_rig_queue_room(value fns, value dev, value sub, value may_block) {
  const struct rig_queue_fns *f = Fns_val(fns);
  void *d = Dev_val(dev);
  const struct rig_submission *s = Submission_val(sub);
  int r;
  if (Bool_val(may_block)) {
    caml_release_runtime_system();
    r = f->room(d, s);
    caml_acquire_runtime_system();
  } else {
    r = f->room(d, s);
  }
  return Val_int(r);
}

value caml_rig_queue_submit(value fns, value dev, value sub, value val,
                            value may_block) {
  const struct rig_queue_fns *f = Fns_val(fns);
  void *d = Dev_val(dev);
  const struct rig_submission *s = Submission_val(sub);
  uint64_t v = (uint64_t)Long_val(val);
  int r;
  if (Bool_val(may_block)) {
    caml_release_runtime_system();
    r = f->submit(d, s, v);
    caml_acquire_runtime_system();
  } else {
    r = f->submit(d, s, v);
  }
  return Val_int(r);
}

value caml_rig_queue_commit(value fns, value dev, value may_block) {
  const struct rig_queue_fns *f = Fns_val(fns);
  void *d = Dev_val(dev);
  int r;
  if (Bool_val(may_block)) {
    caml_release_runtime_system();
    r = f->commit(d);
    caml_acquire_runtime_system();
  } else {
    r = f->commit(d);
  }
  return Val_int(r);
}
