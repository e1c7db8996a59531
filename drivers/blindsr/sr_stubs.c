/* sr_stubs: the raw memory the sr-* drivers put under hostmem's mappings
 * (hm_map), and the driver-own pages some of them keep (a status page that
 * signaled records into, a journal page).  No lock, no OCaml callback, no
 * blocking: every stub is a plain memory operation.
 *
 * Two kinds of raw memory:
 *   - sr_mmap / sr_munmap: whole pages of their own (anonymous mmap);
 *   - sr_hmalloc / sr_hfree: malloc'd memory behind a 64-byte header whose
 *     magic says "live"; sr_hfree asserts it (a C assert: a second release,
 *     or a release of memory someone else released, aborts the process). */
#define _GNU_SOURCE
#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

#define SR_PAGE 4096
#define SR_HDR 64
#define SR_LIVE 0x5352214c49564521ULL /* "SR!LIVE!" */
#define SR_DEAD 0x5352214445414421ULL /* "SR!DEAD!" */

static size_t pages_of(intnat n) { return ((size_t)n + SR_PAGE - 1) / SR_PAGE * SR_PAGE; }

/* sr_mmap n: whole pages holding n bytes, or 0. */
CAMLprim value sr_mmap(value vn) {
  void *p = mmap(NULL, pages_of(Long_val(vn)), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return caml_copy_nativeint(p == MAP_FAILED ? 0 : (intnat)p);
}

CAMLprim value sr_munmap(value vp, value vn) {
  munmap((void *)Nativeint_val(vp), pages_of(Long_val(vn)));
  return Val_unit;
}

/* sr_protect_none p n: the pages become inaccessible (a poisoned page). */
CAMLprim value sr_protect_none(value vp, value vn) {
  mprotect((void *)Nativeint_val(vp), pages_of(Long_val(vn)), PROT_NONE);
  return Val_unit;
}

/* sr_hmalloc n: n bytes after a live header, or 0. */
CAMLprim value sr_hmalloc(value vn) {
  uint64_t *base = malloc((size_t)Long_val(vn) + SR_HDR);
  if (!base) return caml_copy_nativeint(0);
  base[0] = SR_LIVE;
  base[1] = (uint64_t)Long_val(vn);
  return caml_copy_nativeint((intnat)((char *)base + SR_HDR));
}

/* sr_hfree p: releases what sr_hmalloc gave; asserts it is still live. */
CAMLprim value sr_hfree(value vp) {
  uint64_t *base = (uint64_t *)((char *)Nativeint_val(vp) - SR_HDR);
  assert(base[0] == SR_LIVE && "sr: release of memory that is not live");
  base[0] = SR_DEAD;
  free(base);
  return Val_unit;
}

/* sr_fill p n byte */
CAMLprim value sr_fill(value vp, value vn, value vb) {
  memset((void *)Nativeint_val(vp), Int_val(vb) & 0xff, (size_t)Long_val(vn));
  return Val_unit;
}

/* sr_blit_in p s: copies s to p. */
CAMLprim value sr_blit_in(value vp, value vs) {
  memcpy((void *)Nativeint_val(vp), String_val(vs), caml_string_length(vs));
  return Val_unit;
}

/* sr_note page v: the status page records the highest value signaled saw.
 * A store into the page, no allocation, no lock. */
CAMLprim value sr_note(value vp, value vv) {
  _Atomic uint64_t *w = (_Atomic uint64_t *)Nativeint_val(vp);
  uint64_t v = (uint64_t)Long_val(vv);
  uint64_t old = atomic_load_explicit(w, memory_order_relaxed);
  while (old < v && !atomic_compare_exchange_weak_explicit(w, &old, v, memory_order_relaxed, memory_order_relaxed)) {
  }
  atomic_fetch_add_explicit(w + 1, 1, memory_order_relaxed); /* reads */
  return Val_unit;
}

/* sr_journal page code arg: appends (code, arg) to the page's ring. */
CAMLprim value sr_journal(value vp, value vcode, value varg) {
  _Atomic uint64_t *j = (_Atomic uint64_t *)Nativeint_val(vp);
  uint64_t k = atomic_fetch_add_explicit(&j[0], 1, memory_order_relaxed);
  size_t slots = (SR_PAGE / sizeof(uint64_t) - 1) / 2;
  size_t i = 1 + 2 * (size_t)(k % slots);
  atomic_store_explicit(&j[i], (uint64_t)Long_val(vcode), memory_order_relaxed);
  atomic_store_explicit(&j[i + 1], (uint64_t)Long_val(varg), memory_order_relaxed);
  return Val_unit;
}
