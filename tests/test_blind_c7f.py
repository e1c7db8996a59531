"""Drivers about CODE-7 where prepare meets a device whose work faulted
before rig learnt of it ("a prepare that raises must have changed
nothing"), written blind: a regression set for
probe.CODE-7.prepare-after-fault.

drivers/blindc7f/ (one plugin, blindc7f.cmxs): hostmem's device, prepare
changed per driver.  A helper wrote them from the document (spec/) and the
installed interface alone, asked for prepares that notice a fault; the
table, where each bug shows, and the ambiguities the helper met are at the
top of drivers/blindc7f/blindc7f.ml.  drivers/blindc7f/check/ (c7fcheck.exe)
is the author's own check that each bug is real (10 of 10).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver             | what its prepare does on a faulted device | clause |
|--------------------|--------------------------------------------|--------|
| c7f-keep-entry     | makes f's entry, then raises Fault keeping it | CODE-7 |
| c7f-hold-reserve   | reserves f's scratch, then raises Fault leaving the reservation | CODE-7 |
| c7f-stale-mark     | marks f (by binary, in the process) as being prepared, raises Fault with the mark left: no later prepare of f makes anything | CODE-7 |
| c7f-leak-staging   | a staging buffer and f; on Fault drops f, forgets the buffer | CODE-7 |
| c7f-async-runs-on  | a helper makes f; prepare raises Fault, the helper carries on | CODE-7 |
| c7f-ok-async-undo  | meant as conforming (its fault path cancels the helper), but an asynchronous exception between the helper's start and its record leaves the helper to make f | CODE-7 (not meant) |
| c7f-ok-giveback    | meant as conforming (its fault path gives both back), but an asynchronous exception while it makes f leaves the staging buffer taken for good | CODE-7 (not meant) |

Conforming drivers: every clause's verdict must be hostmem's.

| driver            | its prepare on a faulted device |
|-------------------|---------------------------------|
| c7f-ok-early      | raises Fault before touching anything |
| c7f-ok-alternate  | raises Fault on every other call, having touched nothing |
| c7f-ok-ignore     | ignores the fault and makes f |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDC7F = ROOT / "_build" / "default" / "drivers" / "blindc7f" / "blindc7f.cmxs"

BROKEN = {
    "c7f-keep-entry": {"CODE-7"},
    "c7f-hold-reserve": {"CODE-7"},
    "c7f-stale-mark": {"CODE-7"},
    "c7f-leak-staging": {"CODE-7"},
    "c7f-async-runs-on": {"CODE-7"},
    "c7f-ok-async-undo": {"CODE-7"},
    "c7f-ok-giveback": {"CODE-7"},
}

# The certifier's misses: driver -> what it said.
MISSED: dict = {}

CONFORMING = {
    "c7f-ok-early": {},
    "c7f-ok-alternate": {},
    "c7f-ok-ignore": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDC7F, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDC7F, driver, hostmem, CONFORMING[driver], tmp_path)
