/* room_grow_schedule.c: the room/grow schedule interpreter: a driver's
 * queue protocol (room, RIG_GROW, grow, submit, commit, the word, stop), as
 * rig drives it, read from a byte string (room_grow_schedule.h).  Linked
 * into the libFuzzer target room_grow_fuzz.c and into the certifier
 * (harness/schedule/, the scenario statement `schedule`).
 *
 * The input is a schedule.  Up to four logical submitting threads run the
 * protocol of rig_edge.h (room; on RIG_GROW grow, then a round of
 * reclamation after a Short, then room again, at most four grows; submit;
 * commit), interleaved at the granularity of one call into the driver by a
 * deterministic scheduler on ONE real thread: the input picks who moves
 * next.  Between their steps it also runs the device's work one part at a
 * time (the fake's deterministic worker), reads the word (signaled) and
 * sleeps on it while other submissions are half done (TIME-6), allocates and
 * drops regions that compete with the queues for the device's budget, makes
 * the nth next submit or commit fail, and stops the device in the middle.
 * The same input replays the same run.
 *
 * The invariants are the clauses, checked as the run goes.  A violation
 * either prints "rig-fuzz: VIOLATION <clause> ..." and aborts (the fuzzer:
 * libFuzzer saves the input), or ends the run and is handed back to the
 * caller (the certifier), by longjmp out of the check: no driver call is in
 * progress at any check, so no driver lock is skipped over.
 *
 * The driver is reached only through rig_fuzz_driver.h (the fake's adapter
 * is fake_adapter.c).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rig_fuzz_driver.h"
#include "room_grow_schedule.h"

#define MAX_THREADS 4
#define MAX_PARTS 6
#define MAX_SUBS 250 /* witness offsets: one byte per submission */
#define MAX_REGIONS 12
#define MAX_STEPS 600
#define WITNESS_BYTES 256
#define RUNQ (MAX_SUBS + 8)

static const struct rig_fuzz_driver *D = &rig_fuzz_driver;

/* ------------------------------------------------------------ options */

/* The options of the run in progress (set by rig_schedule_run). */
static int opt_trace, opt_real, opt_mutant, opt_abort;

static const struct {
  const char *name;
  int code;
} mutant_names[] = {
    {"none", 0},
    {"stop-no-last-value", 16}, {"stop-runs-encoded", 17}, {"late-word-write", 19},
    {"grow-unused", 21},        {"grow-short-drops", 22},  {"grow-writes-queue", 24},
    {"word-race", 25},          {"stop-frees-regions", 26},
};
#define N_MUTANTS (sizeof mutant_names / sizeof mutant_names[0])

int rig_schedule_mutant_code(const char *name) {
  for (size_t i = 0; i < N_MUTANTS; i++)
    if (strcmp(mutant_names[i].name, name) == 0) return mutant_names[i].code;
  return -1;
}

const char *rig_schedule_mutant_name(int i) {
  return i >= 0 && (size_t)i < N_MUTANTS ? mutant_names[i].name : NULL;
}

/* ------------------------------------------------------------ the run */

enum part_kind { PK_FILL_WITNESS, PK_FILL_SCRATCH, PK_COPY, PK_LAUNCH_NOP, PK_LAUNCH_FILL, PK_KINDS };
static const char *const part_names[] = {"fill-witness", "fill", "copy", "launch-nop", "launch-fill"};

/* S_DROPPED: committed, then dropped by stop before it ended (it may have
 * run in part); S_UNCOMMITTED: encoded and not committed at stop: must
 * never run (STOP-4). */
enum sub_state { S_BUILT, S_ENCODED, S_COMMITTED, S_DONE, S_DROPPED, S_UNCOMMITTED, S_GONE };

struct sub {
  uint32_t nparts;
  struct rig_part parts[MAX_PARTS];
  uint8_t kinds[MAX_PARTS];
  int regs[2 * MAX_PARTS]; /* region indices the parts name */
  int nregs;
  int witness; /* writes 1 at witness[id] when it runs */
  uint64_t value;
  int state;
  int thread;
  uint32_t left; /* parts (slots) not yet run */
};

