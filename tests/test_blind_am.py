"""Drivers whose sleeps keep the OCaml runtime only while OTHER THREADS use
the driver, written blind: a regression set for SIG-3 ("a wait's blocking
step ... releases the OCaml runtime while it blocks, as a blocking stub
does") in the situations where another thread of the program is inside
the driver at the same time (alloc/free, a queue's room/submit/commit,
grow, image/entry/prepare, map_peer/dma, another device's work).

drivers/blindam/ (one plugin, blindam.cmxs): hostmem wrapped, one twist per
driver.  A helper wrote them from the document (spec/) and the installed
interface alone; the table, the sentences and the ambiguities met are at
the top of drivers/blindam/blindam.ml.  Each broken driver's sleep runs
ONE Prim.wait whose step naps in C without releasing the runtime
(am-held-other-dev-busy: spins in OCaml), for at most min(still_ms, 50) ms,
only under its condition on another thread's calls; otherwise it is
hostmem's sleep.

First certification (--seeds 1 -j 2):
- am-held-submitting-same-dev, am-held-recent-queue, am-held-other-dev-busy:
  SIG-3 fail and nothing else (probe.SIG-3.busy-wait-releases-runtime: "the
  sleeping thread held the OCaml runtime inside its waits ... the wait's
  blocking step keeps the OCaml runtime").
- am-held-alloc-inflight: LOCK-3 and LOCK-9 fail ("alloc did not return
  within 30 s", probe.locks-counted), SIG-3 pass.  The author found the
  driver wrong (LOCK-9, "may be called from a callback at any point"): its
  in-flight table was a CAS retry loop over immutable lists whose retries
  allocate, and the probe's nested alloc at each retry's allocation made
  the outer CAS fail for ever.  The tables became fixed arrays of Atomic
  slots (one CAS each, bounded loops) for every driver, before any other
  was certified; certified again: 0 fail, SIG-3 pass (missed).
- am-held-grow-pending, am-held-slow-code, am-held-nth-map: 0 fail, SIG-3
  pass (missed: the SIG-3 probes have no other thread inside grow or with
  a growth pending, no image/entry/prepare in flight for more than 4 ms,
  no second map_peer/dma of another thread beside the sleep).
- the six conforming: 0 fail, hostmem's verdicts (68 pass, 6 n/a).
  am-garbage-calls was then changed (its submit no longer allocates, for
  CODE-2's "so that the driver's submit allocates nothing"; ambiguity 9)
  and certified again: 0 fail.

Since (stop 39, no driver changed): the busy-wait probe's companions hand
the runtime on at each allocation inside their driver calls, each judged
sleep of three starts with them held inside their calls (the pump, the
churn and a new feeder of the judged device's own queue), and a measure
that met no condition counts once in the vote: alloc-inflight is caught (8
of 8 seeds with `run`), grow-pending in about 7 of 8 (UNSTABLE).  slow-code and nth-map stay
missed: no companion loads images or maps regions.

| driver                      | what its sleep / calls do                                              | clause     |
|-----------------------------|------------------------------------------------------------------------|------------|
| am-held-alloc-inflight      | step holds the runtime while another thread's alloc or free is in flight | SIG-3    |
| am-held-submitting-same-dev | same, while another thread is between RIG_ROOM and its commit, same device | SIG-3  |
| am-held-recent-queue        | same, while another thread's room/submit/commit is in flight or < 300 ms ago | SIG-3 |
| am-held-grow-pending        | same, while another thread is in grow or has a RIG_GROW pending, same device | SIG-3 |
| am-held-slow-code           | same, while another thread's image/entry/prepare is in flight > 4 ms    | SIG-3      |
| am-held-nth-map             | same, while another thread's 2nd+ map_peer/dma is in flight or < 500 ms ago | SIG-3  |
| am-held-other-dev-busy      | step spins in OCaml while another device has work another thread committed | SIG-3   |
| am-garbage-calls            | alloc, free, map_peer, grow, room, commit allocate ~80 KB of OCaml memory | conforming |
| am-counted-lock             | a counted driver lock across alloc and in sleep's setup (given back before the wait) | conforming |
| am-short-naps               | sleep polls with releasing naps of at most 1 ms                        | conforming |
| am-poll-when-others         | under any broken driver's condition, polls with releasing 1 ms naps    | conforming |
| am-yield-everywhere         | Thread.yield around every counted call but sleep, and room/submit/commit | conforming |
| am-waits-everywhere         | a releasing 1 ms wait at the start of alloc, map_peer, map_host, dma, image, entry, grow | conforming |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDAM = ROOT / "_build" / "default" / "drivers" / "blindam" / "blindam.cmxs"

BROKEN = {
    "am-held-alloc-inflight": {"SIG-3"},
    "am-held-submitting-same-dev": {"SIG-3"},
    "am-held-recent-queue": {"SIG-3"},
    "am-held-grow-pending": {"SIG-3"},
    "am-held-slow-code": {"SIG-3"},
    "am-held-nth-map": {"SIG-3"},
    "am-held-other-dev-busy": {"SIG-3"},
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED: dict = {
    "am-held-slow-code": "SIG-3 pass: no SIG-3 probe sleeps while another thread's image/entry/prepare has been in flight for more than 4 ms",
    "am-held-nth-map": "SIG-3 pass: no SIG-3 probe sleeps beside another thread's second map_peer or dma",
}

# The certifier's misjudged conforming drivers: driver -> what it said.
MISJUDGED: dict = {}

# Hostmem's verdicts for all six (none allocates in a finaliser, none
# misses a clause hostmem passes).
CONFORMING = {
    "am-garbage-calls": {},
    "am-counted-lock": {},
    "am-short-naps": {},
    "am-poll-when-others": {},
    "am-yield-everywhere": {},
    "am-waits-everywhere": {},
}


# Caught in some runs only: driver -> how often.
UNSTABLE = {
    "am-held-grow-pending": "caught in about 7 of 8 seeds: its condition is met only when a judged "
    "sleep starts while the feeder's growth is pending or ran in the last ms",
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDAM, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", params(sorted(CONFORMING), MISJUDGED))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDAM, driver, hostmem, CONFORMING[driver], tmp_path)
