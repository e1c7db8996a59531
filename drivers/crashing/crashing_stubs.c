/* The ways a broken driver dies: a segmentation fault and an abort. */
#include <signal.h>
#include <stdlib.h>

#include <caml/mlvalues.h>

value crashing_segfault(value unit) {
  (void)unit;
  raise(SIGSEGV);
  return Val_unit;
}

value crashing_abort(value unit) {
  (void)unit;
  abort();
  return Val_unit;
}
