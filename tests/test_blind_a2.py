"""Drivers about how a driver takes and gives back its locks, given that an
asynchronous exception can end any OCaml code of it, also a handler of an
earlier one, written blind: a regression set for ASYNC-2's cases
(async.rig.*) and their second exception.

drivers/blinda2/ (one plugin, blinda2.cmxs): hostmem wrapped, one twist per
driver.  A helper wrote them from the document (spec/) and the installed
interface alone; the table, the sentences and the ambiguities met are at the
top of drivers/blinda2/blinda2.ml, and drivers/blinda2/check/ (a2_check.exe)
is the author's own check.

Written after the async cases learnt to bring a second exception where the
first came with a lock of the driver's held (at the call's next allocation,
if the lock is still held then).  First certify: 5 of 6 broken drivers
flagged with exactly ASYNC-2, 7 of 7 conforming clean.

| driver                       | what it does                                                  | clause     |
|------------------------------|---------------------------------------------------------------|------------|
| a2-alloc-log-before-give     | alloc's raise handler notes the failure, then unlocks          | ASYNC-2    |
| a2-free-cleanup-before-give  | free's raise handler calls the driver's cleanup, then unlocks  | ASYNC-2    |
| a2-entry-message-before-give | entry's raise handler builds the message, then unlocks         | ASYNC-2    |
| a2-alloc-finally-stats       | Fun.protect ~finally that updates statistics, then unlocks     | ASYNC-2    |
| a2-alloc-nested-outer-logs   | nested locks: the inner handler right, the outer one logs first | ASYNC-2    |
| a2-alloc-tag-after-take      | take, build a tag, then the handler                            | ASYNC-2    |
| a2-alloc-give-then-log       | unlock and give first, then note the failure                   | conforming |
| a2-entry-inner-log-reraise   | inside Lock.protect, try ... with e -> note; raise e           | conforming |
| a2-journal-lock-c-only       | an uncounted mutex held only around a noalloc blit              | conforming |
| a2-mutex-protect-counted     | rig_hold, Mutex.protect, rig_give                              | conforming |
| a2-alloc-undo-outside-lock   | a half-made region freed after the lock is given back          | conforming |
| a2-alloc-tag-before-take     | the tag built before the take                                  | conforming |
| a2-free-relock-in-handler    | free's raise handler allocates, then takes the lock again      | conforming |
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDA2 = ROOT / "_build" / "default" / "drivers" / "blinda2" / "blinda2.cmxs"

BROKEN = {
    "a2-alloc-log-before-give": {"ASYNC-2"},
    "a2-free-cleanup-before-give": {"ASYNC-2"},
    "a2-entry-message-before-give": {"ASYNC-2"},
    "a2-alloc-finally-stats": {"ASYNC-2"},
    "a2-alloc-nested-outer-logs": {"ASYNC-2"},
    "a2-alloc-tag-after-take": {"ASYNC-2"},
}

# The certifier's misses: driver -> what it said.  The expectation above
# stays; the mark comes off once the certifier catches it.
MISSED = {
    # Its raise handler runs only when hostmem's free raises, which no free
    # rig asks does; what it runs under the lock (the C free, a
    # Hashtbl.remove) allocates nothing, so no asynchronous exception lands
    # there to open that path.
    "a2-free-cleanup-before-give": "ASYNC-2 pass [its raise path needs a free of hostmem's that raises, which no run makes]",
}

CONFORMING = {
    "a2-alloc-give-then-log": {},
    "a2-entry-inner-log-reraise": {},
    "a2-journal-lock-c-only": {},
    "a2-mutex-protect-counted": {},
    "a2-alloc-undo-outside-lock": {},
    "a2-alloc-tag-before-take": {},
    "a2-free-relock-in-handler": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDA2, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDA2, driver, hostmem, CONFORMING[driver], tmp_path)
