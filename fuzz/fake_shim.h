/* fake_shim.h: force-included (-include) when the fuzzer compiles
 * drivers/fake/fake_core.c, whose queue functions tell threads apart with
 * pthread_self().  The fuzzer runs its logical threads on one real thread,
 * so pthread_self() answers the logical thread the scheduler chose
 * (rig_fuzz_self, in fake_adapter.c), or the real thread outside the
 * scheduler.  fake_core.c itself is unchanged. */
#ifndef FAKE_SHIM_H
#define FAKE_SHIM_H
#include <pthread.h>
pthread_t rig_fuzz_self(void);
#define pthread_self() rig_fuzz_self()
#endif
