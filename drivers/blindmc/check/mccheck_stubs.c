/* Host memory for map_host: whole pages, page-aligned, zeroed. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

CAMLprim value mccheck_pages(value vn) {
  void *p = NULL;
  size_t n = (size_t)Long_val(vn) * 4096;
  if (posix_memalign(&p, 4096, n) != 0) abort();
  memset(p, 0, n);
  return caml_copy_nativeint((intnat)p);
}

CAMLprim value mccheck_peek(value vp, value voff, value vlen) {
  CAMLparam3(vp, voff, vlen);
  CAMLlocal1(s);
  s = caml_alloc_string(Long_val(vlen));
  memcpy((char *)Bytes_val(s), (char *)Nativeint_val(vp) + Long_val(voff), Long_val(vlen));
  CAMLreturn(s);
}
