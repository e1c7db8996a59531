"""Drivers that hold a lock while OCaml code runs (LOCK-3), written blind.

drivers/blindl3/ (one plugin, blindl3.cmxs): hostmem's package wrapped, one
or two functions changed per driver, each with a lock of its own shared by
its devices (a compile queue, a statistics table, an image cache, a device
registry).  A helper wrote them from the document and the installed
interface alone, before the certifier ran on any, with the table of what
each does (and the sentences) at the top of drivers/blindl3/blindl3.ml;
drivers/blindl3/check/ is the author's own check that each bug is real.

Broken drivers: the set of clauses whose verdict is `fail` must be exactly
the one given.

| driver               | what it does | clause |
|----------------------|--------------|--------|
| l3-entry-cqueue      | entry holds a C pthread mutex, uncounted, across a callback into OCaml | LOCK-3 |
| l3-alloc-stats       | alloc updates a statistics table under an uncounted Stdlib Mutex | LOCK-3 |
| l3-image-cache-late  | image takes a C mutex and runs an OCaml trace hook before rig_hold | LOCK-3 |
| l3-unload-early-give | unload calls rig_give before an OCaml log hook that still runs under its C mutex | LOCK-3 |
| l3-make-registry     | the opener's make records the device under an uncounted Stdlib Mutex | LOCK-3 |
| l3-grow-late-hold    | grow runs an OCaml trace inside its Mutex.protect before Prim.hold | LOCK-3 |

Conforming drivers: every clause's verdict must be hostmem's.

| driver              | what it does |
|---------------------|--------------|
| l3-ok-c-pure        | alloc and free keep statistics under a C mutex held only across pure C |
| l3-ok-c-counted     | entry and prepare hold a C mutex counted from C (rig_hold, rig_give) around an OCaml callback |
| l3-ok-lockfree      | image, make and stop keep their tables lock-free (Atomic.compare_and_set) |
| l3-ok-mutex-counted | map_host, unload and grow hold a Stdlib Mutex counted with Prim.hold/give |

When they came, the certifier missed l3-make-registry and l3-grow-late-hold
(probe.locks-counted called neither make nor grow); it now calls both, with
alloc of the device already open inside them.
"""

import pytest

from test_blind_set import ROOT, assert_fails_exactly, assert_verdicts_as, hostmem  # noqa: F401 (hostmem: a fixture)

BLINDL3 = ROOT / "_build" / "default" / "drivers" / "blindl3" / "blindl3.cmxs"

BROKEN = {
    "l3-entry-cqueue": "LOCK-3",
    "l3-alloc-stats": "LOCK-3",
    "l3-image-cache-late": "LOCK-3",
    "l3-unload-early-give": "LOCK-3",
    "l3-make-registry": "LOCK-3",
    "l3-grow-late-hold": "LOCK-3",
}

CONFORMING = ["l3-ok-c-pure", "l3-ok-c-counted", "l3-ok-lockfree", "l3-ok-mutex-counted"]


@pytest.mark.parametrize("driver", sorted(BROKEN))
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    assert_fails_exactly(BLINDL3, driver, {BROKEN[driver]}, tmp_path)


@pytest.mark.parametrize("driver", CONFORMING)
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):  # noqa: F811
    assert_verdicts_as(BLINDL3, driver, hostmem, {}, tmp_path)
