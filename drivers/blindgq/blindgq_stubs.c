/* blindgq: a queue layer of its own in front of hostmem's queue.
 *
 * The layer keeps staging slots (the room a submission's parts take between
 * room and commit), counted per device, backed by blocks of Device memory
 * that the OCaml side charges to hostmem's budget (hm_alloc) and records.
 * Behind it, hostmem's own C functions (hm_fns) do the work: room asks
 * both, submit and commit go to both.
 *
 * Per thread (pthread_self, as hostmem): the layer's reservation (room
 * answered RIG_ROOM), its staged slots (submitted, not committed), the slots
 * of the submission that last asked to grow (need) and what grow made for it
 * and room has not yet taken (earmark); and whether hostmem holds a
 * reservation of its own for that same submission (hm_held).
 *
 * The layer's mode (GQ_*) is where the gq-* drivers differ: see blindgq.ml
 * for which mode breaks which clause.
 *
 * Locking: one pthread mutex per layer, held only inside C code that runs
 * no OCaml code (not one of the locks rig_hold counts, as hostmem's).
 * hostmem's mutex is taken inside it (room, submit, commit), never the
 * other way round.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/custom.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#include "rig_edge.h"

/* Modes.  Must match blindgq.ml. */
#define GQ_PLAIN 0     /* hostmem's protocol: grow earmarks for the thread  */
#define GQ_SPILL 1     /* chunked growth; surplus of a chunk into the pool   */
#define GQ_REAP 2      /* grow reaps idle reservations and scavenges the pool*/
#define GQ_FIFO 3      /* room serves grown threads in ticket order          */
#define GQ_HEADROOM 4  /* room keeps the pool for waiters before earmarks    */
#define GQ_RINGS 5     /* per-thread rings (conforming)                       */
#define GQ_SURPLUS 6   /* chunked growth; surplus kept for the same thread   */

#define GQ_SLOTS_PER_BLOCK 8
#define GQ_MAX_THREADS 1024

struct gthr {
  pthread_t tid;
  int used;
  uint32_t reserved;   /* layer slots room answered RIG_ROOM for */
  uint32_t staged;     /* submitted, not committed */
  uint32_t need;       /* slots of the submission that last asked to grow */
  uint32_t earmark;    /* slots grow made for this thread, not yet in the queues */
  uint32_t ring;       /* GQ_RINGS: the thread's own ring */
  uint64_t ticket;     /* GQ_FIFO: 0 = none */
  int hm_held;         /* hostmem reserved for a submission of hm_need slots */
  uint32_t hm_need;
};

struct gq {
  pthread_mutex_t mu;
  int mode;
  int stopping;
  const struct rig_queue_fns *hm;
  void *hm_dev;
  uint32_t total;          /* slots in the shared pool (not GQ_RINGS) */
  uint32_t reserved_total; /* of the shared pool */
  uint32_t staged_total;   /* of the shared pool */
  uint32_t unassigned;     /* GQ_RINGS: slots no ring holds yet */
  uint64_t next_ticket;
  struct gthr thr[GQ_MAX_THREADS];
};

static struct gthr *thr_find(struct gq *q, int create) {
  pthread_t self = pthread_self();
  struct gthr *spare = NULL;
  for (int i = 0; i < GQ_MAX_THREADS; i++) {
    struct gthr *t = &q->thr[i];
    if (t->used) {
      if (pthread_equal(t->tid, self)) return t;
    } else if (!spare) spare = t;
  }
  if (!create || !spare) return NULL;
  memset(spare, 0, sizeof *spare);
  spare->used = 1;
  spare->tid = self;
  return spare;
}

static void thr_maybe_free(struct gq *q, struct gthr *t) {
  if (q->mode == GQ_RINGS && t->ring) return; /* the ring stays the thread's */
  if (t->reserved == 0 && t->staged == 0 && t->need == 0 && t->earmark == 0 && t->ticket == 0 && !t->hm_held)
    t->used = 0;
}

static uint32_t pool_avail(struct gq *q) {
  uint32_t used = q->reserved_total + q->staged_total;
  return q->total > used ? q->total - used : 0;
}

/* The layer's answer for [need] slots on thread t.  Under mu.  On RIG_ROOM
 * it has reserved them (t->reserved == need). */
