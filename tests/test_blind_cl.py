"""Drivers whose locate, peer or signaled take a lock in their C code, written
blind: a regression set for LOCK-5's watch of a plugin's C locks
(harness/support/c_locks.ml, probe.locate-peer-quiet).

drivers/blindcl/ (one plugin, blindcl.cmxs): hostmem's driver over a copy of
its C stubs (prefix cl_), one twist per driver, in C.  A helper wrote them
from the document (spec/) and the installed interface alone; the table, the
sentences and the ambiguities met are at the top of drivers/blindcl/blindcl.ml,
and drivers/blindcl/check/ (cl_check.exe) is the author's own check.

Before the watch, a C lock taken and given within a few instructions showed
nowhere: it is never contended in a run (blind set fw's two misses).  The
probe now counts the lock calls (pthread mutexes, rwlocks, spin locks, C11
mtx_*, semaphores) the plugin's own code makes while locate, peer or
signaled runs on the probing thread, and fails LOCK-5 when each of three
calls made one.

| driver                | what it does (in C)                                             | clause     |
|-----------------------|-----------------------------------------------------------------|------------|
| cl-locate-mutex       | locate reads the region table under the device's mutex          | LOCK-5     |
| cl-locate-spinlock    | locate reads a size table under a spin lock                     | LOCK-5     |
| cl-locate-slowpath    | locate's cache is never filled: its mutex "slow path" every call | LOCK-5     |
| cl-peer-trylock       | peer reads a registry under pthread_mutex_trylock               | LOCK-5     |
| cl-peer-c11-mtx       | peer reads a registry under a C11 mtx_lock                      | LOCK-5     |
| cl-signaled-rwlock    | signaled reads the word under an rwlock's read lock             | LOCK-5     |
| cl-signaled-barrier   | signaled takes and gives the device mutex, nothing between      | LOCK-5     |
| cl-ok-atomics         | locate and peer read C11 atomics alloc and free keep            | conforming |
| cl-ok-seqlock         | locate and peer read under a seqlock (bounded retries, no lock) | conforming |
| cl-ok-helper-locks    | a helper thread takes mutex, spin and rwlock every 0.5 ms, also during locate | conforming |
| cl-ok-finaliser-mutex | make, free and a shielded finaliser take the registry's mutex   | conforming |
| cl-ok-snapshot        | make publishes an immutable snapshot; locate and peer read it   | conforming |
| cl-ok-locate-ring     | locate pushes its handle on a wait-free ring commit drains      | conforming |
| cl-ok-signaled-fence  | signaled is a relaxed load and an acquire fence                 | conforming |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDCL = ROOT / "_build" / "default" / "drivers" / "blindcl" / "blindcl.cmxs"

BROKEN = {
    "cl-locate-mutex": {"LOCK-5"},
    "cl-locate-spinlock": {"LOCK-5"},
    "cl-locate-slowpath": {"LOCK-5"},
    "cl-peer-trylock": {"LOCK-5"},
    "cl-peer-c11-mtx": {"LOCK-5"},
    "cl-signaled-rwlock": {"LOCK-5"},
    "cl-signaled-barrier": {"LOCK-5"},
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED: dict = {}

# cl-ok-finaliser-mutex's finaliser (shielded) gives SIG-7's finaliser case
# something to judge, where hostmem has no finaliser (n/a).
CONFORMING = {
    "cl-ok-atomics": {},
    "cl-ok-seqlock": {},
    "cl-ok-helper-locks": {},
    "cl-ok-finaliser-mutex": {"SIG-7": "pass"},
    "cl-ok-snapshot": {},
    "cl-ok-locate-ring": {},
    "cl-ok-signaled-fence": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDCL, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDCL, driver, hostmem, CONFORMING[driver], tmp_path)