struct region {
  void *r;
  uint64_t handle;
  size_t size;
  int refs;    /* submissions not known to be over that name it */
  int dropped; /* the program let go of it: reclamation frees it */
  int garbage; /* only a collection finds it dropped (rounds 2 and 3) */
};

enum th_state { T_IDLE, T_ROOM, T_GROW, T_RECLAIM, T_SUBMIT, T_ENCODED };

struct lthread {
  int state;
  int sub;      /* the submission in progress, or -1 */
  int tries;    /* grows asked for it */
  int grown;    /* the last grow for it answered Grown (QUEUE-2) */
  uint64_t last_short; /* n of its last Short, 0 if none */
  uint64_t short_epoch;
  int enc[MAX_SUBS];
  int nenc;
};

static struct run {
  const uint8_t *in;
  size_t len, pos;
  int step;
  void *dev;
  void *qdev;
  const struct rig_queue_fns *q;
  int nthreads;
  struct rig_fuzz_config cfg;
  struct lthread th[MAX_THREADS];
  struct sub subs[MAX_SUBS];
  int nsubs;
  struct region regs[MAX_REGIONS];
  void *witness;
  uint64_t witness_h;
  uint64_t e_nop, e_fill;
  uint64_t next_value, last_value; /* the last value given to submit (STOP-3) */
  int submits;
  int runq[RUNQ];
  int rq_head, rq_n;
  int running; /* a part started by work_begin, not yet ended */
  int lost;    /* a submit or commit failed: rig calls nothing but stop */
  int stopped;
  int settled; /* stopped, no work runs, the word read the last value (STOP-6) */
  int armed[2];   /* an injected failure of the nth submit (0) / commit (1) is pending */
  long arm_left[2];
  uint64_t budget_epoch; /* bumped when anything takes device memory (QUEUE-3) */
  atomic_int counted;    /* counted calls in flight (CNT-3) */
  pthread_t sleeper, watcher;
  atomic_int sleeper_stop, watcher_stop, watcher_seen;
  int sleeper_on, watcher_on;
} R;

