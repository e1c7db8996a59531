"""Drivers about entry's No_memory and map_host's pages (CODE-3, MEM-7),
written blind.

drivers/blindcm/ (one plugin, blindcm.cmxs): hostmem with one behaviour
changed.  A helper wrote them from the document (spec/rig_edge_driver.txt)
and the driver-facing interface alone, before the certifier ran on any,
with the table of what each breaks (and the sentences) at the top of
drivers/blindcm/blindcm.ml.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.  Where the certifier misses one, the case is xfail(strict)
with the reason.

| driver                | what it does | clause |
|-----------------------|--------------|--------|
| cm-entry-boundary     | entry answers No_memory unless free memory is strictly more than the need | CODE-3 |
| cm-entry-keeps-pieces | entry makes f's memory in four pieces and keeps those it made when it answers No_memory | CODE-3 |
| cm-map-512            | map_host rounds n up to 512 bytes, not to the page | MEM-7 |
| cm-map-recycle        | a later map_host on the device unmaps the previous mapping before it is freed | MEM-7 |

Conforming drivers: every clause's verdict must be hostmem's, but where
given.

| driver                 | what it does | verdicts other than hostmem's |
|------------------------|--------------|-------------------------------|
| cm-ok-entry-descriptor | entry also makes a 64-byte descriptor, counted in No_memory's n (kit adjusted) | none |
| cm-ok-map-extra-page   | map_host maps one page more than the pages that hold the n bytes | none |
| cm-ok-entry-pieces     | entry makes f's memory in four pieces, all given back on No_memory | none |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDCM = ROOT / "_build" / "default" / "drivers" / "blindcm" / "blindcm.cmxs"

BROKEN = {
    "cm-entry-boundary": "CODE-3",
    "cm-entry-keeps-pieces": "CODE-3",
    "cm-map-512": "MEM-7",
    "cm-map-recycle": "MEM-7",
}

MISSED: dict = {
    # cm-map-recycle was missed by the first version of probe.MEM-7 (it
    # checked only the pages a mapping reaches); the probe now fills the
    # first mapping again after two map_host of other pages.
}

CONFORMING = {
    "cm-ok-entry-descriptor": {},
    "cm-ok-map-extra-page": {},
    "cm-ok-entry-pieces": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDCM, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDCM, driver, hostmem, CONFORMING[driver], tmp_path)
