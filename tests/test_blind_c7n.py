"""Drivers about the second half of CODE-7 ("a prepare that raises must have
changed nothing"), written blind: a second regression set for
probe.CODE-7.prepare-raises, after it learnt to judge the next prepare.

drivers/blindc7n/ (one plugin, blindc7n.cmxs): hostmem's device with its
prepare, and what prepare shares with entry and unload, changed per driver.
A helper wrote them from the document (spec/) and the installed interface
alone, asked for shapes a check of "changed nothing" could misjudge, and
for bugs other than those of blindc7 and blindc7r; the table, where each
bug shows, and the ambiguities the helper met are at the top of
drivers/blindc7n/blindc7n.ml.  drivers/blindc7n/check/ (c7ncheck.exe) is
the author's own check that each bug is real (16 of 16).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver                | what its prepare leaves after it raised | clause |
|-----------------------|------------------------------------------|--------|
| c7n-refund-late       | its own budget charged: later prepares start nothing | CODE-7 |
| c7n-creg-gap          | a scratch made in C, not yet registered: taken for good | CODE-7 |
| c7n-negative-cache    | f remembered as failing: later prepares start nothing | CODE-7 |
| c7n-resume-partial    | a code buffer kept "for the next entry to resume" | CODE-7 |
| c7n-keep-after-commit | the published work kept when the wait after it raises | CODE-7 |
| c7n-deferred-free     | what it made on a list freed only at the image's next call | CODE-7 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver                | its prepare |
|-----------------------|-------------|
| c7n-ok-helper-staging | a helper with a 64 KiB staging buffer it frees as it publishes |
| c7n-ok-code-first     | makes only the entry's code buffer; entry adds the scratch |
| c7n-ok-twice          | counts the first ask, makes the entry at the second |
| c7n-ok-many-steps     | 3 Device buffers, 3 waits, 85 allocations, all undone on a raise |
| c7n-ok-slow-helper    | a helper that takes 300-600 ms, cancelled on a raise |
| c7n-ok-two-buffers    | a helper making two buffers; prepare waits for it to take the job |
| c7n-ok-budget         | a budget of its own, charged and refunded exactly |
| c7n-ok-creg           | one C call makes the entry and registers it |
| c7n-ok-ack-undo       | publishes, waits for an ack, undoes an unclaimed publication |
| c7n-ok-failed-memo    | remembers f only after a real out-of-memory failure |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDC7N = ROOT / "_build" / "default" / "drivers" / "blindc7n" / "blindc7n.cmxs"

BROKEN = {
    "c7n-refund-late": "CODE-7",
    "c7n-creg-gap": "CODE-7",
    "c7n-negative-cache": "CODE-7",
    "c7n-resume-partial": "CODE-7",
    "c7n-keep-after-commit": "CODE-7",
    "c7n-deferred-free": "CODE-7",
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED = {}

# No conforming driver's verdict differs from hostmem's.
CONFORMING = {
    "c7n-ok-helper-staging": {},
    "c7n-ok-code-first": {},
    "c7n-ok-twice": {},
    "c7n-ok-many-steps": {},
    "c7n-ok-slow-helper": {},
    "c7n-ok-two-buffers": {},
    "c7n-ok-budget": {},
    "c7n-ok-creg": {},
    "c7n-ok-ack-undo": {},
    "c7n-ok-failed-memo": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDC7N, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDC7N, driver, hostmem, CONFORMING[driver], tmp_path)
