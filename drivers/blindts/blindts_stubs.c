/* blindts: a queue layer of its own in front of hostmem's C functions
 * (hm_room, hm_submit, hm_commit, reached through hm_fns ()), and the waits
 * and stop-time helpers of the ts-* drivers.  Which behaviour a device gets
 * is a set of mode bits given at open (see blindts.ml's table).
 *
 * The layer's state (struct ts_dev) is preallocated at open: the queue
 * functions allocate nothing (CODE-2's "submit allocates nothing", but for
 * the one driver whose bug that is).
 *
 * Locks: ts->mu and ts->sub_mu are pthread mutexes held only inside C code
 * that runs no OCaml code; where one is held across a call that enters and
 * leaves a blocking section (the ts-sleep-holds-submit-lock sleep) it is
 * counted with rig_hold / rig_give (LOCK-3).
 */
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

/* hostmem's stubs (hostmem_stubs.c, linked beside this file). */
extern value hm_fns(value unit);
extern value hm_dev_ptr(value v);
extern value hm_wait(value v, value vseen, value vms);
extern value hm_signaled(value v);
extern value hm_alloc(value v, value vcharged, value vn);
extern value hm_access(value v, value vh, value voff, value vbuf, value vboff, value vlen, value vwrite);

/* Mode bits (blindts.ml gives them). */
#define M_SUBLOCK 1        /* ts-sleep-holds-submit-lock: submit takes sub_mu */
#define M_WAIT_SLEEPERS 2  /* ts-commit-waits-sleepers: commit waits for no sleeper */
#define M_SHADOW 4         /* ts-stop-*: a shadow of each thread's encoded, uncommitted parts */
#define M_DEFER 8          /* ts-entry-scratch-at-submit: a launch's scratch made at submit */
#define M_SHARED_CV 16     /* ts-ok-shared-cv: commit signals the sleepers' condvar */

#define NTHR 64
#define NSHADOW 64
#define SHADOW_PARTS 8
#define NDEFER 256

struct shadow {
  int used;
  pthread_t tid;
  uint32_t n;
  struct rig_part parts[SHADOW_PARTS];
};

struct tval {
  int used;
  pthread_t tid;
  uint64_t pending; /* the last value this thread submitted, not yet committed */
  int has_pending;
};

struct defer {
  uint64_t entry;   /* the entry's handle */
  int64_t need;     /* its scratch bytes */
  uint64_t scratch; /* the scratch made at its first launch, 0 before */
};

struct ts_dev {
  void *hm;
  const struct rig_queue_fns *hf;
  uintnat stand_in[2]; /* a stand-in for hostmem's custom block: [1] is the hm_dev pointer */
  int mode;
  pthread_mutex_t mu, sub_mu;
  pthread_cond_t cv;
  int sleepers;
  _Atomic uint64_t last_submitted, last_committed;
  struct tval tv[NTHR];
  struct shadow sh[NSHADOW];
  struct defer df[NDEFER];
  int n_defer;
};

/* hostmem's stubs read only Data_custom_val (v), i.e. the word after v:
 * those that neither allocate nor register roots may be given the
 * stand-in where no OCaml value is at hand (the queue functions run
 * without the runtime). */
static value stand_in(struct ts_dev *t) { return (value)&t->stand_in[0]; }

#define Ts_val(v) (*(struct ts_dev **)Data_custom_val(v))

static void ts_finalize(value v) {
  struct ts_dev *t = Ts_val(v);
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  pthread_mutex_destroy(&t->sub_mu);
  pthread_cond_destroy(&t->cv);
  free(t);
}

