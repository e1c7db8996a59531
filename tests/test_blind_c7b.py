"""Drivers about CODE-7's "a prepare that raises must have changed nothing"
for the image's OTHER functions, written blind against Rig_edge.kit_more's
scratch_functions: a regression set for probe.CODE-7.prepare-raises-beside.

drivers/blindc7b/ (one plugin, blindc7b.cmxs): hostmem's device, prepare
(and entry, for two) changed per driver; a prepare "compiles" (a wait) and
makes the function's program, charged to Device memory.  A helper wrote
them from the document (spec/) and the installed interface alone; the
table, where each bug shows and the ambiguities the helper met are at the
top of drivers/blindc7b/blindc7b.ml.  drivers/blindc7b/check/
(c7bcheck.exe) is the author's own check that each bug is real (10 of 10).

What the first certify taught the probe: with one other function prepared
it caught 3 of the 6; an LRU of two needs two others prepared
(c7b-lru-evict-early), a prepare that steals only when f does not fit needs
memory short (c7b-steal-early), and one that makes the others' programs as
f's dependencies shows only where f's prepare is the image's first
(c7b-deps-abandon).  The probe now has all three worlds.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver               | what its prepare does | clause |
|----------------------|-----------------------|--------|
| c7b-lru-evict-early  | an LRU of 2 prepared programs: evicts, then waits, then makes f | CODE-7 |
| c7b-slot-reset       | one staging slot: empties it, then waits | CODE-7 |
| c7b-repack           | frees every prepared program, waits, re-makes them all and f | CODE-7 |
| c7b-deps-abandon     | makes the others' programs as f's dependencies, then waits | CODE-7 |
| c7b-inflight-counter | a "compiler busy" counter left raised: entries then ignore prepared programs | CODE-7 |
| c7b-steal-early      | when f does not fit, frees others' programs, then waits | CODE-7 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver             | its prepare |
|--------------------|-------------|
| c7b-lru-evict-late | the LRU, its victim evicted after its last wait and allocation |
| c7b-evict-on-entry | never evicts; entry does, where that makes enough room |
| c7b-build-aside    | builds aside, swaps at the end, undoes on an exception |
| c7b-solo           | prepares only where no other function has an entry or a program |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDC7B = ROOT / "_build" / "default" / "drivers" / "blindc7b" / "blindc7b.cmxs"

BROKEN = {
    "c7b-lru-evict-early": {"CODE-7"},
    "c7b-slot-reset": {"CODE-7"},
    "c7b-repack": {"CODE-7"},
    "c7b-deps-abandon": {"CODE-7"},
    "c7b-inflight-counter": {"CODE-7"},
    "c7b-steal-early": {"CODE-7"},
}

# The certifier's misses: driver -> what it said.
MISSED: dict = {}

CONFORMING = {
    "c7b-lru-evict-late": {},
    "c7b-evict-on-entry": {},
    "c7b-build-aside": {},
    "c7b-solo": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDC7B, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDC7B, driver, hostmem, CONFORMING[driver], tmp_path)
