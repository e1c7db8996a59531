"""A call that deadlocked on a mutex ends its run once that is certain
(harness/isolation/lock_wait.ml), not at its bound: its thread sleeps on a
pthread mutex's futex whose owner is the thread itself (or a chain of
owners that comes back), and no thread of the chain woke while it was read.

- certify names the deadlock in the clause's evidence (l3-entry-cqueue: an
  uncounted C mutex held across a callback into OCaml, re-entered at an
  allocation point, from the zygote's children, whose main thread's locks
  name the zygote's tid);
- run's replay of that case says so too, with the same clause;
- the fake's LOCK-3 mutant (a C lock of prepare, uncounted) is caught the
  same way under selftest.

Nothing here times anything: the evidence's words show the path taken.
"""

import json
import subprocess

from conftest import ROOT, ensure_rig

BLINDL3 = ROOT / "_build" / "default" / "drivers" / "blindl3" / "blindl3.cmxs"
GUARD = 300


def test_certify_names_the_deadlock(tmp_path):
    report = tmp_path / "l3.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--plugin", str(BLINDL3), "--driver", "l3-entry-cqueue", "--only", "LOCK-3",
         "--seeds", "1", "--no-color", "--no-sweep", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=GUARD,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lock3 = {c["id"]: c for c in json.loads(report.read_text())["clauses"]}["LOCK-3"]
    assert lock3["verdict"] == "fail", lock3
    assert "deadlocked" in lock3["evidence"] and "waited for good on a mutex" in lock3["evidence"], lock3


def test_replay_names_the_deadlock():
    proc = subprocess.run(
        [ensure_rig(), "run", "--plugin", str(BLINDL3), "--driver", "l3-entry-cqueue", "--case", "probe.locks-counted", "--seed", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=GUARD,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert any(l.startswith("HUNG\tentry\t") and l.endswith("\tLOCK-3") for l in proc.stdout.splitlines()), proc.stdout
    assert "deadlocked" in proc.stderr, proc.stderr


def test_fake_lock3_mutant_caught_as_a_deadlock(tmp_path):
    proc = subprocess.run(
        [ensure_rig(), "run", "--mutant", "prepare-c-lock-uncounted", "--case", "probe.locks-counted", "--seed", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=GUARD,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "deadlocked" in proc.stderr and "LOCK-3" in proc.stderr, proc.stdout + proc.stderr
