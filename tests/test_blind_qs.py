"""Drivers about QUEUE-1, QUEUE-3, TIME-6, STOP-4 and STOP-5, written blind:
a regression set for the probes of those clauses.

drivers/blindqs/ (one plugin, blindqs.cmxs): hostmem's device behind a
queue layer of the author's own (blindqs_stubs.c), one twist each.  A
helper wrote them from the document (spec/) and the installed interface
alone; the table, the sequences that show each bug and the ambiguities the
helper met are at the top of drivers/blindqs/blindqs.ml, and
drivers/blindqs/check/ (qscheck.exe) is the author's own check (8 bugs
shown, 4 clean).

The first certify got 2 of the 8 broken drivers right and all 4
conforming ones.  Since then (all 7 broken right; qs-short-drops is
judged as conforming, EQUIVALENT below):
- QUEUE-1: probe.QUEUE-1.grow-changes-nothing also asks a 1-part room
  while rooms of other threads, not yet submitted, hold the queues
  (qs-grow-publishes publishes the unreserved rest of its last chunk);
- TIME-6: a submission that submit or commit refused beside a sleep is
  evidence, not a failed set-up: in sleep-during-submit when a new
  device's submissions alone then succeed, in submit-beside-sleep while
  its 1.5-s sleep still waits (qs-commit-busy-in-sleep);
- STOP-4: probe.STOP-4.drop-encoded also encodes on stop's own thread,
  right before it (qs-stop-flushes-open flushes the stopping thread's
  open buffer);
- STOP-5: probe.STOP-5.keeps-word reads the word again 300-500 ms after
  stop and frees an idle region rig made once the word settled
  (qs-fence-gone's signaled raises from its second read after stop,
  qs-stop-frees-rig's stop releases rig's regions); a word that cannot be
  read after stop, or a free after stop that raises, no longer fails the
  probes of other clauses that met it (LOCK-4, LOCK-8, SIG-2, SIG-3, SIG-8,
  QUEUE-1/2/3, TIME-1, STOP-8).
A miss would be xfail(strict) in MISSED with what the certifier said, so
that a fix shows.

| driver                  | what it does                                              | clause  |
|-------------------------|-----------------------------------------------------------|---------|
| qs-grow-publishes       | grow puts its chunks into the shared pool at once         | QUEUE-1 |
| qs-short-drops          | a grow that falls short gives back what it made           | QUEUE-3 (EQUIVALENT below) |
| qs-short-orphans        | a Short's partial growth goes where no room looks         | QUEUE-3 |
| qs-sleep-holds-lock     | sleep holds the lock submit and commit take               | TIME-6  |
| qs-commit-busy-in-sleep | commit fails while a sleep waits                          | TIME-6  |
| qs-stop-flushes-open    | stop on an idle device commits the open command buffer    | STOP-4  |
| qs-stop-frees-rig       | stop frees rig's regions that no peer maps                | STOP-5  |
| qs-fence-gone           | after stop, the first read of the last value unmaps what signaled reads | STOP-5 |

Conforming: qs-grow-generous (grow makes up to twice what is asked, which
reaches the queues at the next room), qs-short-halves (a Short keeps a
partial growth), qs-stop-lazy (a driver thread gives back the layer's
chunks 30 ms after stop), qs-sleep-early (sleep returns, the word unmoved,
as soon as room, submit or commit runs).
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem, params  # noqa: F401 (hostmem: a fixture)

BLINDQS = ROOT / "_build" / "default" / "drivers" / "blindqs" / "blindqs.cmxs"

BROKEN = {
    "qs-grow-publishes": {"QUEUE-1"},
    "qs-short-orphans": {"QUEUE-3"},
    "qs-sleep-holds-lock": {"TIME-6"},
    "qs-commit-busy-in-sleep": {"TIME-6"},
    "qs-stop-flushes-open": {"STOP-4"},
    "qs-stop-frees-rig": {"STOP-5"},
    "qs-fence-gone": {"STOP-5"},
}

# The certifier's misses: driver -> what it said (none left).
MISSED: dict = {}

# Broken as its author meant it, but with nothing a caller can see that
# differs from a conforming driver: judged as one.  qs-short-drops makes
# chunks, gives them back and answers Short with the bytes still missing:
# the memory it holds after the Short and its answers are those of a grow
# that makes all or nothing, which the document allows ("what it made
# stays": it made nothing that stays).  make mutate's hm-short-drops is
# argued equivalent for the same reason.
EQUIVALENT = {
    "qs-short-drops": {},
}

CONFORMING = {
    "qs-grow-generous": {},
    "qs-short-halves": {},
    "qs-stop-lazy": {},
    "qs-sleep-early": {},
}


@pytest.mark.parametrize("driver", params(sorted(BROKEN), MISSED))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDQS, driver, BROKEN[driver], tmp_path)


@pytest.mark.parametrize("driver", sorted(CONFORMING) + sorted(EQUIVALENT))
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDQS, driver, hostmem, {**CONFORMING, **EQUIVALENT}[driver], tmp_path)
