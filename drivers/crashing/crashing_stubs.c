/* The ways a broken driver dies: a segmentation fault and an abort, and
   whether this process is the first to get somewhere (crashing-once). */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

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

/* crashing_first path: true in the one process that creates path. */
value crashing_first(value path) {
  int fd = open(String_val(path), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return Val_false;
  close(fd);
  return Val_true;
}
