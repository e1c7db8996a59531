/* The validation layer's one look at the thread's signal mask (SIG-1), in C:
   Thread.sigmask builds a list of every blocked signal, converted one by
   one, at each driver call, which was most of the layer's own cost. */

#include <pthread.h>
#include <signal.h>

#include <caml/mlvalues.h>

/* The runtime's own mapping (runtime/signals.c), exported but declared for
   the runtime's internals only. */
CAMLextern int caml_convert_signal_number(int);

/* How many of [sigs] (OCaml signal numbers) the calling thread does not
   block. */
value rig_validate_unblocked(value sigs)
{
  sigset_t now;
  int open_ = 0;
  if (pthread_sigmask(SIG_BLOCK, NULL, &now) != 0) return Val_int(-1);
  for (mlsize_t i = 0; i < Wosize_val(sigs); i++)
    if (!sigismember(&now, caml_convert_signal_number(Int_val(Field(sigs, i))))) open_++;
  return Val_int(open_);
}
