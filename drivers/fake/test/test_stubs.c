/* test_stubs.c: page-aligned host memory for the map_host smoke test. */
#include <stdlib.h>
#include <unistd.h>
#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/mlvalues.h>

value test_page_alloc(value n) {
  void *p = NULL;
  if (posix_memalign(&p, (size_t)sysconf(_SC_PAGESIZE), (size_t)Long_val(n)) != 0)
    caml_raise_out_of_memory();
  return caml_copy_nativeint((intnat)p);
}

value test_page_free(value p) {
  free((void *)Nativeint_val(p));
  return Val_unit;
}

value test_poke(value p, value off, value b) {
  ((unsigned char *)Nativeint_val(p))[Long_val(off)] = (unsigned char)Int_val(b);
  return Val_unit;
}

value test_peek(value p, value off) {
  return Val_int(((unsigned char *)Nativeint_val(p))[Long_val(off)]);
}
