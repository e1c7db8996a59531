"""Drivers about the Stopping section's last sentence (STOP-6: "Once the word
shows the last value given to submit and stop has returned, no write of d
or of its work to the word may land, since the word then passes to a later
device") and its neighbours (STOP-2: stop must not wait for work; STOP-3:
the last value is written only once no work runs), written blind.

drivers/blindst6/ (one plugin, blindst6.cmxs): hostmem with its completion
path and stop changed.  Each driver keeps a timeline word of its own, which
an IRQ thread fills from hostmem's word (the device's fence register).  A
helper wrote them from the document (spec/) and the installed interface
alone, with the table of what each does (and the sentences) at the top of
drivers/blindst6/blindst6.ml, before the certifier ran on any;
drivers/blindst6/check/ is the author's own check that each late write
really lands (check/README holds a run).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.  Each writes the last value as STOP-3 asks and never waits
for work; then a write lands after the word showed it.

| driver             | the late write | when | clause |
|--------------------|----------------|------|--------|
| st6-irq-exit-flush | the unjoined IRQ thread flushes its retired counter ~2 ms after L; the word stays stale | work ran at stop | STOP-6 |
| st6-wb-timer       | a write-back timer writes the cached (retired) value 150 ms after stop; stays stale | work ran or was dropped at stop | STOP-6 |
| st6-release-reset  | the deferred queue release zeroes the word 300 ms after L; stays 0 | every stop after a submit | STOP-6 |
| st6-release-blip   | the deferred ring teardown writes the retired value 4 ms after L, fini writes L again 10 ms later | work ran or was dropped at stop | STOP-6 |
| st6-posted-fence   | the running work's own posted fence write (its value) lands 100 ms after L; stays | work ran at stop with a later value submitted | STOP-6 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver              | what it does |
|---------------------|--------------|
| st6-ok-cancel       | stop cancels the running work, waits at most 2 ms for the cancel's acknowledgement, writes L itself |
| st6-ok-reaper-steps | when work ran at stop's call, a 40-ms reaper writes that work's value, then L 40 ms later; nothing after L |
| st6-ok-refresh      | the word is re-stored every 0.2 ms while work is pending, under a lock that stop takes (the fence) |
| st6-ok-coalesce     | the IRQ thread coalesces over 2 ms; stop revokes a coalesced write still pending |

MISSED: broken drivers whose clause the certifier does not fail (strict
xfail, as test_blind_set.params makes them).  UNSTABLE: broken drivers whose
verdict the certifier gets right in some runs only (xfail, not strict: the
run that misjudges cannot be made to happen on demand).
"""

import pytest

from test_blind_set import ROOT, certify, explain, hostmem, params, verdicts  # noqa: F401 (hostmem: a fixture)

BLINDST6 = ROOT / "_build" / "default" / "drivers" / "blindst6" / "blindst6.cmxs"

BROKEN = {
    "st6-irq-exit-flush": "STOP-6",
    "st6-wb-timer": "STOP-6",
    "st6-release-reset": "STOP-6",
    "st6-release-blip": "STOP-6",
    "st6-posted-fence": "STOP-6",
}

# The certifier's misses for broken drivers: driver -> what it said.
MISSED: dict = {}

# Broken drivers the certifier judges right in some runs only: driver -> what it said.
UNSTABLE = {
    # The driver lands its late write every time work ran at stop
    # (check/st6check.exe: 60 of 60 R scenarios), but when its IRQ thread,
    # not stop, writes L, L stands in the word only ~2 ms before the stale
    # flush (check/README, R1: "0@0.0ms 1@0.8ms 0@2.8ms"), and the
    # certifier's reads of the word can miss those 2 ms:
    # - STOP-6 missed: certify --seeds 1 -j 3 passed it in 1 of 4 runs ("no
    #   violation in 2 run(s) of model.driver, probe.STOP-6.no-late-write";
    #   the overcommitted run found it, the confirming run did not); lone
    #   replays of probe.STOP-6.no-late-write miss it 2 times in 40;
    # - STOP-3 failed besides: "3279 ms after stop (work spinning 279 ms), the
    #   word reads 1, not the last value 2 given to submit (case
    #   probe.STOP-3.running, seed 3)" in a --seeds 3 -j 2 certification, 1 of
    #   15 lone replays: the driver wrote L once no work ran, as STOP-3 asks;
    #   the word left it through the STOP-6 bug.
    # With the probes' reads of the word every 0.5 ms (they were 10 ms apart
    # when the author ran these): probe.STOP-6.no-late-write found it in 19
    # of 20 lone replays and 29 of 30 (the miss never saw L: the reader
    # waits for the OCaml runtime the IRQ thread holds), probe.STOP-3.running
    # flagged nothing in 20.
    "st6-irq-exit-flush": "timing-dependent: L stands ~2 ms before the stale write, and a read of the word "
    "that misses those 2 ms judges nothing (STOP-6 missed in about 1 replay in 25)",
}


CONFORMING = {
    "st6-ok-cancel": {},
    "st6-ok-reaper-steps": {},
    "st6-ok-refresh": {},
    "st6-ok-coalesce": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    data = certify(BLINDST6, driver, tmp_path)
    failed = {i for i, v in verdicts(data).items() if v == "fail"}
    assert failed == {BROKEN[driver]}, explain(data, failed | {BROKEN[driver]})


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    data = certify(BLINDST6, driver, tmp_path)
    mine = verdicts(data)
    expected = {**verdicts(hostmem), **CONFORMING[driver]}
    differ = {i for i in mine if mine[i] != expected.get(i)}
    assert not differ, "verdicts that differ from the expected ones:\n" + explain(data, differ)
