/* broken-locate-c-lock's table lock: taken and given around the read of a
 * handle, a few instructions, by whichever thread calls locate. */
#include <pthread.h>

#include <caml/mlvalues.h>

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;

value broken_lcl_handle(value h) {
  pthread_mutex_lock(&table_mu);
  value read = h;
  pthread_mutex_unlock(&table_mu);
  return read;
}