static struct custom_operations ts_ops = {
  "rig.blindts.dev", ts_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* ------------------------------------------------------------ helpers */

static struct tval *tv_find(struct ts_dev *t, int create) {
  pthread_t self = pthread_self();
  struct tval *spare = NULL;
  for (int i = 0; i < NTHR; i++) {
    if (t->tv[i].used) {
      if (pthread_equal(t->tv[i].tid, self)) return &t->tv[i];
    } else if (!spare) spare = &t->tv[i];
  }
  if (!create || !spare) return NULL;
  memset(spare, 0, sizeof *spare);
  spare->used = 1;
  spare->tid = self;
  return spare;
}

static void atomic_max(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load(a);
  while (cur < v && !atomic_compare_exchange_weak(a, &cur, v)) {}
}

static struct defer *defer_find(struct ts_dev *t, uint64_t entry) {
  for (int i = 0; i < t->n_defer; i++)
    if (t->df[i].entry == entry) return &t->df[i];
  return NULL;
}

/* ---------------------------------------------------- the C functions */

static int ts_room(void *dev, const struct rig_submission *s) {
  struct ts_dev *t = dev;
  return t->hf->room(t->hm, s);
}

static int ts_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct ts_dev *t = dev;
  if (t->mode & M_SUBLOCK) pthread_mutex_lock(&t->sub_mu);
  int rc = t->hf->submit(t->hm, s, value);
  atomic_store(&t->last_submitted, value);
  pthread_mutex_lock(&t->mu);
  if (rc == 0 && (t->mode & M_DEFER)) {
    /* The scratch of a launched entry, made at its first launch. */
    for (uint32_t i = 0; i < s->n_parts && rc == 0; i++) {
      const struct rig_part *p = &s->parts[i];
      if (p->op != RIG_OP_LAUNCH) continue;
      struct defer *df = defer_find(t, p->a[0]);
      if (!df || df->scratch || df->need == 0) continue;
      uint64_t h = (uint64_t)Long_val(hm_alloc(stand_in(t), Val_true, Val_long(df->need)));
      if (h == 0) rc = 1; /* no memory for f's scratch: the submit fails */
      else df->scratch = h;
    }
  }
  if (rc == 0) {
    struct tval *tv = tv_find(t, 1);
    if (tv) {
      tv->pending = value;
      tv->has_pending = 1;
    }
    if (t->mode & M_SHADOW) {
      for (int i = 0; i < NSHADOW; i++) {
        struct shadow *sh = &t->sh[i];
        if (sh->used) continue;
        sh->used = 1;
        sh->tid = pthread_self();
        sh->n = s->n_parts < SHADOW_PARTS ? s->n_parts : SHADOW_PARTS;
        memcpy(sh->parts, s->parts, sh->n * sizeof(struct rig_part));
        break;
      }
    }
  }
  pthread_mutex_unlock(&t->mu);
  if (t->mode & M_SUBLOCK) pthread_mutex_unlock(&t->sub_mu);
  return rc;
}

static int ts_commit(void *dev) {
  struct ts_dev *t = dev;
  if (t->mode & M_WAIT_SLEEPERS) {
    /* "no sleeper may miss the doorbell": wait until none is inside its
     * wait before ringing it. */
    pthread_mutex_lock(&t->mu);
    while (t->sleepers > 0) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
  }
  if (t->mode & M_SHARED_CV) pthread_mutex_lock(&t->mu);
  int rc = t->hf->commit(t->hm);
  if (!(t->mode & M_SHARED_CV)) pthread_mutex_lock(&t->mu);
  if (rc == 0) {
    struct tval *tv = tv_find(t, 0);
    if (tv && tv->has_pending) {
      atomic_max(&t->last_committed, tv->pending);
      tv->has_pending = 0;
    }
    if (t->mode & M_SHADOW) {
      pthread_t self = pthread_self();
      for (int i = 0; i < NSHADOW; i++)
        if (t->sh[i].used && pthread_equal(t->sh[i].tid, self)) t->sh[i].used = 0;
    }
  }
  if (t->mode & M_SHARED_CV) pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return rc;
}

static const struct rig_queue_fns ts_table = { ts_room, ts_submit, ts_commit };

/* ------------------------------------------------------- OCaml side */

/* ts_open hmdev mode */
CAMLprim value ts_open(value vhm, value vmode) {
  CAMLparam2(vhm, vmode);
  CAMLlocal1(v);
  struct ts_dev *t = calloc(1, sizeof *t);
  if (!t) caml_raise_out_of_memory();
  t->hm = (void *)Nativeint_val(hm_dev_ptr(vhm));
  t->hf = (const struct rig_queue_fns *)Nativeint_val(hm_fns(Val_unit));
  t->stand_in[0] = 0;
  t->stand_in[1] = (uintnat)t->hm;
  t->mode = Int_val(vmode);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->mu, NULL);
  pthread_mutex_init(&t->sub_mu, NULL);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  v = caml_alloc_custom(&ts_ops, sizeof(struct ts_dev *), 0, 1);
  Ts_val(v) = t;
  CAMLreturn(v);
}

CAMLprim value ts_ptr(value v) { return caml_copy_nativeint((intnat)Ts_val(v)); }
CAMLprim value ts_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&ts_table); }
CAMLprim value ts_last_submitted(value v) { return Val_long((intnat)atomic_load(&Ts_val(v)->last_submitted)); }
CAMLprim value ts_last_committed(value v) { return Val_long((intnat)atomic_load(&Ts_val(v)->last_committed)); }

/* ts_sleep_sublock ts hm seen ms: hostmem's wait, inside the submit lock
 * ("so that no submit changes the last value while we wait on it"). */
CAMLprim value ts_sleep_sublock(value vts, value vhm, value vseen, value vms) {
  CAMLparam4(vts, vhm, vseen, vms);
  struct ts_dev *t = Ts_val(vts);
  rig_hold();
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->sub_mu);
  caml_leave_blocking_section();
  hm_wait(vhm, vseen, vms);
  pthread_mutex_unlock(&t->sub_mu);
  rig_give();
  CAMLreturn(Val_unit);
}