static int layer_room(struct gq *q, struct gthr *t, uint32_t need) {
  /* a reservation this thread still holds for a submission of this size
   * (room answered for it while hostmem asked to grow) is kept */
  if (t->reserved == need && need) return RIG_ROOM;
  if (q->mode == GQ_RINGS) {
    t->reserved = 0;
    if (t->ring == 0 && q->unassigned) {
      uint32_t k = q->unassigned < GQ_SLOTS_PER_BLOCK ? q->unassigned : GQ_SLOTS_PER_BLOCK;
      q->unassigned -= k;
      t->ring += k;
    }
    uint32_t avail = t->ring > t->staged ? t->ring - t->staged : 0;
    if ((uint64_t)avail + t->earmark >= need) {
      t->ring += t->earmark;
      t->earmark = 0;
      t->need = 0;
      t->reserved = need;
      return RIG_ROOM;
    }
    t->need = need;
    return RIG_GROW;
  }
  q->reserved_total -= t->reserved;
  t->reserved = 0;
  uint32_t avail = pool_avail(q);
  int ok;
  if (q->mode == GQ_HEADROOM) {
    /* the pool's free slots are kept first for the other threads whose
     * rooms asked to grow and have not had room since (their needs, which
     * only room records); the thread's own earmark counts only past that
     * reserve */
    int64_t waiting = 0;
    for (int i = 0; i < GQ_MAX_THREADS; i++) {
      struct gthr *o = &q->thr[i];
      if (o->used && o != t) waiting += o->need;
    }
    ok = (int64_t)avail - waiting + (int64_t)t->earmark >= (int64_t)need;
  } else {
    ok = (uint64_t)avail + t->earmark >= need;
  }
  if (ok && q->mode == GQ_FIFO && t->ticket) {
    /* grown threads are served in the order they first asked to grow */
    for (int i = 0; i < GQ_MAX_THREADS; i++) {
      struct gthr *o = &q->thr[i];
      if (o->used && o != t && o->ticket && o->ticket < t->ticket) ok = 0;
    }
  }
  if (!ok) {
    t->need = need;
    if (q->mode == GQ_FIFO && !t->ticket) t->ticket = ++q->next_ticket;
    return RIG_GROW;
  }
  if (q->mode == GQ_SURPLUS) {
    /* take from the earmark only what the pool lacks; the rest stays this
     * thread's for its later rooms */
    uint32_t take = need > avail ? need - avail : 0;
    if (take > t->earmark) take = t->earmark;
    t->earmark -= take;
    q->total += take;
  } else {
    q->total += t->earmark;
    t->earmark = 0;
  }
  t->need = 0;
  t->ticket = 0;
  t->reserved = need;
  q->reserved_total += need;
  return RIG_ROOM;
}

static int gq_room(void *dev, const struct rig_submission *s) {
  struct gq *q = dev;
  uint32_t need = s->n_parts + 1;
  int answer = RIG_GROW;
  pthread_mutex_lock(&q->mu);
  struct gthr *t = thr_find(q, 1);
  if (t && !q->stopping) {
    int layer = layer_room(q, t, need);
    if (!t->hm_held || t->hm_need != need) {
      t->hm_held = q->hm->room(q->hm_dev, s) == RIG_ROOM;
      t->hm_need = need;
    }
    if (layer == RIG_ROOM && t->hm_held) answer = RIG_ROOM;
    thr_maybe_free(q, t);
  }
  pthread_mutex_unlock(&q->mu);
  return answer;
}

static int gq_submit(void *dev, const struct rig_submission *s, uint64_t value) {
  struct gq *q = dev;
  uint32_t need = s->n_parts + 1;
  int rc;
  pthread_mutex_lock(&q->mu);
  struct gthr *t = thr_find(q, 0);
  /* hostmem records the value also for a failed submit (STOP-3) */
  rc = q->hm->submit(q->hm_dev, s, value);
  if (t) t->hm_held = 0;
  if (rc == 0) {
    if (q->stopping || !t || t->reserved < need) rc = 1;
    else {
      t->reserved -= need;
      t->staged += need;
      if (q->mode != GQ_RINGS) {
        q->reserved_total -= need;
        q->staged_total += need;
      }
    }
  }
  if (t) thr_maybe_free(q, t);
  pthread_mutex_unlock(&q->mu);
  return rc;
}

static int gq_commit(void *dev) {
  struct gq *q = dev;
  pthread_mutex_lock(&q->mu);
  struct gthr *t = thr_find(q, 0);
  if (t) {
    if (q->mode != GQ_RINGS) q->staged_total -= t->staged;
    t->staged = 0;
    thr_maybe_free(q, t);
  }
  int rc = q->hm->commit(q->hm_dev);
  pthread_mutex_unlock(&q->mu);
  return rc;
}

static const struct rig_queue_fns gq_table = { gq_room, gq_submit, gq_commit };

/* ------------------------------------------------------- OCaml side */

#define Gq_val(v) (*(struct gq **)Data_custom_val(v))

