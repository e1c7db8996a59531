/* room_grow_schedule.h: the room/grow schedule interpreter, apart from any
 * fuzzing engine, so that two programs run the same schedules:
 *   - the libFuzzer target room_grow_fuzz.c, which aborts at a violation
 *     (libFuzzer then saves the input);
 *   - the certifier (harness/schedule/, the scenario statement `schedule`),
 *     which gets the violation back as a clause ID and a message.
 * The input bytes are a schedule (fuzz/README.md); the driver is the one
 * rig_fuzz_driver.h's adapter linked in (fake_adapter.c for the fake). */
#ifndef ROOM_GROW_SCHEDULE_H
#define ROOM_GROW_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

struct rig_schedule_options {
  int trace;       /* print each step on stderr, as RIG_FUZZ_TRACE=1 does */
  int real_worker; /* the driver's own worker threads (not replayable; TSan) */
  int mutant;      /* rig_fuzz_config.mutant: 0 for the conforming driver */
  int abort_on_violation; /* print "rig-fuzz: VIOLATION ..." and abort() (the fuzzer) */
};

struct rig_schedule_result {
  int violated;     /* 1: clause and message say what; 0: the run held */
  int step;         /* the step the violation came at */
  char clause[24];  /* "QUEUE-1", "STOP-3", ...; "DEC-QUEUE" for decisions.md's reading */
  char message[512];
};

/* Runs one schedule from open to close.  Returns 0 when the run went to its
 * end or stopped at a violation (res->violated), -1 when the driver could
 * not be set up (no device, no witness region: res->message says which).
 * After a violation the device is left as it was (not stopped, not
 * freed): it may be in any state.  Not reentrant: one run at a time per
 * process. */
int rig_schedule_run(const uint8_t *data, size_t size, const struct rig_schedule_options *opt,
                     struct rig_schedule_result *res);

/* The code of a mutant the fuzzer knows by name (RIG_FUZZ_MUTANT), "none"
 * being 0; -1 for an unknown name. */
int rig_schedule_mutant_code(const char *name);

/* The names rig_schedule_mutant_code knows, i from 0; NULL past the last. */
const char *rig_schedule_mutant_name(int i);

#endif
