"""Drivers about a wait's blocking step and the OCaml runtime (SIG-3), a
fourth set written blind, after the probe's held time stopped counting the
counter's wait for a CPU twice (a runtime kept for half of each sleep had
been missed on a loaded machine): a regression set for
probe.SIG-3.wait-releases-runtime, about a runtime kept for part of a wait.

drivers/blinds3d/ (one plugin, blinds3d.cmxs): hostmem's driver (its OCaml
side copied, over its C device) with sleep changed per driver.  A helper
wrote them from the document (spec/) and the installed interface alone; the
table, written before any run, the ambiguities it met, and what the
certifier said are at the top of drivers/blinds3d/blinds3d.ml.  All 13 got
the SIG-3 verdict their author expected, on the first certification, on a
machine whose load average was 20-36 (a CI rehearsal beside it).

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver             | its sleep | clause |
|--------------------|-----------|--------|
| s3d-kept-first     | polls in C keeping the runtime for the first 40% of still_ms, then a released wait | SIG-3 |
| s3d-kept-tail      | a released wait, then keeps the runtime for the last 500 ms (all of a shorter sleep) | SIG-3 |
| s3d-kept-middle    | released, kept for the middle half of still_ms, released | SIG-3 |
| s3d-kept-alternate | every other call keeps the runtime for the whole wait | SIG-3 |
| s3d-slice-reentry  | a C condition wait in 10-ms slices whose retries forget the blocking section | SIG-3 |
| s3d-spin-first     | reads the word in C, spins on it keeping the runtime for half of still_ms | SIG-3 |
| s3d-retake-poll    | 10 ms released, then 10 ms asleep with the runtime taken back to poll, in turn | SIG-3 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver               | its sleep |
|----------------------|-----------|
| s3d-ok-helper-thread | hostmem's; an OCaml thread of the driver computes, allocates and yields from open to stop |
| s3d-ok-c-burner      | hostmem's; a C thread of the driver burns a CPU while a device is open |
| s3d-ok-short-waits   | released waits of 2 ms at most, the runtime taken back between them |
| s3d-ok-timer-slack   | a released wait with a large timer slack (it oversleeps its own timeout, within still_ms) |
| s3d-ok-early-return  | a released wait; 2 calls in 3 return after 1-4 ms |
| s3d-ok-released-spin | spins on the clock 1 ms at a time with the runtime released |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDS3D = ROOT / "_build" / "default" / "drivers" / "blinds3d" / "blinds3d.cmxs"

BROKEN = {
    "s3d-kept-first": "SIG-3",
    "s3d-kept-tail": "SIG-3",
    "s3d-kept-middle": "SIG-3",
    "s3d-kept-alternate": "SIG-3",
    "s3d-slice-reentry": "SIG-3",
    "s3d-spin-first": "SIG-3",
    "s3d-retake-poll": "SIG-3",
}

# The certifier's misses: driver -> what it said (xfail, strict).
MISSED: dict = {}

CONFORMING = {
    "s3d-ok-helper-thread": {},
    "s3d-ok-c-burner": {},
    "s3d-ok-short-waits": {},
    "s3d-ok-timer-slack": {},
    "s3d-ok-early-return": {},
    "s3d-ok-released-spin": {},
}

# Conforming drivers the certifier judges right in some runs only (xfail,
# not strict).  s3d-ok-helper-thread failed TIME-4 in 1 of its author's 3
# certifications, beside a CI rehearsal (load average 20-36 on 2 cores):
# "sleep ~still_ms:562 returned after 988 ms" (probe.TIME-4.bounded-sleep);
# replays and two more certifications passed.  Its sleep's end needs the
# runtime back from an OCaml thread that computes; on that machine the
# thread holding it can be off a CPU for hundreds of ms.  The certifier
# reruns what its own crowding may have caused, not another process's load.
UNSTABLE = {
    "s3d-ok-helper-thread": "TIME-4 failed once beside a CI rehearsal (load average 20-36 on 2 cores)",
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDS3D, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", params(sorted(CONFORMING), {}, UNSTABLE))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDS3D, driver, hostmem, CONFORMING[driver], tmp_path)
