"""Drivers about bugs that show in some runs only, and legal behaviour that
a loaded machine stretches, written blind.

drivers/blindiv/ (one plugin, blindiv.cmxs): hostmem with one behaviour
changed each.  A helper wrote them from the document (spec/) and the
installed interface alone, with the table of what each does, the sentences
relied on and the probability reasoning at the top of
drivers/blindiv/blindiv.ml, before the certifier ran on any.

A certifier on a busy machine must (a) keep a violation it saw once, when
the violation is a value (a wrong word value, a lock taken, a wrong answer),
even if a second run does not show it, and (b) never blame a conforming
driver for being slow under load.  The author certified every driver with
RIG_CONFORM_CROWD=always (as many children at once as the certifier may),
the broken ones with --seeds 3.  Here the broken drivers get --seeds 3 and
the certifier's own crowding (beyond -j only while the cores idle): forced
crowding beside the suite's 8 workers starves the suite's timing tests.

Broken drivers: each shows its bug in some calls only (a per-event random
draw of probability p, seeded from the pid, the clock and the thread); the
set of clauses whose verdict is `fail` must be exactly the one given.  With
at least one event per seed that can show the bug, all three seeds miss it
with probability (1-p)^3: 0.001 for p = 0.90, 0.0034 for p = 0.85.

| driver                | what it does (with probability p per event) | p | clause |
|-----------------------|---------------------------------------------|---|--------|
| iv-stop-defer-final   | own (mirror) word; stop leaves the final write to the mirror thread, which backs off 150 ms: after stop returns the word shows the pre-stop value where no work ran | 0.90 / stop | STOP-3 |
| iv-stop-late-mirror   | own (mirror) word; 20 ms after the final value, the mirror writes back the pre-stop value (for 200 ms) | 0.90 / stop | STOP-6 |
| iv-stop-flushes       | stop re-submits and commits the other threads' uncommitted submissions (then the last value), gives them <= 50 ms, then stops | 0.90 / stop | STOP-4 |
| iv-alloc-none-pending | frees go through a reclaimer thread that holds a region 300 ms; alloc of Device answers None while frees are pending | 0.90 / free | MEM-2 |
| iv-signaled-stats     | signaled counts its reads under a counted Prim.Lock | 0.85 / call | LOCK-5 |
| iv-locate-settles     | locate first waits (Prim.wait of a 0-us nap) | 0.85 / call | LOCK-6 |
| iv-peer-teardown      | peer answers false when either device was stopped | 0.85 / call | MEM-4 |
| iv-room-regrow        | room answers RIG_GROW once more after grow answered Grown on the thread | 0.90 / room | QUEUE-2 |
| iv-signaled-stale     | signaled answers the value of its last fresh read (a cache refreshed only when the race is won) | 0.90 / call | TIME-1 (*) |
| iv-entry-cache-race   | a second (or later) entry of f misses the cache and compiles again: new scratch, new handle | 0.90 / call | CODE-2 |

(*) The blind table expects TIME-1: the driver's word (hostmem's) does hold
the last value; signaled misreports it.  The certifier's TIME-1 probes
pass it (6 runs over 3 seeds) and probe.STOP-3.uncommitted fails STOP-3:
"right after stop returned, with no work running, the word reads 1, not the
last value 2 given to submit".  A caller sees the word only through
signaled, so the two readings differ only in which sentence is blamed; the
expectation is left as written; the test marks it a miss (MISSED).

iv-stop-defer-final .. iv-room-regrow were certified first;
iv-signaled-stale and iv-entry-cache-race were added after, with their
expectations written before their own certification.

iv-ok-free-helper was changed after its first certifications: its free
pushed onto an Atomic list with a CAS loop that made a new cons cell on
every retry, then took a counted lock to signal the reclaimer.  The
certifier's probe.locks-counted found "free did not return within 30 s"
(filed LOCK-3, LOCK-9): a callback that frees at each allocation point of
free makes such a loop retry for ever, which LOCK-9 ("A function that takes
no lock may be called from a callback at any point") rules out.  free now
pushes a node made before the loop (a retry allocates nothing) and takes no
lock; the reclaimer polls.

Conforming drivers: every clause's verdict must be hostmem's.

| driver               | what it does |
|----------------------|--------------|
| iv-ok-mirror         | own word, copied from hostmem's by a helper thread (late under load); stop writes the final value when hostmem did, nothing writes after it |
| iv-ok-free-helper    | frees go through a reclaimer thread batching for 20 ms; alloc, entry and grow that find no memory give back the pending regions first |
| iv-ok-prepare-thread | prepare queues f (one CAS) for a worker thread per device; entry takes a queued f over or waits for a running one |
| iv-ok-stop-handshake | stop stops the device, then waits <= 20 ms for its manager thread's acknowledgement |
| iv-ok-topology       | make waits for a helper thread to compute the device's peer row; peer reads it |
| iv-ok-cpu-heavy      | image, entry, alloc, map_peer and grow burn bounded CPU first |
"""

import pytest

from test_blind_set import (  # noqa: F401 (hostmem: a fixture)
    ROOT,
    certify,
    explain,
    hostmem,
    params,
    verdicts,
)

BLINDIV = ROOT / "_build" / "default" / "drivers" / "blindiv" / "blindiv.cmxs"

BROKEN = {
    "iv-stop-defer-final": "STOP-3",
    "iv-stop-late-mirror": "STOP-6",
    "iv-stop-flushes": "STOP-4",
    "iv-alloc-none-pending": "MEM-2",
    "iv-signaled-stats": "LOCK-5",
    "iv-locate-settles": "LOCK-6",
    "iv-peer-teardown": "MEM-4",
    "iv-room-regrow": "QUEUE-2",
    "iv-signaled-stale": "TIME-1",  # the certifier: STOP-3 (see the docstring)
    "iv-entry-cache-race": "CODE-2",
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED = {
    # A black box reads the word only through signaled (the document gives
    # no layout for its bytes): after stop, a stale signaled over a right
    # word and a wrong word under a right signaled look alike.  TIME-1's
    # probe sees only values signaled gives in increasing order, as a
    # cache refreshed now and then gives them.
    "iv-signaled-stale": "STOP-3 fail, TIME-1 pass: the word is seen only through signaled",
}

CONFORMING = {
    "iv-ok-mirror": {},
    "iv-ok-free-helper": {},
    "iv-ok-prepare-thread": {},
    "iv-ok-stop-handshake": {},
    "iv-ok-topology": {},
    "iv-ok-cpu-heavy": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    data = certify(BLINDIV, driver, tmp_path, seeds=3, jobs=2)
    failed = {i for i, v in verdicts(data).items() if v == "fail"}
    want = {BROKEN[driver]}
    assert failed == want, explain(data, failed | want)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    data = certify(BLINDIV, driver, tmp_path, seeds=1, jobs=2)
    mine = verdicts(data)
    expected = {**verdicts(hostmem), **CONFORMING[driver]}
    assert mine.keys() == expected.keys()
    differ = {i for i in mine if mine[i] != expected[i]}
    assert not differ, "verdicts that differ from the expected ones:\n" + explain(data, differ)
