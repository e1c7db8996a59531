"""Drivers about free giving memory back, signaled and the word, and what
locate, peer and signaled may do, written blind: a regression set for
probe.MEM-2.given-back, probe.TIME-1.signaled-reads-word and
probe.locate-peer-quiet.

drivers/blindfw/ (one plugin, blindfw.cmxs): hostmem's device (a copy of its
C stubs with the prefix fw_ and knobs, blindfw_stubs.c) and hostmem's OCaml
driver, one behaviour changed per driver.  A helper wrote them from the
document (spec/) and the installed interface alone; the table and the
ambiguities met are at the top of drivers/blindfw/blindfw.ml, and
drivers/blindfw/check/ (fwcheck.exe) is the author's own check (11 bugs
shown, 6 clean).

The first certify (of bbe3b53) flagged 3 of the 11 broken drivers with
exactly their clause, 2 with other clauses (fw-free-deferred: CODE-2 and
CODE-7, which measure free memory right after frees; fw-signaled-raises-
stopped: LOCK-8, whose probe let signaled's Fault after stop escape), and
missed 6; the 6 conforming drivers were clean.  Now 9 of 11 are exact:
- probe.MEM-2.given-back asks, right after all Device memory was freed,
  host memory taken and freed three times, then one region of a size the
  first take never asked, then the same allocs again (fw-free-leaks-mapped,
  fw-free-size-bins, fw-free-deferred);
- probe.TIME-1 reads signaled as fast as it answers while 1024 works write
  values that change both halves of the word, in 64 rounds (fw-signaled-
  torn), and, after stop, a signaled that raises at each call for 2 s is
  TIME-1 (fw-signaled-raises-stopped); LOCK-8's probe drops signaled's
  faults after stop, as rig does;
- probe.locate-peer-quiet asks again with stdout and stderr on full pipes
  (fw-locate-logs: its locate never returns, LOCK-6).

| driver                      | what it does                                                   | clause |
|-----------------------------|----------------------------------------------------------------|--------|
| fw-free-leaks-mapped        | Mapped memory draws on the Device budget; free gives back only Device memory's share | MEM-2 |
| fw-free-size-bins           | freed blocks wait on per-size lists only that size reuses     | MEM-2  |
| fw-free-deferred            | free hands blocks to a thread that gives them back 20 ms later | MEM-2 |
| fw-signaled-completions     | signaled answers the driver's count of completions             | TIME-1 |
| fw-signaled-last-submitted  | signaled answers the last value given to submit                | TIME-1 |
| fw-signaled-torn            | the word is written in two halves; signaled reads them apart  | TIME-1 |
| fw-signaled-raises-stopped  | signaled raises Fault once the device is stopped               | TIME-1 |
| fw-signaled-checks-holds    | signaled starts with the rig_holds check                       | LOCK-5 |
| fw-locate-validates-locked  | locate checks the region under the device's mutex              | LOCK-5 |
| fw-peer-trylock             | peer try-locks the device registry; false while it is held     | LOCK-5 |
| fw-locate-logs              | locate writes a line to stderr and flushes it                  | LOCK-6 |

Conforming: fw-ok-pool-classes (power-of-two classes up to 64 KiB, freed
blocks reused, released before any None), fw-ok-free-deferred-drain (the
same deferred free, but alloc waits for it before answering None),
fw-ok-word-mapping (the word on a page of its own, unmapped at rig's free
of it), fw-ok-signaled-cached-ptr (signaled reads the word through an
address saved at open), fw-ok-signaled-seqlock (the word written in halves
under a sequence counter that signaled retries on), fw-ok-locate-stats
(locate counts in an Atomic, peer compares a field set at open).
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDFW = ROOT / "_build" / "default" / "drivers" / "blindfw" / "blindfw.cmxs"

BROKEN = {
    "fw-free-leaks-mapped": {"MEM-2"},
    "fw-free-size-bins": {"MEM-2"},
    "fw-free-deferred": {"MEM-2"},
    "fw-signaled-completions": {"TIME-1"},
    "fw-signaled-last-submitted": {"TIME-1"},
    "fw-signaled-torn": {"TIME-1"},
    "fw-signaled-raises-stopped": {"TIME-1"},
    "fw-signaled-checks-holds": {"LOCK-5"},
    "fw-locate-validates-locked": {"LOCK-5"},
    "fw-peer-trylock": {"LOCK-5"},
    "fw-locate-logs": {"LOCK-6"},
}

# The certifier's misses: driver -> what it said.  fw-locate-validates-locked
# and fw-peer-trylock were missed until the probes watched the lock calls of
# a plugin's C code (C_locks): their C mutex is never contended in a run.
MISSED: dict = {}

# Verdicts right in some runs only.
UNSTABLE = {
    # Its two halves are written 5 us apart, busy: a read shows half a write
    # only while this device's thread is between them, on another core or
    # preempted there.  Found in 3 of 3 certifications on an idle machine;
    # missed once of 1 under two CPU hogs.  The fake's word-halves writes
    # its halves 500 us apart so that the self-test finds it under the
    # suite's load (at 50 us it was missed once there).
    "fw-signaled-torn": "a torn read shows only while the device's writer is between its halves",
}

CONFORMING = {
    "fw-ok-pool-classes": {},
    "fw-ok-free-deferred-drain": {},
    "fw-ok-word-mapping": {},
    "fw-ok-signaled-cached-ptr": {},
    "fw-ok-signaled-seqlock": {},
    "fw-ok-locate-stats": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED, UNSTABLE))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDFW, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDFW, driver, hostmem, CONFORMING[driver], tmp_path)
