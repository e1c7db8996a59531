"""Drivers about CODE-7 ("A prepare of an f that has an entry or a started
prepare must start nothing, and a prepare that raises must have changed
nothing"), written blind: a regression set for the CODE-7 probes.

drivers/blindc7/ (one plugin, blindc7.cmxs): hostmem's device with its
entry and prepare (and what they share: a per-image record of entries and
started prepares, helper threads, a program cache) changed per driver.  A
helper wrote them from the document (spec/) and the installed interface
alone, with the table of what each does (and the sentences) at the top of
drivers/blindc7/blindc7.ml, before the certifier ran on any;
drivers/blindc7/check/ (c7check.exe) is the author's own check that each
bug is real.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver              | its prepare | clause |
|---------------------|-------------|--------|
| c7-finished-only    | a helper thread compiles f (50-300 ms); "already started?" looks at finished entries only: a second prepare before the first finished starts a second helper | CODE-7 |
| c7-after-entry      | compiles into a "prepared" handle; its check is a flag only prepare sets: for an f whose entry entry made, prepare compiles again | CODE-7 |
| c7-reserve-then-log | reserves the scratch into a local, formats a log line, waits for an "upload", then records it: an asynchronous exception between leaves the scratch charged | CODE-7 |
| c7-handler-forgets  | reserves into a staging field, uploads (a wait), promotes; its handler gives back the pending mark only | CODE-7 |
| c7-cache-flushed    | compiles into a device program cache whose index anything that frees Device memory drops; its check looks only at that cache | CODE-7 |
| c7-raise-leaves-job | a helper reserves at once, acknowledges, compiles; prepare waits for the acknowledgement: an exception at that wait leaves the job running | CODE-7 |
| c7-check-then-mark  | checks "no entry, none started" under the lock, lets go of it for a 2-ms read, then compiles without checking again: two prepares at once both compile | CODE-7 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver                | its prepare |
|-----------------------|-------------|
| c7-ok-slow-async      | c7-finished-only with the check fixed (pending prepares count) |
| c7-ok-nothing         | nothing |
| c7-ok-sync            | makes the entry synchronously, straight into the record |
| c7-ok-guarded         | c7-reserve-then-log made exception-safe |
| c7-ok-cancel-on-raise | c7-raise-leaves-job whose handler cancels the job |
| c7-ok-cache           | c7-cache-flushed whose miss falls back to the image's own record |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDC7 = ROOT / "_build" / "default" / "drivers" / "blindc7" / "blindc7.cmxs"

BROKEN = {
    "c7-finished-only": "CODE-7",
    "c7-after-entry": "CODE-7",
    "c7-reserve-then-log": "CODE-7",
    "c7-handler-forgets": "CODE-7",
    "c7-cache-flushed": "CODE-7",
    "c7-raise-leaves-job": "CODE-7",
    "c7-check-then-mark": "CODE-7",
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED = {}

# c7-finished-only was unstable: its bug shows only while a first prepare's
# helper (50-300 ms) is still compiling when the second prepare comes, and
# under the suite's load (a rehearsal of 2bc3563) the prepare on the probe's
# thread beside came after that.  probe.CODE-7.prepare-started now makes two
# or three back to back on its own thread as well: 10 of 10 seeds and 5 of 5
# certifications find it beside 8 CPU hogs on 2 cores.
UNSTABLE: dict = {}

# No conforming driver's verdict differs from hostmem's.
CONFORMING = {
    "c7-ok-slow-async": {},
    "c7-ok-nothing": {},
    "c7-ok-sync": {},
    "c7-ok-guarded": {},
    "c7-ok-cancel-on-raise": {},
    "c7-ok-cache": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDC7, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDC7, driver, hostmem, CONFORMING[driver], tmp_path)
