"""Drivers about SIG-6, SIG-7, SIG-9, ASYNC-2, LOCK-5 and LOCK-9, written
blind: a regression set for the probes of those clauses.

drivers/blindsg/ (one plugin, blindsg.cmxs): hostmem's driver wrapped, one
twist each.  A helper wrote them from the document (spec/) and the
installed interface alone; the table, the sequences that show each bug and
the ambiguities the helper met are at the top of drivers/blindsg/blindsg.ml,
and drivers/blindsg/check/ (sgcheck.exe) is the author's own check.

The first certify got 4 of the 7 broken drivers right (all now).  One fix since: the
async cases' watchdog, which ends a run whose flow hung after an injected
exception, says its finding on the record channel with the run's calls and
end, where it printed it to stdout and exited, a crash that failed every
clause of the case (sg-flag-late-handler: ASYNC-2, and LOCK-5, LOCK-9 and
ASYNC-1 with it); the async cases' probes compare locate's answers from a
callback with its answers outside, and ask the word's place again after
each call whose allocations ran them (sg-tls-place-cache's per-thread
cache, torn by a locate at an allocation inside alloc, answered another
region's place later); probe.SIG-7.exit-handlers-shielded runs the exit
handlers a driver registers while its devices open (sg-exit-unshielded's
were never reached).  All 7 are now right; a miss to come is marked
xfail(strict) in MISSED with what the certifier said.

One ambiguity decided against the author: LOCK-4 ("Its functions that may
take a lock and that rig calls without its own check, those of its
capability, its opener's make and its own public functions, must ...
raise Invalid_argument ... while rig_holds () is not 0").  The author read
"that may take a lock" as narrowing the list, so a capability that takes no
lock need not check (sg-unchecked-openers).  The certifier reads the
appositive as naming the functions bound: a capability's functions, make
and public functions all check, whether or not this driver's take a lock
today (a probe cannot see an uncounted C lock), as spec/decisions.md
already says of the opener's make and the capability.  sg-unchecked-openers is
broken here, with LOCK-4.

| driver               | what it does                                              | clause  |
|----------------------|-----------------------------------------------------------|---------|
| sg-split-mask        | make unmasks between two masked halves, to log            | SIG-6   |
| sg-fin-unshielded    | a finaliser logs without rig_shield                       | SIG-7   |
| sg-exit-unshielded   | an at_exit handler waits and logs without rig_shield      | SIG-7   |
| sg-sigmask-direct    | make blocks rig_mask's signals with Thread.sigmask        | SIG-9   |
| sg-flag-late-handler | a busy-flag lock: an allocation between the take and the handler that gives it back | ASYNC-2 |
| sg-locked-signaled   | signaled takes a stats lock                               | LOCK-5  |
| sg-tls-place-cache   | locate's per-thread cache, torn by a callback between key and value | LOCK-9 |
| sg-unchecked-openers | the capability takes no lock and checks nothing           | LOCK-4 (above) |

Conforming: sg-fin-shielded (a shielded finaliser that waits and logs: its
SIG-7 is judged, a pass, where hostmem's is n/a), sg-exit-shielded (the
same of an exit handler),
sg-helper-thread (a monitor thread started by the first open, signals
blocked), sg-flag-lock (the busy-flag lock with its handler in place
before the take).
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDSG = ROOT / "_build" / "default" / "drivers" / "blindsg" / "blindsg.cmxs"

BROKEN = {
    "sg-split-mask": {"SIG-6"},
    "sg-fin-unshielded": {"SIG-7"},
    "sg-exit-unshielded": {"SIG-7"},
    "sg-sigmask-direct": {"SIG-9"},
    "sg-flag-late-handler": {"ASYNC-2"},
    "sg-locked-signaled": {"LOCK-5"},
    "sg-tls-place-cache": {"LOCK-9"},
    "sg-unchecked-openers": {"LOCK-4"},
}

# The certifier's misses: driver -> what it said.
MISSED = {
}

CONFORMING = {
    "sg-fin-shielded": {"SIG-7": "pass"},
    "sg-exit-shielded": {"SIG-7": "pass"},
    "sg-helper-thread": {},
    "sg-flag-lock": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDSG, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDSG, driver, hostmem, CONFORMING[driver], tmp_path)