/* ts_sleep_registered ts hm seen ms: hostmem's wait, counted among the
 * sleepers for its length. */
CAMLprim value ts_sleep_registered(value vts, value vhm, value vseen, value vms) {
  CAMLparam4(vts, vhm, vseen, vms);
  struct ts_dev *t = Ts_val(vts);
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->mu);
  t->sleepers++;
  pthread_mutex_unlock(&t->mu);
  caml_leave_blocking_section();
  hm_wait(vhm, vseen, vms);
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->mu);
  t->sleepers--;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  caml_leave_blocking_section();
  CAMLreturn(Val_unit);
}

/* ts_sleep_cv ts seen ms: one step of a sleep on the layer's condvar,
 * which commit signals: at most ms milliseconds, the lock given back while
 * it blocks. */
CAMLprim value ts_sleep_cv(value vts, value vseen, value vms) {
  struct ts_dev *t = Ts_val(vts);
  int64_t seen = Long_val(vseen), ms = Long_val(vms);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += (ms % 1000) * 1000000L;
  ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  caml_enter_blocking_section();
  pthread_mutex_lock(&t->mu);
  if (Long_val(hm_signaled(stand_in(t))) == seen) pthread_cond_timedwait(&t->cv, &t->mu, &ts);
  pthread_mutex_unlock(&t->mu);
  caml_leave_blocking_section();
  return Val_unit;
}

/* ts_defer ts entry need: entry's scratch is made at its first launch. */
CAMLprim value ts_defer(value vts, value ventry, value vneed) {
  struct ts_dev *t = Ts_val(vts);
  int ok = 0;
  pthread_mutex_lock(&t->mu);
  if (t->n_defer < NDEFER) {
    struct defer *df = &t->df[t->n_defer++];
    df->entry = (uint64_t)Long_val(ventry);
    df->need = Long_val(vneed);
    df->scratch = 0;
    ok = 1;
  }
  pthread_mutex_unlock(&t->mu);
  return Val_bool(ok);
}

/* ts_undefer ts entry: forgets entry; the scratch handle made for it (0: none). */
CAMLprim value ts_undefer(value vts, value ventry) {
  struct ts_dev *t = Ts_val(vts);
  uint64_t h = 0;
  pthread_mutex_lock(&t->mu);
  struct defer *df = defer_find(t, (uint64_t)Long_val(ventry));
  if (df) {
    h = df->scratch;
    *df = t->df[--t->n_defer];
  }
  pthread_mutex_unlock(&t->mu);
  return Val_long((intnat)h);
}

/* ts_write_back ts hm all: runs on the host the Fill and Copy parts of the
 * encoded, uncommitted submissions (every thread's if all, else the calling
 * thread's), then forgets them.  Parts that name nothing live are skipped. */
CAMLprim value ts_write_back(value vts, value vhm, value vall) {
  CAMLparam3(vts, vhm, vall);
  CAMLlocal1(buf);
  struct ts_dev *t = Ts_val(vts);
  pthread_t self = pthread_self();
  for (int i = 0; i < NSHADOW; i++) {
    struct shadow *sh = &t->sh[i];
    pthread_mutex_lock(&t->mu);
    int mine = sh->used && (Bool_val(vall) || pthread_equal(sh->tid, self));
    struct shadow copy;
    if (mine) {
      copy = *sh;
      sh->used = 0;
    }
    pthread_mutex_unlock(&t->mu);
    if (!mine) continue;
    for (uint32_t k = 0; k < copy.n; k++) {
      const struct rig_part *p = &copy.parts[k];
      if (p->op == RIG_OP_FILL && p->a[2] > 0 && p->a[2] < (1u << 24)) {
        buf = caml_alloc_string(p->a[2]);
        memset(Bytes_val(buf), (int)(p->a[3] & 0xff), p->a[2]);
        hm_access(vhm, Val_long(p->a[0]), Val_long(p->a[1]), buf, Val_long(0), Val_long(p->a[2]), Val_true);
      } else if (p->op == RIG_OP_COPY && p->a[4] > 0 && p->a[4] < (1u << 24)) {
        buf = caml_alloc_string(p->a[4]);
        if (Bool_val(hm_access(vhm, Val_long(p->a[0]), Val_long(p->a[1]), buf, Val_long(0), Val_long(p->a[4]),
                               Val_false)))
          hm_access(vhm, Val_long(p->a[2]), Val_long(p->a[3]), buf, Val_long(0), Val_long(p->a[4]), Val_true);
      }
    }
  }
  CAMLreturn(Val_unit);
}
