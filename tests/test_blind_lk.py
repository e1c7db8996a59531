"""Drivers about LOCK-5, LOCK-6, LOCK-8, LOCK-9, SIG-2, SIG-6, SIG-7, SIG-8,
SIG-9 and ASYNC-2, written blind: a regression set for the lock and signal
probes.

drivers/blindlk/ (one plugin, blindlk.cmxs): hostmem's device (its C stubs,
hm_*, and its image format) behind one parameterised driver, with one
behaviour changed per driver, and a C "ticker" thread of the author's own
(blindlk_stubs.c).  A helper wrote them from the document (spec/) and the
installed interface alone; the table and the ambiguities met are at the top
of drivers/blindlk/blindlk.ml, and drivers/blindlk/check/ (lkcheck.exe) is
the author's own check (16 bugs shown, 4 clean).

The first certify flagged 9 of the 16 broken drivers with exactly their
clause, one with another clause, and missed 6; the 4 conforming drivers
were clean.  Now 14 of 16 are exact (two strict misses, MISSED below):
- probe.locate-peer-quiet asks locate and peer right after the opens and
  after the device's work faulted, and a call in which the thread slept
  150 ms is LOCK-6 (lk-peer-waits-link, lk-locate-faulted); a Fault of
  locate from a callback is no longer LOCK-9's (lk-locate-faulted had
  failed LOCK-9 only);
- locate's own allocations run the async cases' probes (lk-locate-cache);
- probe.LOCK-8.one-order calls grow (lk-alloc-grow-order);
- probe.SIG-2.handler-in-waits sends SIGUSR1 halfway through a sleep of
  400 ms: its handler must run inside a wait of that sleep
  (lk-sleep-retry-masked).

| driver                 | what it does                                                      | clause  |
|------------------------|-------------------------------------------------------------------|---------|
| lk-signaled-locks      | signaled takes a counted stats lock                               | LOCK-5  |
| lk-locate-faulted      | locate raises Fault once sleep saw the device fault               | LOCK-6  |
| lk-peer-waits-link     | peer waits (Thread.delay) for the link probes the opens started   | LOCK-6  |
| lk-entry-unload-order  | entry takes image then device lock; unload device then image      | LOCK-8  |
| lk-alloc-grow-order    | alloc takes device then budget lock; grow budget then device      | LOCK-8  |
| lk-locate-cache        | locate's one-entry cache, its two fields written around an alloc  | LOCK-9  |
| lk-sleep-retry-masked  | only sleep's first slice is a wait; later slices block masked     | SIG-2   |
| lk-sleep-wide-wait     | the whole of sleep, OCaml code included, inside one wait          | SIG-2   |
| lk-make-half-masked    | make builds the device record between two masked parts           | SIG-6   |
| lk-openers-unmasked    | openers takes its table lock with no mask                         | SIG-6   |
| lk-fin-unshielded      | a finaliser per device without rig_shield                         | SIG-7   |
| lk-exit-unshielded     | an exit handler without rig_shield                                | SIG-7   |
| lk-ticker-clean-mask   | the C ticker thread empties its signal mask                       | SIG-8   |
| lk-make-sigmask        | make blocks rig's set with Thread.sigmask                         | SIG-9   |
| lk-entry-cleanup-first | on a raise, entry records the failure before it gives the mutex   | ASYNC-2 |
| lk-unload-take-early   | unload allocates between its take and the handler                 | ASYNC-2 |

Conforming: lk-ok-extra-lock (a second counted lock, one order),
lk-ok-helper (a spawned helper and a C ticker started under make's mask),
lk-ok-sliced (sleep in 20-ms slices, each a wait of its own),
lk-ok-shielded (a finaliser and an exit handler under rig_shield).
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDLK = ROOT / "_build" / "default" / "drivers" / "blindlk" / "blindlk.cmxs"

BROKEN = {
    "lk-signaled-locks": {"LOCK-5"},
    "lk-locate-faulted": {"LOCK-6"},
    "lk-peer-waits-link": {"LOCK-6"},
    "lk-entry-unload-order": {"LOCK-8"},
    "lk-alloc-grow-order": {"LOCK-8"},
    "lk-locate-cache": {"LOCK-9"},
    "lk-sleep-retry-masked": {"SIG-2"},
    "lk-sleep-wide-wait": {"SIG-2"},
    "lk-make-half-masked": {"SIG-6"},
    "lk-openers-unmasked": {"SIG-6"},
    "lk-fin-unshielded": {"SIG-7"},
    "lk-exit-unshielded": {"SIG-7"},
    "lk-ticker-clean-mask": {"SIG-8"},
    "lk-make-sigmask": {"SIG-9"},
    "lk-entry-cleanup-first": {"ASYNC-2"},
    "lk-unload-take-early": {"ASYNC-2"},
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED = {
    # Its sleep's OCaml code (the fault checks, the raise) runs inside one
    # wait, with rig's signals unblocked.  The probes judge a wait by its
    # rig_unblock and rig_block around the step it is given; what that
    # step runs is the driver's (a step that polls in OCaml is a blocking
    # step as far as rig can tell), so no run shows a violation.
    "lk-sleep-wide-wait": "SIG-2 pass",
}
# lk-entry-cleanup-first was missed while the async cases ended a call with
# one exception: its handler allocates (records the failure) before it gives
# the mutex back, and only a second exception, landing there, leaves the lock
# taken.  An exception that comes with a lock held now brings a second at the
# call's next allocation while the lock is still held.

# Broken drivers the certifier judges right in some runs only (xfail, not
# strict).  lk-peer-waits-link passed LOCK-6 once under the suite's load
# (the rehearsal of 67e1c6c): its peer waits only while the link probes its
# opens started still run (250 ms), and on a loaded machine less than
# probe.locate-peer-quiet's 150 ms was left when it asked.  The probe now
# times again, on fresh opens, any call that slept 50 ms; caught in 3 of 3
# whole certifications beside 5 others on 2 cores since.
UNSTABLE: dict = {}

CONFORMING = {
    "lk-ok-extra-lock": {},
    "lk-ok-helper": {},
    "lk-ok-sliced": {},
    "lk-ok-shielded": {"SIG-7": "pass"},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDLK, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDLK, driver, hostmem, CONFORMING[driver], tmp_path)
