/* The calling thread's kernel id, and a signal sent to the calling thread
 * itself (self_thread.ml): with the thread's mask blocking it, the signal
 * stays pending on this very thread until the mask opens.  Also a signal
 * sent to another thread of the process, by its kernel id. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <caml/fail.h>
#include <caml/mlvalues.h>

/* Exported by the runtime, declared only under CAML_INTERNALS. */
CAMLextern int caml_convert_signal_number(int);

value rig_self_thread_gettid(value unit) {
  (void)unit;
  return Val_long((long)syscall(SYS_gettid));
}

value rig_self_thread_kill(value signo) {
  int s = caml_convert_signal_number(Int_val(signo));
  if (pthread_kill(pthread_self(), s) != 0) caml_failwith("pthread_kill");
  return Val_unit;
}

value rig_self_thread_kill_tid(value tid, value signo) {
  int s = caml_convert_signal_number(Int_val(signo));
  if (syscall(SYS_tgkill, (long)getpid(), (long)Long_val(tid), (long)s) != 0) caml_failwith("tgkill");
  return Val_unit;
}
