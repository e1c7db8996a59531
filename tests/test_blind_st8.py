"""Drivers about STOP-8 ("free and unload after stop ... must touch nothing
of the new device"), written blind: a regression set for
probe.STOP-8.old-frees.

drivers/blindst8/ (one plugin, blindst8.cmxs): hostmem's driver wrapped,
one twist each, the hardware being the opener's name.  A helper wrote them
from the document (spec/) and the installed interface alone; the table,
the call sequences that show each bug and the ambiguities the helper met
are at the top of drivers/blindst8/blindst8.ml.  drivers/blindst8/check/
(st8check.exe) is the author's own check (6 bugs shown, 4 clean).

The first certify caught 1 of the 6: the probe freed the old device's
things back to back (work deferred to "the next call on the hardware" was
done on the old device), made no mapping, launched nothing and read the
new device's word never, and looked before a reaper thread acted.

One change of ours to the author's code: openers called Hostmem.openers
between its rig_holds check and its Prim.masked, an allocation with rig's
signals open, which every driver failed as SIG-6 (the probe saw it; the
author's check could not); the call now runs inside the mask.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver          | what it does after stop | clause |
|-----------------|-------------------------|--------|
| st8-slot-free   | free frees whatever a per-hardware slot table holds at that slot | STOP-8 |
| st8-map-reaper  | a reaper frees the mapping's handle on the name's current device, 50 ms later | STOP-8 |
| st8-scrub-next  | the next call on the hardware zeroes the region in that slot, on the calling device | STOP-8 |
| st8-entry-slot  | unload tears down whatever image a per-hardware image-slot table holds | STOP-8 |
| st8-ctx-reaper  | a reaper posts the old device's last value on the name's current device | STOP-8 |
| st8-map-next    | the next call on the hardware frees the mapping's handle on the calling device | STOP-8 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver             | what it does |
|--------------------|--------------|
| st8-gen-table      | the slot table keyed by (device generation, slot) |
| st8-deferred-right | st8-scrub-next's deferral, done on the old device |
| st8-reaper-obj     | a reaper keyed by the device object |
| st8-shared-pool    | one pool per hardware, each region charged to and reused by its own device |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDST8 = ROOT / "_build" / "default" / "drivers" / "blindst8" / "blindst8.cmxs"

BROKEN = {
    "st8-slot-free": {"STOP-8"},
    "st8-map-reaper": {"STOP-8"},
    "st8-scrub-next": {"STOP-8"},
    "st8-entry-slot": {"STOP-8"},
    "st8-ctx-reaper": {"STOP-8"},
    "st8-map-next": {"STOP-8"},
}

# The certifier's misses: driver -> what it said.
MISSED: dict = {}

# Flagged with STOP-8 rightly, and with another clause too, by model.driver
# (its runs depend on when the driver's reaper thread acts, so not every
# run shows it: xfail, not strict).  The model reads the damage its
# sequences meet after a reopen as the clause of the call that met it, not
# as STOP-8: a precision gap of model.driver's, left open.
UNSTABLE = {
    "st8-map-reaper": "also MEM-2 (model.driver: a region of a device opened after the stop raised Fault on host access, after the reaper freed it)",
    "st8-ctx-reaper": "also TIME-1 (model.driver: another device's word read 6, a value never given to its submit) and ASYNC-2 (async.rig.wait-for-work: a word that stood still)",
}

CONFORMING = {
    "st8-gen-table": {},
    "st8-deferred-right": {},
    "st8-reaper-obj": {},
    "st8-shared-pool": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDST8, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDST8, driver, hostmem, CONFORMING[driver], tmp_path)
