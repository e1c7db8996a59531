"""Drivers about lateness that comes from the CPU in sleep (sleep's bound,
TIME-4; sleep's "return immediately", TIME-3; sleep while the driver's
submit or commit runs, TIME-6), written blind.

drivers/blindtq/ (one plugin, blindtq.cmxs): hostmem with sleep, or what it
needs, changed.  A helper wrote them from the document (spec/) and the
installed interface alone, with the table of what each does (and the
sentences relied on) at the top of drivers/blindtq/blindtq.ml, before the
certifier ran on any.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver           | what it does | clause |
|------------------|--------------|--------|
| tq-spin-grace    | busy-spins (runtime released, in waits) to still_ms + 2000 ms | TIME-4 |
| tq-yield-2x      | loops on sched_yield to max(2 * still_ms, still_ms + 1000) ms | TIME-4 |
| tq-post-compute  | after a wait that ends on an unmoved word, 1500 ms of CPU before returning | TIME-4 |
| tq-cpu-deadline  | its deadline is in thread CPU time while it mostly naps (~5 * still_ms) | TIME-4 |
| tq-rearm         | each wake-up of its 50-ms slices re-arms the full still_ms (up to 40 times) | TIME-4 |
| tq-moved-compute | a word that already differs first costs min(3/4 still_ms, 1500) ms of CPU | TIME-3 |
| tq-ring-lock     | sleep holds the ring lock across its wait; submit and commit take it | TIME-6 |
| tq-spin-submit   | sleep spins while another thread has a submission open (submit to commit) | TIME-4 (*) |

(*) The table in blindtq.ml, written blind, expected TIME-6 for
tq-spin-submit.  The certifier's TIME-6 probes pass it and its model
(model.driver) fails TIME-4 on a sleep that overstays while another thread's
submission is submitted but not committed: no submit or commit call runs
then, so the lateness is TIME-4's.  The author agrees with that reading.

Conforming drivers: every clause's verdict must be hostmem's.

| driver           | what it does |
|------------------|--------------|
| tq-ok-spin       | busy-spins (runtime released, in waits) to exactly still_ms of wall time |
| tq-ok-nap1       | a sleep made of 1-ms nanosleeps to a wall-clock deadline |
| tq-ok-third      | returns early every time: hostmem's sleep for max(1, still_ms / 3) |
| tq-ok-burner     | a C thread per device burns a CPU from open to stop |
| tq-ok-pad        | up to 3 ms of CPU before and after its wait, all within still_ms |
| tq-ok-absmono    | one absolute CLOCK_MONOTONIC deadline, sub-ms rest by clock_nanosleep(TIMER_ABSTIME) |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDTQ = ROOT / "_build" / "default" / "drivers" / "blindtq" / "blindtq.cmxs"

BROKEN = {
    "tq-spin-grace": "TIME-4",
    "tq-yield-2x": "TIME-4",
    "tq-post-compute": "TIME-4",
    "tq-cpu-deadline": "TIME-4",
    "tq-rearm": "TIME-4",
    "tq-moved-compute": "TIME-3",
    "tq-ring-lock": "TIME-6",
    "tq-spin-submit": "TIME-4",  # blind table: TIME-6 (see the docstring)
}

MISSED: dict = {}

# Broken drivers the certifier judges right in some runs only (xfail, not
# strict).  tq-spin-grace, which spins on a CPU with the runtime released,
# also failed SIG-3 once in a CI rehearsal of stop 35 (the suite's 8
# workers on 2 cores): "another OCaml thread waited for the runtime 444 ms
# of the sleeps' 2100 ms ... (3 of 3 measures show a kept runtime)".
# tq-spin-grace was flagged SIG-3 besides TIME-4 once under the suite's
# load (the other thread, woken at each of its 500-us released steps, lost
# the runtime lock to it again and again) and marked unstable; since stop
# 36 the sleeping thread's own hold inside its waits judges, and the mark
# is off.
# tq-ring-lock's sleep holds the device's ring lock across its wait, so a
# second sleep of the same device waits for it beyond its own still_ms:
# TIME-4 too, by its letter ("must return ... at the latest after still_ms
# milliseconds").  The certifier sees that only when a sleep waits 5 s, as
# the busy SIG-3 probe's second sleeper did once under the suite's load
# (stop 39's rehearsal: "sleep did not return within 5 s").
UNSTABLE: dict = {
    "tq-ring-lock": "TIME-4 as well when a second sleep of the device waits 5 s for the ring lock (load)",
}

CONFORMING = {
    "tq-ok-spin": {},
    "tq-ok-nap1": {},
    "tq-ok-third": {},
    "tq-ok-burner": {},
    "tq-ok-pad": {},
    "tq-ok-absmono": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDTQ, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDTQ, driver, hostmem, CONFORMING[driver], tmp_path)
