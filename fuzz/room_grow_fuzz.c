/* room_grow_fuzz.c: the libFuzzer entry point of the room/grow fuzzer.  Each
 * input is a schedule run by room_grow_schedule.c against the driver of the
 * adapter linked in; a violation prints "rig-fuzz: VIOLATION <clause> ..."
 * and aborts, so libFuzzer saves the input.  fuzz/to_scenario.sh turns such
 * an input into a scenario that replays it in the certifier.
 *
 * Modes (environment, read once):
 *   RIG_FUZZ_TRACE=1        print each step
 *   RIG_FUZZ_MUTANT=name|n  run the driver's mutant (the fake's enum fake_mutant)
 *   RIG_FUZZ_REAL_WORKER=1  the driver's own worker threads run the work
 *                           (not replayable; for TSan), with a real thread
 *                           sleeping on the word while the schedule runs.
 *
 * The interpreter is included rather than linked so that this file alone,
 * with rig_edge_min.c and an adapter, still builds the target (mk/sanitize.mk
 * and a driver author's own build list exactly those). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "room_grow_schedule.c"

static struct rig_schedule_options fuzz_opt = {.abort_on_violation = 1};
static int fuzz_opt_ready;

static int env_on(const char *name) {
  const char *e = getenv(name);
  return e && *e && strcmp(e, "0") != 0;
}

static void fuzz_options(void) {
  if (fuzz_opt_ready) return;
  fuzz_opt_ready = 1;
  fuzz_opt.trace = env_on("RIG_FUZZ_TRACE");
  fuzz_opt.real_worker = env_on("RIG_FUZZ_REAL_WORKER");
  const char *e = getenv("RIG_FUZZ_MUTANT");
  if (e && *e) {
    char *end;
    long n = strtol(e, &end, 10);
    fuzz_opt.mutant = *end == 0 ? (int)n : rig_schedule_mutant_code(e);
    if (fuzz_opt.mutant < 0) {
      fprintf(stderr, "rig-fuzz: unknown RIG_FUZZ_MUTANT %s (known:", e);
      for (int i = 0; rig_schedule_mutant_name(i); i++) fprintf(stderr, " %s", rig_schedule_mutant_name(i));
      fprintf(stderr, ")\n");
      exit(2);
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_options();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct rig_schedule_result res;
  fuzz_options();
  /* A violation aborts inside; -1 (no device) aborts there too. */
  rig_schedule_run(data, size, &fuzz_opt, &res);
  return 0;
}
