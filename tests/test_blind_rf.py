"""Drivers under resources the system refuses (a thread, an allocation, an
open), written blind: a regression set for what the certifier makes of a
driver's own refusals, after the last CI failed c7n-ok-two-buffers (a
helper thread the loaded machine refused) with CODE-7.

drivers/blindrf/ (one plugin, blindrf.cmxs): hostmem's device with parts of
its OCaml side changed per driver; each refusal is simulated by a counter
("every k-th thread start is refused"), never by exhausting the machine.
A helper wrote them from the document (spec/) and the installed interface
alone; the table and the ambiguities it met are at the top of
drivers/blindrf/blindrf.ml.  drivers/blindrf/check/ (rfcheck.exe) is the
author's own check (65 of 65), which drives no asynchronous exception.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.  Three the author meant as conforming are not: each marks
f (or reserves its scratch) and then allocates before anything would undo
it, so an asynchronous exception there, which the document lets end any
OCaml code of the driver, leaves a prepare that raised having changed
something (CODE-7; the replay line of each reproduces it 3/3).

| driver              | what it does                                              | clauses |
|---------------------|-----------------------------------------------------------|---------|
| rf-stuck-mark       | a refused helper leaves f marked started: entry waits for good | CODE-6, and CODE-7 (marks, then allocates) |
| rf-leaky-raise      | a refused helper's prepare raises with f's scratch reserved | CODE-7 |
| rf-nomem-leak       | entry keeps the scratch it reserved when its next allocation is refused | CODE-3 |
| rf-claim-first      | make claims the hardware before its check of rig_holds (): refused in a lock, the claim stays | LOCK-4 |
| rf-deferred-reap    | a refused reaper files the handles under the hardware's name: freed on the next device of that name | STOP-8 |
| rf-ok-sync-fallback | marks f, then allocates the helper's closure | CODE-7 (not meant) |
| rf-ok-raise-clean   | reserves f's scratch, then allocates its mark | CODE-7 (not meant) |
| rf-ok-burst-worker  | marks f, then queues its job (an allocation) | CODE-7 (not meant) |

Conforming drivers: every clause's verdict must be hostmem's, but for the
clauses given, which no run judged: every open of the probes that judge
them was a refused one (each says "not judged: opening ... raised").

| driver                | under refusal |
|-----------------------|---------------|
| rf-ok-busy-open       | every 2nd make raises Failure "device busy" |
| rf-ok-retry-open      | a refused open is retried after a 2-ms wait |
| rf-ok-give-up         | the helper first, the mark after: a refused start leaves nothing |
| rf-ok-exn-safe-helper | the helper's own refusal is cleaned up (Fun.protect), waking entry |
| rf-ok-nomem-retry     | entry answers No_memory to every 2nd ask, made nothing, and makes f at the next |
| rf-ok-alloc-none      | every 3rd alloc of Mapped memory answers None |
| rf-ok-reaper-unload   | a refused reaper thread: unload frees the entries itself |
| rf-ok-janitor-stop    | a refused janitor: stop frees its staging inline |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDRF = ROOT / "_build" / "default" / "drivers" / "blindrf" / "blindrf.cmxs"

BROKEN = {
    "rf-stuck-mark": {"CODE-6", "CODE-7"},
    "rf-leaky-raise": {"CODE-7"},
    "rf-nomem-leak": {"CODE-3"},
    "rf-claim-first": {"LOCK-4"},
    "rf-deferred-reap": {"STOP-8"},
    "rf-ok-sync-fallback": {"CODE-7"},
    "rf-ok-raise-clean": {"CODE-7"},
    "rf-ok-burst-worker": {"CODE-7"},
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED: dict = {}

# Broken drivers the certifier judges right in some runs only: driver ->
# what it said (xfail, not strict).  Since probe.CODE-7.prepare-raises asks
# three prepares after an ended one (a clean prepare may make nothing: its
# helper thread refused, rf-ok-give-up), a later prepare whose worker start
# is refused withdraws the stale mark rf-ok-burst-worker left, and the next
# one makes f: caught at seeds 1-4 alone, missed once under the whole
# suite's load (a CI rehearsal).
UNSTABLE = {
    # Missed once under the suite's load too (the rehearsal of 26f2123: "no
    # violation in 3 run(s) of probe.CODE-7.prepare-idle, prepare-raises,
    # prepare-started"); caught 3 of 3 beside 5 certifications on 2 cores.
    "rf-ok-sync-fallback": "CODE-7 pass under the suite's load once",
    "rf-ok-burst-worker": "CODE-7 pass under load once: no violation in 3 run(s) of probe.CODE-7.prepare-idle, prepare-raises, prepare-started",
    # Its CODE-6 (an entry that waits for good on a stale mark) is caught
    # every time; its CODE-7 was missed once under the suite's load (the
    # rehearsal of b1bade8), with no probe of CODE-7 changed since it was
    # caught in every run.
    "rf-stuck-mark": "CODE-7 pass under load once: no violation in 3 run(s) of probe.CODE-7.prepare-idle, prepare-raises, prepare-started",
}
# rf-deferred-reap was missed until probe.STOP-8.old-frees followed each
# unload of the old device by an unload on the new one of an image with no
# entry: its deferred frees, left when its reaper is refused, reach the
# new device only at the new device's next unload, and its old device's
# own next unload had always taken them first.

# rf-ok-busy-open refuses every 2nd open: the cases whose second open is
# the one they need judge nothing.  probe.STOP-8.old-frees opens a second
# device for a mapping before the new device of the same name, takes its
# refusal as "no mapping", and gets its new device at the third open.
UNJUDGED_OPENS = {"MEM-4": "unchecked", "STOP-2": "unchecked"}

CONFORMING = {
    "rf-ok-busy-open": UNJUDGED_OPENS,
    "rf-ok-retry-open": {},
    "rf-ok-give-up": {},
    "rf-ok-exn-safe-helper": {},
    "rf-ok-nomem-retry": {},
    "rf-ok-alloc-none": {},
    "rf-ok-reaper-unload": {},
    "rf-ok-janitor-stop": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDRF, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDRF, driver, hostmem, CONFORMING[driver], tmp_path)
