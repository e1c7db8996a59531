"""Drivers about entry's answer for a function too big for the device
(CODE-5), read with No_memory (CODE-3) and the whole Code section, written
blind.

drivers/blindc5/ (one plugin, blindc5.cmxs): hostmem with one behaviour
changed.  A helper wrote them from the document (spec/rig_edge_driver.txt)
and the installed interface alone, before the certifier ran on any, with
the table of what each breaks (and the sentences) at the top of
drivers/blindc5/blindc5.ml, committed before the first certification.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.  Where the certifier misses one, the case is xfail(strict)
with the reason.

| driver            | what it does | clause |
|-------------------|--------------|--------|
| c5-twice-capacity | too-big bound is 2*capacity: a need in (capacity, 2*capacity] answers No_memory | CODE-5 |
| c5-kib-vs-bytes   | too-big test compares KiB with bytes: needs up to 4 GiB answer No_memory | CODE-5 |
| c5-failure        | a too-big function raises Failure, not Invalid_argument | CODE-5 (xfail: EXC-2 fails too) |

Conforming drivers: every clause's verdict must be hostmem's, but where
given.

| driver              | what it does | verdicts other than hostmem's |
|---------------------|--------------|-------------------------------|
| c5-ok-queue-reserve | keeps capacity/4 of Device memory for its queues; too-big judged against the 3/4 it offers | none |
| c5-ok-scratch-pool  | scratch from a 2*capacity host pool apart from alloc's budget | CODE-3 n/a (xfail: the certifier says fail) |
| c5-ok-image-refuses | image refuses a binary with a too-big function | CODE-5 n/a (predicted) |
"""

import pytest

from test_blind_set import ROOT, certify, explain, hostmem, params, verdicts  # noqa: F401 (hostmem: a fixture)

BLINDC5 = ROOT / "_build" / "default" / "drivers" / "blindc5" / "blindc5.cmxs"

BROKEN = {
    "c5-twice-capacity": "CODE-5",
    "c5-kib-vs-bytes": "CODE-5",
    "c5-failure": "CODE-5",
}

MISSED = {}

# Caught (CODE-5 fail), but the certifier also fails a clause of rig's for
# the driver's bug.
MISJUDGED = {
    # EXC-2 is rig's ("An Invalid_argument from entry loses nothing"): with a
    # driver whose entry raises Failure there is no Invalid_argument for rig
    # to keep from losing the device, so rig.entry-invalid cannot judge rig
    # here (n/a); rig did what EXC-1 asks (the Failure lost the device).
    # The certifier reports the scenario's Failure as a violation of rig's
    # clause, on top of the driver's CODE-5.
    "c5-failure": "misjudged: EXC-2 fail as well as CODE-5 [rig.entry-invalid raised the driver's Failure; "
    "a rig clause the driver's bug leaves untestable, n/a, not fail]",
}

CONFORMING = {
    "c5-ok-queue-reserve": {},
    # Predicted before the run: CODE-3 n/a and CODE-4 n/a.  CODE-4 n/a was
    # wrong: CODE-4 is rig's clause, judged on model.rig whatever the
    # driver's entry answers, so it is hostmem's (pass).  CODE-3 n/a stands
    # (the certifier cannot exhaust a pool alloc never sees), see XFAIL.
    "c5-ok-scratch-pool": {"CODE-3": "n/a"},
    "c5-ok-image-refuses": {"CODE-5": "n/a"},
}

XFAIL = {
    # probe.CODE-3.no-memory fills alloc's Device memory and expects
    # No_memory from entry; this driver's scratch is a pool of its own
    # (2*capacity) that alloc never draws on, so it has the n bytes and
    # answers Entry.  The document asks for No_memory only "if the device has
    # no memory for the n bytes f's launches need", and nowhere says f's
    # scratch is the memory alloc gives (CODE-5 passes the same driver,
    # whose entry answers Entry for needs up to 2*capacity).
    "c5-ok-scratch-pool": "misjudged: CODE-3 fail [entry answered Entry with alloc's memory full: "
    "its scratch comes from a pool alloc never draws on, and that pool had the bytes]",
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), {**MISSED, **MISJUDGED}))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    data = certify(BLINDC5, driver, tmp_path)
    failed = {i for i, v in verdicts(data).items() if v == "fail"}
    assert failed == {BROKEN[driver]}, explain(data, failed | {BROKEN[driver]})


@pytest.mark.parametrize("driver", params(sorted(CONFORMING), XFAIL))
def test_conforming_gets_expected_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    data = certify(BLINDC5, driver, tmp_path)
    mine = verdicts(data)
    expected = {**verdicts(hostmem), **CONFORMING[driver]}
    differ = {i for i in mine if mine[i] != expected.get(i)}
    assert not differ, "verdicts that differ from the expected ones:\n" + explain(data, differ)
