"""Drivers about the timing sentences (sleep's bound, TIME-4; sleep's
"return immediately", TIME-3; slow work under rig's hang bound), written
blind: the regression set for the shorter timings of issue 14 (the model's
TIME-4 allowance, the scenarios' quick hang bound).

drivers/blindtm/ (one plugin, blindtm.cmxs): hostmem with the timing of
sleep, or of the device's work, changed.  A helper wrote them from the
document (spec/) and the installed interface alone, with the table of what
each breaks (and the sentences) at the top of drivers/blindtm/blindtm.ml,
before the certifier ran on any; drivers/blindtm/check/ is the author's own
check that each bug is as large as the table says.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver           | what it does | clause |
|------------------|--------------|--------|
| tm-tick-round    | still_ms rounded up to 500-ms ticks, plus a guard tick | TIME-4 |
| tm-retry-restart | a wait that ends on an unmoved word waits the full still_ms once more | TIME-4 |
| tm-long-default  | a still_ms of 256 or more (an 8-bit field) becomes a 2000-ms default | TIME-4 |
| tm-settle        | a word that already differs is waited on up to min(still_ms, 500) ms | TIME-3 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver           | what it does |
|------------------|--------------|
| tm-ok-slow-work  | every submission's work starts 150-250 ms late |
| tm-ok-2ms        | each sleep returns after at most 2 ms |
| tm-ok-timer200   | each sleep ends at the next tick of a 200-ms timer of the device's own |
| tm-ok-first-slow | a device's first sleep naps min(250, still_ms / 2) ms before it watches the word |
"""

import pytest

from test_blind_set import ROOT, certify, explain, hostmem, params, verdicts  # noqa: F401 (hostmem: a fixture)

BLINDTM = ROOT / "_build" / "default" / "drivers" / "blindtm" / "blindtm.cmxs"

BROKEN = {
    "tm-tick-round": "TIME-4",
    "tm-retry-restart": "TIME-4",
    "tm-long-default": "TIME-4",
    "tm-settle": "TIME-3",
}

MISSED: dict = {}

CONFORMING = {
    "tm-ok-slow-work": {},
    "tm-ok-2ms": {},
    "tm-ok-timer200": {},
    "tm-ok-first-slow": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    data = certify(BLINDTM, driver, tmp_path)
    failed = {i for i, v in verdicts(data).items() if v == "fail"}
    assert failed == {BROKEN[driver]}, explain(data, failed | {BROKEN[driver]})


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    data = certify(BLINDTM, driver, tmp_path)
    mine = verdicts(data)
    expected = {**verdicts(hostmem), **CONFORMING[driver]}
    differ = {i for i in mine if mine[i] != expected.get(i)}
    assert not differ, "verdicts that differ from the expected ones:\n" + explain(data, differ)
