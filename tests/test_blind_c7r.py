"""Drivers about the second half of CODE-7 ("a prepare that raises must have
changed nothing"), written blind: a regression set for
probe.CODE-7.prepare-raises.

drivers/blindc7r/ (one plugin, blindc7r.cmxs): hostmem's device with its
prepare, and what prepare shares with entry and unload, changed per driver.
A helper wrote them from the document (spec/) and the installed interface
alone, with the table of what each does, where its bug shows, and the
ambiguities the helper met at the top of drivers/blindc7r/blindc7r.ml,
before the certifier ran on any; drivers/blindc7r/check/ (c7rcheck.exe) is
the author's own check that each bug is real (12 of 12).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver                 | what its prepare leaves after it raised | clause |
|------------------------|------------------------------------------|--------|
| c7r-stuck-pending      | f marked pending: the next entry waits for good, a clean prepare starts nothing | CODE-7 |
| c7r-half-rollback      | a freed handle in f's slot: the next entry answers it, a clean prepare starts nothing | CODE-7 |
| c7r-orphan-thread      | a compiler thread unload cannot cancel: it reserves after the raise | CODE-7 |
| c7r-fault-after-commit | on a faulted device, f's program made when prepare raises Fault | CODE-7 |
| c7r-evict-first        | another function's unclaimed prepared program freed | CODE-7 |
| c7r-started-set        | f recorded as started: a clean prepare starts nothing | CODE-7 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver                | its prepare |
|-----------------------|-------------|
| c7r-ok-cstub          | one C call claims, reserves and records, after its last allocation |
| c7r-ok-wait-first     | waits and allocates first, then one locked section with an undo |
| c7r-ok-retry          | retries a short budget 3 times, then gives up silently |
| c7r-ok-cancel-stages  | two stages on a helper, cancelled by prepare's handler |
| c7r-ok-fault-rollback | c7r-fault-after-commit that gives the program back before Fault |
| c7r-ok-shadow-commit  | builds the new table aside, commits by one swap, undoes each step |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDC7R = ROOT / "_build" / "default" / "drivers" / "blindc7r" / "blindc7r.cmxs"

BROKEN = {
    "c7r-stuck-pending": "CODE-7",
    "c7r-half-rollback": "CODE-7",
    "c7r-orphan-thread": "CODE-7",
    "c7r-fault-after-commit": "CODE-7",
    "c7r-evict-first": "CODE-7",
    "c7r-started-set": "CODE-7",
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED = {
}

# No conforming driver's verdict differs from hostmem's.
CONFORMING = {
    "c7r-ok-cstub": {},
    "c7r-ok-wait-first": {},
    "c7r-ok-retry": {},
    "c7r-ok-cancel-stages": {},
    "c7r-ok-fault-rollback": {},
    "c7r-ok-shadow-commit": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDC7R, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDC7R, driver, hostmem, CONFORMING[driver], tmp_path)
