"""Drivers about STOP-3's "also when that submit failed", written blind
against Rig_edge.kit_more's refused_launch: a regression set for
probe.STOP-3.failed-submit.

drivers/blindsf/ (one plugin, blindsf.cmxs): hostmem's device (its C stubs
copied as sf_*, a variant chosen per driver at open), each driver
registered with a refused_launch.  A helper wrote them from the document
(spec/) and the installed interface alone; the table and the ambiguities
the helper met are at the top of drivers/blindsf/blindsf.ml.
drivers/blindsf/check/ (sfcheck.exe) is the author's own check that each
bug is real and each conforming driver right (10 of 10).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver           | what it does with a failed submit | clause |
|------------------|-----------------------------------|--------|
| sf-late-record   | records the value only after the parts pass its checks, the refusal first | STOP-3 |
| sf-thread-slot   | keeps the value in the thread's slot, copied to the device only when encoding succeeds | STOP-3 |
| sf-accepted      | stop writes the last value the queue accepted | STOP-3 |
| sf-idle-worker   | leaves the value to the worker, which wakes only for committed work | STOP-3 |
| sf-late-reset    | stop leaves the write to the worker, which "resets" for 50 ms first: after stop returned | STOP-3 |
| sf-needs-history | records a failed submit's value only after some submit succeeded | STOP-3 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver         | how it refuses, and who writes the value |
|----------------|------------------------------------------|
| sf-entry-flag  | a flag on the entry object, set from the image; its refused_launch is "guarded" |
| sf-allowlist   | an allowlist of function kinds; the value recorded as submit leaves |
| sf-stop-helper | stop wakes the idle worker to write the value and waits (bounded) for it |
| sf-alone-only  | refuses the launch only when it is the submission's only part |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDSF = ROOT / "_build" / "default" / "drivers" / "blindsf" / "blindsf.cmxs"

BROKEN = {
    "sf-late-record": {"STOP-3"},
    "sf-thread-slot": {"STOP-3"},
    "sf-accepted": {"STOP-3"},
    "sf-idle-worker": {"STOP-3"},
    "sf-late-reset": {"STOP-3"},
    "sf-needs-history": {"STOP-3"},
}

# The certifier's misses: driver -> what it said.
MISSED: dict = {}

CONFORMING = {
    "sf-entry-flag": {},
    "sf-allowlist": {},
    "sf-stop-helper": {},
    "sf-alone-only": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDSF, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDSF, driver, hostmem, CONFORMING[driver], tmp_path)