static void gq_finalize(value v) {
  struct gq *q = Gq_val(v);
  if (q) {
    pthread_mutex_destroy(&q->mu);
    free(q);
  }
}

static struct custom_operations gq_ops = {
  "rig.blindgq.layer", gq_finalize, custom_compare_default, custom_hash_default,
  custom_serialize_default, custom_deserialize_default, custom_compare_ext_default,
  custom_fixed_length_default
};

/* gq_create hm_fns hm_dev mode initial_slots */
CAMLprim value gq_create(value vfns, value vdev, value vmode, value vslots) {
  CAMLparam4(vfns, vdev, vmode, vslots);
  CAMLlocal1(v);
  struct gq *q = calloc(1, sizeof *q);
  if (!q) caml_raise_out_of_memory();
  pthread_mutex_init(&q->mu, NULL);
  q->mode = Int_val(vmode);
  q->hm = (const struct rig_queue_fns *)Nativeint_val(vfns);
  q->hm_dev = (void *)Nativeint_val(vdev);
  if (q->mode == GQ_RINGS) q->unassigned = (uint32_t)Long_val(vslots);
  else q->total = (uint32_t)Long_val(vslots);
  v = caml_alloc_custom(&gq_ops, sizeof(struct gq *), 0, 1);
  Gq_val(v) = q;
  CAMLreturn(v);
}

CAMLprim value gq_ptr(value v) { return caml_copy_nativeint((intnat)Gq_val(v)); }
CAMLprim value gq_fns(value unit) { (void)unit; return caml_copy_nativeint((intnat)&gq_table); }

/* gq_grow_begin q: the slots grow still has to make for the calling
 * thread's submission that last asked to grow (0: none).  GQ_REAP first
 * reaps the reservations of other threads that have nothing staged and
 * scavenges the pool's free slots into this thread's earmark. */
CAMLprim value gq_grow_begin(value v) {
  struct gq *q = Gq_val(v);
  uint32_t missing = 0;
  pthread_mutex_lock(&q->mu);
  struct gthr *t = thr_find(q, 0);
  if (t && !q->stopping && t->need > t->earmark) {
    if (q->mode == GQ_REAP) {
      for (int i = 0; i < GQ_MAX_THREADS; i++) {
        struct gthr *o = &q->thr[i];
        if (o->used && o != t && o->reserved && !o->staged) {
          q->reserved_total -= o->reserved;
          o->reserved = 0;
        }
      }
      uint32_t avail = pool_avail(q), want = t->need - t->earmark;
      uint32_t k = avail < want ? avail : want;
      q->total -= k;
      t->earmark += k;
    }
    missing = t->need > t->earmark ? t->need - t->earmark : 0;
  }
  pthread_mutex_unlock(&q->mu);
  return Val_long(missing);
}

/* gq_grow_add q slots: grow made a block of [slots] slots for the calling
 * thread.  GQ_SPILL earmarks what the submission lacks and puts the rest of
 * the block into the shared pool. */
CAMLprim value gq_grow_add(value v, value vslots) {
  struct gq *q = Gq_val(v);
  uint32_t k = (uint32_t)Long_val(vslots);
  pthread_mutex_lock(&q->mu);
  struct gthr *t = thr_find(q, 1);
  if (t) {
    if (q->mode == GQ_SPILL) {
      uint32_t lack = t->need > t->earmark ? t->need - t->earmark : 0;
      uint32_t mine = k < lack ? k : lack;
      t->earmark += mine;
      q->total += k - mine;
    } else t->earmark += k;
  }
  pthread_mutex_unlock(&q->mu);
  return Val_unit;
}

CAMLprim value gq_stop(value v) {
  struct gq *q = Gq_val(v);
  pthread_mutex_lock(&q->mu);
  q->stopping = 1;
  q->total = q->reserved_total = q->staged_total = q->unassigned = 0;
  memset(q->thr, 0, sizeof q->thr);
  pthread_mutex_unlock(&q->mu);
  return Val_unit;
}

/* For gqcheck: the calling thread's earmark and the pool's free slots. */
CAMLprim value gq_debug(value v) {
  CAMLparam1(v);
  CAMLlocal1(r);
  struct gq *q = Gq_val(v);
  pthread_mutex_lock(&q->mu);
  struct gthr *t = thr_find(q, 0);
  long earmark = t ? (long)t->earmark : 0;
  long avail = q->mode == GQ_RINGS ? (long)q->unassigned : (long)pool_avail(q);
  pthread_mutex_unlock(&q->mu);
  r = caml_alloc_tuple(2);
  Store_field(r, 0, Val_long(earmark));
  Store_field(r, 1, Val_long(avail));
  CAMLreturn(r);
}
