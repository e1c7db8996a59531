/* rig_edge_min.c: the lock count of rig_edge.h (LOCK-3) for C programs
 * without the OCaml runtime (the fuzzers); the same as
 * harness/edge/rig_edge_stubs.c's. */
#include "rig_edge.h"

static __thread int holds_count;

int rig_holds(void) { return holds_count; }
void rig_hold(void) { holds_count++; }
void rig_give(void) { holds_count--; }
