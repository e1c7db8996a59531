"""Drivers about sleep and faults, waits and signals, and counted locks
(TIME-5, SIG-2, LOCK-3), written blind.

drivers/blindw/ (one plugin, blindw.cmxs): hostmem with one function
changed.  A helper wrote them from the document (spec/rig_edge_driver.txt)
and the installed interface alone, before the certifier ran on any, with
the table of what each breaks (and the sentences) at the top of
drivers/blindw/blindw.ml; drivers/blindw/check/ is the author's own check
that each bug is real.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.  Where the certifier misses one, the case is xfail(strict)
with the reason.

| driver                 | what it does | clause |
|------------------------|--------------|--------|
| w-word-first           | sleep asks whether the word moved before whether the device faulted | TIME-5 |
| w-fault-once-cached    | after one sleep raised Fault, later sleeps answer from a cached word and return | TIME-5 |
| w-sleep-plain-wait     | sleep's blocking step is a plain C nap, not bracketed by rig_unblock/rig_block | SIG-2 |
| w-wait-forgets-block   | a C wait helper calls rig_unblock but returns before rig_block on its timeout path | SIG-2 |
| w-entry-stdlib-mutex   | entry holds an uncounted Stdlib Mutex across its OCaml code | LOCK-3 |
| w-prepare-c-lock-hook  | prepare holds a C pthread mutex, uncounted, while it calls an OCaml trace hook | LOCK-3 |
| w-free-stats-mutex     | free holds an uncounted Stdlib Mutex while it updates statistics | LOCK-3 |

Conforming drivers: every clause's verdict must be hostmem's, but where
given.

| driver                   | what it does | verdicts other than hostmem's |
|--------------------------|--------------|-------------------------------|
| w-ok-sleep-at-once       | sleep raises Fault if faulted, else returns at once and lets rig loop | SIG-3 n/a: no sleep blocks, so no wait's blocking step to judge |
| w-ok-sliced-waits        | sleep blocks in waits of at most 2 ms, each inside Rig_edge_primitives.wait | none |
| w-ok-entry-counted-cache | entry reads a lock-free cache, and on a miss takes a counted lock | none |
| w-ok-prepare-thread      | prepare makes the entry on a thread of its own (masked for its life) | none |
| w-ok-free-deferred       | free pushes the region on a lock-free list, released under a counted lock | none |
"""

import pytest

from test_blind_set import ROOT, certify, explain, hostmem, params, verdicts  # noqa: F401 (hostmem: a fixture)

BLINDW = ROOT / "_build" / "default" / "drivers" / "blindw" / "blindw.cmxs"

BROKEN = {
    "w-word-first": "TIME-5",
    "w-fault-once-cached": "TIME-5",
    "w-sleep-plain-wait": "SIG-2",
    "w-wait-forgets-block": "SIG-2",
    "w-entry-stdlib-mutex": "LOCK-3",
    "w-prepare-c-lock-hook": "LOCK-3",
    "w-free-stats-mutex": "LOCK-3",
}

MISSED = {
    # w-prepare-c-lock-hook was missed while the probe re-entered only the
    # prepare of the same function (which finds f's prepare started and
    # never reaches the C lock); it now asks a prepare of another function
    # at each allocation point in turn, which waits on that lock for good:
    # a hang the runner gives to LOCK-3.
    # w-free-stats-mutex was missed too (its free allocates under the Mutex,
    # but the probe's spare regions to free from inside free ran out at
    # earlier allocations); the free after each alloc of the probe's hook
    # now looks for Sys_error as well.
}

CONFORMING = {
    "w-ok-sleep-at-once": {"SIG-3": "n/a"},
    "w-ok-sliced-waits": {},
    "w-ok-entry-counted-cache": {},
    "w-ok-prepare-thread": {},
    "w-ok-free-deferred": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    data = certify(BLINDW, driver, tmp_path)
    failed = {i for i, v in verdicts(data).items() if v == "fail"}
    assert failed == {BROKEN[driver]}, explain(data, failed | {BROKEN[driver]})


# Conforming drivers misjudged in some runs only (xfail, not strict).
# w-ok-sleep-at-once failed STOP-1 once in a CI rehearsal of stop 35 (the
# suite's 8 workers on 2 cores), in rig.hang-bound: the reference rig's
# 300-ms hang bound ran out on a starved run, and the validation layer then
# found rig's stop fault claim ("hang: the word stood at 0 for 300 ms")
# untrue.  A precision fault of the rig-side flow under load.
UNSTABLE_CONFORMING = {
    "w-ok-sleep-at-once": "STOP-1 flagged in rig.hang-bound under the suite's load once",
}


@pytest.mark.parametrize("driver", params(sorted(CONFORMING), {}, UNSTABLE_CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    data = certify(BLINDW, driver, tmp_path)
    mine = verdicts(data)
    expected = {**verdicts(hostmem), **CONFORMING[driver]}
    differ = {i for i in mine if mine[i] != expected.get(i)}
    assert not differ, "verdicts that differ from the expected ones:\n" + explain(data, differ)