static void trace(const char *fmt, ...) {
  if (!opt_trace) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%4d  ", R.step);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Where a violation goes when the caller wants it back (not opt_abort). */
static jmp_buf escape;
static struct rig_schedule_result *result;

__attribute__((noreturn)) static void violation(const char *clause, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  result->violated = 1;
  result->step = R.step;
  snprintf(result->clause, sizeof result->clause, "%s", clause);
  vsnprintf(result->message, sizeof result->message, fmt, ap);
  va_end(ap);
  if (opt_abort) {
    fprintf(stderr, "\nrig-fuzz: VIOLATION %s at step %d: %s\n", clause, R.step, result->message);
    fprintf(stderr, "  (replay the schedule: RIG_FUZZ_TRACE=1 <fuzzer> <input>)\n");
    abort();
  }
  longjmp(escape, 1);
}

/* The driver could not be set up: not a violation of a clause. */
__attribute__((noreturn)) static void setup_failed(const char *why) {
  snprintf(result->message, sizeof result->message, "%s", why);
  if (opt_abort) {
    fprintf(stderr, "rig-fuzz: %s\n", why);
    abort();
  }
  longjmp(escape, 2);
}

static uint8_t next(void) { return R.pos < R.len ? R.in[R.pos++] : 0; }

/* LOCK-3: the driver counts each lock it takes, from before the take to
 * after the give; after a call, the thread holds none. */
static void after_call(const char *what) {
  if (rig_holds() != 0) violation("LOCK-3", "%s returned with rig_holds () = %d", what, rig_holds());
}

/* CNT-3: rig counts the C functions' calls where the device declares may_block. */
static void count_in(void) {
  if (R.cfg.may_block) atomic_fetch_add(&R.counted, 1);
}
static void count_out(void) {
  if (R.cfg.may_block) atomic_fetch_sub(&R.counted, 1);
}

static uint64_t word(void) {
  uint64_t w = D->signaled(R.dev);
  after_call("signaled");
  if (R.settled && w != R.last_value)
    violation("STOP-6", "the word read %llu after stop returned and it showed the last value %llu",
              (unsigned long long)w, (unsigned long long)R.last_value);
  return w;
}

/* The queue digest (QUEUE-1, TIME-6); not with a real worker, which frees
 * queue slots concurrently. */
static uint64_t digest(void) { return D->queue_digest && !opt_real ? D->queue_digest(R.dev) : 0; }

/* ---------------------------------------------------------- regions */

static int region_new(int garbage) {
  for (int i = 0; i < MAX_REGIONS; i++) {
    if (R.regs[i].r) continue;
    size_t n = 64 * (size_t)(1 + (next() & 3));
    void *r = D->alloc(R.dev, RIG_FUZZ_MEM_BUDGET, n);
    after_call("alloc");
    R.budget_epoch++;
    if (!r) {
      trace("program  alloc %zu bytes -> None", n);
      return -1;
    }
    R.regs[i] = (struct region){r, D->handle(R.dev, r), n, 0, 0, garbage};
    trace("program  alloc %zu bytes -> region %d (handle 0x%llx)%s", n, i,
          (unsigned long long)R.regs[i].handle, garbage ? ", found by a collection once dropped" : "");
    return i;
  }
  return -1;
}

static void region_free(int i, const char *why) {
  trace("%s free region %d", why, i);
  D->free(R.dev, R.regs[i].r);
  after_call("free");
  R.regs[i].r = NULL;
}

/* A round of reclamation (decisions.md): round 1 frees what the program
 * dropped, round 2 also what a collection finds, round 3 waits for all the
 * device's work first (deterministic worker only). */
static void work_step(int quiet);
static void reclaim(int round) {
  trace("rig      reclamation round %d", round);
  if (round >= 3 && D->work_begin && !opt_real)
    while (R.rq_n || R.running) work_step(0);
  for (int i = 0; i < MAX_REGIONS; i++) {
    struct region *g = &R.regs[i];
    if (g->r && g->refs == 0 && (g->dropped || (round >= 2 && g->garbage))) region_free(i, "rig     ");
  }
}

static void unref_sub(struct sub *s) {
  for (int k = 0; k < s->nregs; k++) {
    struct region *g = &R.regs[s->regs[k]];
    if (--g->refs == 0 && g->dropped && g->r && !R.stopped) region_free(s->regs[k], "rig     ");
  }
  s->nregs = 0;
}

/* --------------------------------------------------------- submissions */

static int pick_region(void) {
  int live[MAX_REGIONS], n = 0;
  for (int i = 0; i < MAX_REGIONS; i++)
    if (R.regs[i].r && !R.regs[i].dropped) live[n++] = i;
  if (!n) return -1;
  return live[next() % n];
}

static void describe(const struct sub *s, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "s%d[", (int)(s - R.subs));
  for (uint32_t k = 0; k < s->nparts && o < len; k++)
    o += (size_t)snprintf(buf + o, len - o, "%s%s", k ? " " : "", part_names[s->kinds[k]]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

static int sub_new(int t) {
  if (R.nsubs >= MAX_SUBS) return -1;
  int id = R.nsubs++;
  struct sub *s = &R.subs[id];
  memset(s, 0, sizeof *s);
  s->thread = t;
  s->nparts = next() % (MAX_PARTS + 1);
  for (uint32_t k = 0; k < s->nparts; k++) {
    struct rig_part *p = &s->parts[k];
    int kind = next() % PK_KINDS;
    int a = -1, b = -1;
    if (kind == PK_FILL_SCRATCH || kind == PK_COPY) {
      a = pick_region();
      b = kind == PK_COPY ? pick_region() : a;
      if (a < 0 || b < 0) kind = PK_LAUNCH_NOP;
    }
    if ((kind == PK_FILL_WITNESS || kind == PK_LAUNCH_FILL) && s->witness) kind = PK_LAUNCH_NOP;
    s->kinds[k] = (uint8_t)kind;
    memset(p, 0, sizeof *p);
    switch (kind) {
    case PK_FILL_WITNESS:
      *p = (struct rig_part){RIG_OP_FILL, 0, {R.witness_h, (uint64_t)id, 1, 1, 0, 0}};
      s->witness = 1;
      break;
    case PK_LAUNCH_FILL:
      *p = (struct rig_part){RIG_OP_LAUNCH, 0, {R.e_fill, R.witness_h, (uint64_t)id, 1, 1, 0}};
      s->witness = 1;
      break;
    case PK_FILL_SCRATCH:
      *p = (struct rig_part){RIG_OP_FILL, 0, {R.regs[a].handle, 0, R.regs[a].size, next(), 0, 0}};
      break;
    case PK_COPY: {
      size_t n = R.regs[a].size < R.regs[b].size ? R.regs[a].size : R.regs[b].size;
      *p = (struct rig_part){RIG_OP_COPY, 0, {R.regs[a].handle, 0, R.regs[b].handle, 0, n, 0}};
      break;
    }
    default:
      *p = (struct rig_part){RIG_OP_LAUNCH, 0, {R.e_nop, 0, 0, 0, 0, 0}};
    }
    if (a >= 0 && (kind == PK_FILL_SCRATCH || kind == PK_COPY)) {
      s->regs[s->nregs++] = a;
      R.regs[a].refs++;
      if (kind == PK_COPY) {
        s->regs[s->nregs++] = b;
        R.regs[b].refs++;
      }
    }
  }
  s->left = s->nparts ? s->nparts : 1;
  s->state = S_BUILT;
  return id;
}

static struct rig_submission as_submission(const struct sub *s) {
  return (struct rig_submission){s->nparts, s->parts};
}

/* ------------------------------------------------------ thread steps */

static void abandon(struct lthread *t, const char *why) {
  if (t->sub >= 0) {
    trace("T%d           %s: s%d abandoned", (int)(t - R.th), why, t->sub);
    R.subs[t->sub].state = S_GONE;
    unref_sub(&R.subs[t->sub]);
  }
  t->sub = -1;
  t->state = t->nenc ? T_ENCODED : T_IDLE;
}

static void lose(const char *what) {
  trace("rig      the failed %s loses the device (CNT-6)", what);
  R.lost = 1;
}

static void do_room(int ti) {
  struct lthread *t = &R.th[ti];
  struct sub *s = &R.subs[t->sub];
  struct rig_submission sm = as_submission(s);
  D->set_thread(ti);
  count_in();
  int a = R.q->room(R.qdev, &sm);
  count_out();
  after_call("room");
  char buf[160];
  describe(s, buf, sizeof buf);
  trace("T%d      room(%s) -> %s", ti, buf, a == RIG_ROOM ? "RIG_ROOM" : a == RIG_GROW ? "RIG_GROW" : "?");
  if (a != RIG_ROOM && a != RIG_GROW) violation("DEC-QUEUE", "room answered %d, neither RIG_ROOM nor RIG_GROW", a);
  if (a == RIG_GROW && t->grown)
    violation("QUEUE-2", "T%d: room answered RIG_GROW again for s%d after grow answered Grown", ti, t->sub);
  t->state = a == RIG_ROOM ? T_SUBMIT : T_GROW;
}

static void do_grow(int ti) {
  struct lthread *t = &R.th[ti];
  uint64_t before = digest();
  D->set_thread(ti);
  uint64_t n = D->grow(R.dev);
  after_call("grow");
  uint64_t after = digest();
  R.budget_epoch++;
  t->tries++;
  trace("T%d      grow -> %s%.0llu (ask %d of 4)", ti, n ? "Short " : "Grown", (unsigned long long)n, t->tries);
  if (before != after)
    violation("QUEUE-1", "T%d's grow changed what the C functions read (queue digest %016llx -> %016llx)", ti,
              (unsigned long long)before, (unsigned long long)after);
  if (n && t->last_short && t->short_epoch == R.budget_epoch - 1 && n > t->last_short)
    violation("QUEUE-3",
              "T%d: grow answered Short %llu after Short %llu for s%d, with nothing taking memory in between: "
              "what the first growth made did not stay",
              ti, (unsigned long long)n, (unsigned long long)t->last_short, t->sub);
  if (n == 0) {
    t->grown = 1;
    t->state = T_ROOM;
    return;
  }
  t->last_short = n;
  t->short_epoch = R.budget_epoch;
  if (t->tries >= 4) {
    trace("rig      Out_of_memory %llu after the fourth ask (QUEUE-6)", (unsigned long long)n);
    abandon(t, "Out_of_memory");
    return;
  }
  t->state = T_RECLAIM;
}

static void do_submit(int ti) {
  struct lthread *t = &R.th[ti];
  struct sub *s = &R.subs[t->sub];
  struct rig_submission sm = as_submission(s);
  uint64_t v = ++R.next_value;
  int expect_fail = R.armed[0] && R.arm_left[0] == 1;
  if (R.armed[0] && --R.arm_left[0] == 0) R.armed[0] = 0;
  D->set_thread(ti);
  count_in();
  int rc = R.q->submit(R.qdev, &sm, v);
  count_out();
  after_call("submit");
  R.last_value = v; /* also when it fails (STOP-3) */
  R.submits++;
  trace("T%d      submit(s%d, value %llu) -> %d%s", ti, t->sub, (unsigned long long)v, rc,
        expect_fail ? " (injected failure)" : "");
  if (rc != 0 && !expect_fail)
    violation("DEC-QUEUE", "T%d: submit of s%d failed after room answered RIG_ROOM", ti, t->sub);
  if (rc == 0 && expect_fail) violation("CNT-6", "an injected submit failure did not fail");
  s->value = v;
  if (rc != 0) {
    s->state = S_GONE;
    t->sub = -1;
    lose("submit");
    return;
  }
  s->state = S_ENCODED;
  t->enc[t->nenc++] = t->sub;
  t->sub = -1;
  t->state = T_ENCODED;
}

static void do_commit(int ti) {
  struct lthread *t = &R.th[ti];
  int expect_fail = R.armed[1] && R.arm_left[1] == 1;
  if (R.armed[1] && --R.arm_left[1] == 0) R.armed[1] = 0;
  D->set_thread(ti);
  count_in();
  int rc = R.q->commit(R.qdev);
  count_out();
  after_call("commit");
  trace("T%d      commit (%d submission(s) encoded) -> %d%s", ti, t->nenc, rc, expect_fail ? " (injected failure)" : "");
  if (rc != 0 && !expect_fail) violation("CNT-6", "T%d: commit failed with nothing injected", ti);
  if (rc == 0 && expect_fail) violation("CNT-6", "an injected commit failure did not fail");
  if (rc != 0) {
    lose("commit");
    return;
  }
  for (int k = 0; k < t->nenc; k++) {
    struct sub *s = &R.subs[t->enc[k]];
    s->state = S_COMMITTED;
    R.runq[(R.rq_head + R.rq_n++) % RUNQ] = t->enc[k];
  }
  t->nenc = 0;
  t->state = T_IDLE;
}

static void thread_step(int ti, uint8_t param) {
  struct lthread *t = &R.th[ti];
  if (R.lost || R.stopped) return; /* CNT-4, CNT-6: rig calls nothing but stop */
  switch (t->state) {
  case T_ENCODED:
    if (param & 1) {
      do_commit(ti);
      return;
    }
    /* another submission before the commit */
    /* fall through */
  case T_IDLE: {
    int id = sub_new(ti);
    if (id < 0) return;
    t->sub = id;
    t->tries = 0;
    t->grown = 0;
    t->last_short = 0;
    do_room(ti);
    return;
  }
  case T_ROOM:
    do_room(ti);
    return;
  case T_GROW:
    do_grow(ti); /* QUEUE-5: on the thread whose room answered, before its next room */
    return;
  case T_RECLAIM:
    reclaim(t->tries); /* QUEUE-4 */
    t->state = T_ROOM;
    return;
  case T_SUBMIT:
    do_submit(ti);
    return;
  }
}

/* ------------------------------------------------------------- work */

static uint8_t witness_at(int id) {
  uint8_t b = 0;
  if (D->read(R.dev, R.witness, (size_t)id, &b, 1) != 0) violation("MEM-2", "the witness region cannot be read");
  after_call("read");
  return b;
}

/* One step of the deterministic worker: start the next part, or end the
 * started one; the model (R.runq) says what must happen. */
static void work_step(int quiet) {
  (void)quiet;
  if (opt_real || !D->work_begin) {
    sched_yield();
    return;
  }
  if (!R.running) {
    int ran = D->work_begin(R.dev);
    after_call("work_begin");
    trace("worker   start %s", ran ? "a part" : "nothing");
    if (ran && R.rq_n == 0)
      violation(R.stopped ? "STOP-4" : "DEC-QUEUE", "the device runs work that was never committed");
    if (!ran && R.rq_n && !R.stopped) violation("DEC-QUEUE", "committed work does not run");
    if (!ran && R.stopped && R.rq_n) {
      /* stop dropped the committed work that had not started: allowed */
      while (R.rq_n) {
        R.subs[R.runq[R.rq_head]].state = S_DROPPED;
        R.rq_head = (R.rq_head + 1) % RUNQ;
        R.rq_n--;
      }
    }
    R.running = ran;
    return;
  }
  uint64_t before = D->signaled(R.dev);
  after_call("signaled");
  D->work_end(R.dev);
  after_call("work_end");
  R.running = 0;
  int id = R.runq[R.rq_head];
  struct sub *s = &R.subs[id];
  int ends = --s->left == 0;
  if (ends) {
    R.rq_head = (R.rq_head + 1) % RUNQ;
    R.rq_n--;
  }
  uint64_t w = D->signaled(R.dev);
  after_call("signaled");
  trace("worker   end a part of s%d%s; word %llu", id, ends ? " (its last)" : "", (unsigned long long)w);
  if (R.stopped) {
    /* stop came while this part ran: the last value lands now (STOP-3) */
    if (w != R.last_value)
      violation("STOP-3", "the work that ran at stop ended, and the word reads %llu, not the last value %llu",
                (unsigned long long)w, (unsigned long long)R.last_value);
    R.settled = 1;
    s->state = S_DROPPED;
    return;
  }
  if (ends) {
    if (w != s->value)
      violation("TIME-1", "s%d's work is done and the word reads %llu, not its value %llu", id,
                (unsigned long long)w, (unsigned long long)s->value);
    if (s->witness && witness_at(id) != 1) violation("DEC-QUEUE", "s%d ran but its fill did not land", id);
    s->state = S_DONE;
    unref_sub(s);
  } else if (w != before) {
    violation("TIME-1", "the word moved from %llu to %llu in the middle of s%d", (unsigned long long)before,
              (unsigned long long)w, id);
  }
}

/* -------------------------------------------------------- the sleeper */

/* Real-worker mode: a real thread sleeps on the word while the schedule
 * submits and commits (TIME-6); rig counts sleep, so it ends before stop. */
static void *sleeper_main(void *arg) {
  (void)arg;
  while (!atomic_load(&R.sleeper_stop)) {
    uint64_t w = D->signaled(R.dev);
    if (D->sleep(R.dev, w, 1) != 0) break;
  }
  return NULL;
}

/* Real-worker mode: a thread that reads the word and nothing else, as rig
 * may from any thread without a lock.  It never synchronises with the
 * worker, so a word that is not atomic races with its loads on every run
 * that writes the word (the run waits for its first load): TSan's verdict
 * on the word-race mutant does not depend on how the threads happened to
 * be scheduled (the sleeper's loads are ordered by the device's mutex more
 * often than not). */
static void *watcher_main(void *arg) {
  (void)arg;
  do {
    (void)D->signaled(R.dev);
    /* relaxed: TSan sees no synchronisation in it */
    atomic_store_explicit(&R.watcher_seen, 1, memory_order_relaxed);
    sched_yield();
  } while (!atomic_load(&R.watcher_stop));
  return NULL;
}

/* ------------------------------------------------------------- stop */

static void do_stop(const char *why) {
  if (R.stopped) return;
  if (R.sleeper_on) {
    atomic_store(&R.sleeper_stop, 1);
    pthread_join(R.sleeper, NULL);
    R.sleeper_on = 0;
  }
  if (atomic_load(&R.counted) != 0) violation("CNT-3", "stop with %d counted C call(s) in flight", R.counted);
  uint64_t before = D->signaled(R.dev);
  after_call("signaled");
  D->stop(R.dev);
  after_call("stop");
  if (R.watcher_on) { /* it read the word through stop, as rig may */
    atomic_store(&R.watcher_stop, 1);
    pthread_join(R.watcher, NULL);
    R.watcher_on = 0;
  }
  R.stopped = 1;
  uint64_t w = D->signaled(R.dev);
  after_call("signaled");
  trace("rig      stop (%s)%s; word %llu, last value %llu", why, R.running ? " while a part runs" : "",
        (unsigned long long)w, (unsigned long long)R.last_value);
  /* STOP-4: what was encoded but not committed never runs. */
  for (int i = 0; i < R.nthreads; i++) {
    for (int k = 0; k < R.th[i].nenc; k++) R.subs[R.th[i].enc[k]].state = S_UNCOMMITTED;
    R.th[i].nenc = 0;
    if (R.th[i].sub >= 0) R.subs[R.th[i].sub].state = S_GONE;
  }
  if (opt_real || !D->work_begin) return;
  if (!R.running) {
    if (w != R.last_value)
      violation("STOP-3", "stop returned with no work running and the word reads %llu, not the last value %llu",
                (unsigned long long)w, (unsigned long long)R.last_value);
    R.settled = 1;
  } else if (w != before && before != R.last_value) {
    violation("STOP-3", "stop wrote the word (%llu -> %llu) while work still runs", (unsigned long long)before,
              (unsigned long long)w);
  }
}

/* ------------------------------------------------------------- a run */

static void run_open(void) {
  uint8_t h0 = next(), h1 = next(), h2 = next();
  R.nthreads = 1 + (h0 & 3);
  R.cfg.may_block = (h0 >> 2) & 1;
  R.cfg.queue_slots = h1 & 7;
  R.cfg.device_bytes = 64 * (uint64_t)((h1 & 7) + (h1 >> 3));
  R.cfg.mutant = opt_mutant;
  R.dev = D->open(&R.cfg);
  if (!R.dev) setup_failed("the driver did not open");
  R.q = D->queue(R.dev, &R.qdev);
  R.e_nop = D->entry(R.dev, RIG_FUZZ_FN_NOP);
  R.e_fill = D->entry(R.dev, RIG_FUZZ_FN_FILL);
  R.witness = D->alloc(R.dev, RIG_FUZZ_MEM_OTHER, WITNESS_BYTES);
  after_call("alloc");
  if (!R.witness || !R.e_nop || !R.e_fill) setup_failed("the driver gave no witness region or entries");
  R.witness_h = D->handle(R.dev, R.witness);
  trace("open     %d thread(s), device budget %llu bytes, %u queue slot(s), may_block %d, mutant %d%s",
        R.nthreads, (unsigned long long)R.cfg.device_bytes, R.cfg.queue_slots, R.cfg.may_block, opt_mutant,
        opt_real ? ", real worker" : "");
  for (int i = 0; i < (h2 & 3); i++) region_new(0);
  for (int i = 0; i < R.nthreads; i++) R.th[i].sub = -1;
  if (opt_real) {
    atomic_store(&R.sleeper_stop, 0);
    atomic_store(&R.watcher_stop, 0);
    R.sleeper_on = pthread_create(&R.sleeper, NULL, sleeper_main, NULL) == 0;
    atomic_store_explicit(&R.watcher_seen, 0, memory_order_relaxed);
    R.watcher_on = pthread_create(&R.watcher, NULL, watcher_main, NULL) == 0;
    /* The run goes on once the watcher has read the word: on a loaded
     * machine it might otherwise first run after the last write. */
    while (R.watcher_on && !atomic_load_explicit(&R.watcher_seen, memory_order_relaxed)) sched_yield();
  }
}

static void run_close(void) {
  do_stop("close");
  /* STOP-7: rig frees and unloads only once the word reads the last value. */
  if (!opt_real && D->work_begin) {
    if (R.running) work_step(0);
  } else {
    uint64_t w;
    int waited = 0;
    while ((w = D->signaled(R.dev)) != R.last_value) {
      if (waited >= 3000)
        violation("STOP-3", "3 s after stop the word reads %llu, not the last value %llu", (unsigned long long)w,
                  (unsigned long long)R.last_value);
      D->sleep(R.dev, w, 10);
      waited += 10;
    }
    R.settled = 1;
  }
  (void)word();
  /* STOP-4: nothing encoded and not committed at stop ran. */
  for (int id = 0; id < R.nsubs; id++) {
    struct sub *s = &R.subs[id];
    if (!s->witness) continue;
    if (s->state == S_UNCOMMITTED && witness_at(id) != 0)
      violation("STOP-4", "s%d, encoded (value %llu) and not committed at stop, ran", id,
                (unsigned long long)s->value);
    if ((s->state == S_BUILT || s->state == S_GONE) && witness_at(id) != 0)
      violation("DEC-QUEUE", "s%d, never submitted (or its submit failed), ran", id);
  }
  for (int i = 0; i < MAX_REGIONS; i++)
    if (R.regs[i].r) region_free(i, "rig     ");
  D->free(R.dev, R.witness);
  after_call("free");
  (void)word();
  D->close(R.dev);
}

static void run(const uint8_t *data, size_t size) {
  memset(&R, 0, sizeof R);
  R.in = data;
  R.len = size;
  run_open();
  while (R.pos < R.len && R.step < MAX_STEPS) {
    R.step++;
    uint8_t b = next();
    uint8_t p = b >> 4;
    switch (b & 15) {
    case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7:
      thread_step((b & 7) % R.nthreads, p);
      break;
    case 8: case 9:
      work_step(0);
      break;
    case 10:
      trace("rig      signaled -> %llu", (unsigned long long)word());
      break;
    case 11: {
      /* TIME-6: sleep while other submissions are half done; it must not
       * touch what the C functions read.  TIME-3: a word that differs
       * from seen returns at once. */
      if (R.stopped || R.lost) break;
      uint64_t w = word(), before = digest();
      uint64_t seen = (p & 1) ? w + 1 : w;
      count_in();
      int f = D->sleep(R.dev, seen, (p & 1) ? 1000 : 0);
      count_out();
      after_call("sleep");
      trace("rig      sleep(seen %llu, %d ms) -> %s", (unsigned long long)seen, (p & 1) ? 1000 : 0,
            f ? "Fault" : "returned");
      if (f) violation("TIME-5", "sleep raised Fault on a device that did not fault");
      if (digest() != before) violation("TIME-6", "sleep changed what the C functions read");
      break;
    }
    case 12:
      if (!R.stopped && !R.lost) region_new(p & 1);
      break;
    case 13: {
      int i = pick_region();
      if (i < 0 || R.stopped) break;
      R.regs[i].dropped = 1;
      trace("program  drops region %d%s", i, R.regs[i].refs ? " (still named by work)" : "");
      if (R.regs[i].refs == 0 && !(p & 1)) region_free(i, "program ");
      break;
    }
    case 14: {
      int fn = p & 1;
      if (R.armed[fn] || R.stopped || !D->inject_fail) break;
      R.armed[fn] = 1;
      R.arm_left[fn] = 1 + (p >> 1);
      D->inject_fail(fn, R.arm_left[fn]);
      trace("inject   the %ld%s next %s fails", R.arm_left[fn], R.arm_left[fn] == 1 ? "st" : "th",
            fn ? "commit" : "submit");
      break;
    }
    case 15:
      if (R.stopped) break;
      if (!(p & 1) && !R.lost) break; /* stop at close, or once lost */
      do_stop(R.lost ? "lost" : "close");
      break;
    }
  }
  R.step++;
  run_close();
}

int rig_schedule_run(const uint8_t *data, size_t size, const struct rig_schedule_options *opt,
                     struct rig_schedule_result *res) {
  /* init is once per process in rig_fuzz_driver.h: again only if the mode changes. */
  static int inited = -1;
  memset(res, 0, sizeof *res);
  result = res;
  opt_trace = opt->trace;
  opt_real = opt->real_worker;
  opt_mutant = opt->mutant;
  opt_abort = opt->abort_on_violation;
  if (inited != !opt_real) {
    D->init(!opt_real);
    inited = !opt_real;
  }
  switch (setjmp(escape)) {
  case 0:
    run(data, size);
    return 0;
  case 1:
    return 0; /* a violation, in res */
  default:
    return -1;
  }
}
