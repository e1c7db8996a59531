#include <stdlib.h>
#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/mlvalues.h>
/* check_pages n: n bytes of page-aligned host memory (never freed). */
value check_pages(value vn) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, (size_t)Long_val(vn)) != 0) abort();
  return caml_copy_nativeint((intnat)p);
}
