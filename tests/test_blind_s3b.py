"""Drivers about a wait's blocking step and the OCaml runtime (SIG-3), a
second set written blind, after the probe learnt to vote: a regression set
for probe.SIG-3.wait-releases-runtime.

drivers/blinds3b/ (one plugin, blinds3b.cmxs): hostmem's device, sleep and
what sleep uses changed per driver.  A helper wrote them from the document
(spec/) and the installed interface alone; the table, how each bug shows
and the ambiguities it met are at the top of drivers/blinds3b/blinds3b.ml.
drivers/blinds3b/check/ (s3bcheck.exe) is the author's own check that each
bug is real (10 of 10: another thread's longest pause while sleeps block).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.  The first certification missed three (s3b-every3rd,
s3b-shortheld, s3b-halfrel): the probe judged the rate of the other
thread's turns over sleeps of still_ms 200 only.  It then also judged the
longest pause within one sleep, over still_ms 100, 15, 40, 20 and 60; it
now judges the time that thread slept waiting for the runtime, from the
kernel's per-thread figures.

| driver          | what its sleep's blocking step does | clause |
|-----------------|-------------------------------------|--------|
| s3b-every3rd    | every 3rd call keeps the runtime (a C poll of the word with nanosleeps) | SIG-3 |
| s3b-shortheld   | still_ms < 25 keeps the runtime (200-us naps in C) | SIG-3 |
| s3b-retake      | releases it for 3 ms, then takes it back and blocks on a condition | SIG-3 |
| s3b-slices      | 3-ms C naps with the runtime held, the word looked at between | SIG-3 |
| s3b-halfrel     | released for the first half of still_ms, 1-ms naps held for the second | SIG-3 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver           | its sleep |
|------------------|-----------|
| s3b-ok-short     | blocks 2 ms at most, then returns early |
| s3b-ok-burner    | hostmem's, while a C thread of the driver burns a core |
| s3b-ok-tiny      | 200-us naps, each in its own released section |
| s3b-ok-eventfd   | poll(2) on an eventfd, runtime released, 5-ms slices |
| s3b-ok-sometimes | every 2nd call returns at once, the others are hostmem's |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDS3B = ROOT / "_build" / "default" / "drivers" / "blinds3b" / "blinds3b.cmxs"

BROKEN = {
    "s3b-every3rd": "SIG-3",
    "s3b-shortheld": "SIG-3",
    "s3b-retake": "SIG-3",
    "s3b-slices": "SIG-3",
    "s3b-halfrel": "SIG-3",
}

# The certifier's misses: driver -> what it said (xfail, strict).
MISSED: dict = {}

# Caught on a quiet machine, not on a loaded one (xfail, not strict).
# s3b-shortheld was here while the probe judged turns and pauses (0 of 5
# with two busy processes per core): a loaded machine deschedules any
# thread for some 16 ms now and then, as long as its 15- and 20-ms kept
# calls.  Judged on the time the other thread slept waiting for the
# runtime (schedstat), it was caught 5 of 5 under a dozen busy processes.
# s3b-every3rd (2 of its 6 sleeps keep the runtime) was missed once, in
# the CI rehearsal of a9e868d (make test's 8 workers), and s3b-halfrel and
# s3b-shortheld in one of b05fc56: the probe took the counter's wait for a
# CPU after each nap off the held time twice.  Fixed, all three are caught
# beside 5 certifications on 2 cores.
# s3b-shortheld (its runtime kept only in the 15-20 ms sleeps) was missed
# twice under load while the other thread's waits judged SIG-3 (a load test
# of stop 34, a rehearsal of stop 35), and marked unstable; since stop 36
# the sleeping thread's own hold inside its waits judges, which load does
# not shorten, and the mark is off.
UNSTABLE: dict = {}

CONFORMING = {
    "s3b-ok-short": {},
    "s3b-ok-burner": {},
    "s3b-ok-tiny": {},
    "s3b-ok-eventfd": {},
    "s3b-ok-sometimes": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDS3B, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDS3B, driver, hostmem, CONFORMING[driver], tmp_path)
