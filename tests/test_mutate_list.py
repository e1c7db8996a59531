"""make mutate's list stays applicable: each mutant's original text occurs
exactly once in its file (tools/mutate.sh's MUTATE_CHECK).  A change to a
target's source that rewrites a mutated line makes that mutant stale, which
the tool reports only when make mutate runs (outside make test): three went
stale that way unnoticed."""

import os
import subprocess

from conftest import ROOT


def test_every_mutant_applies():
    proc = subprocess.run(
        ["./tools/mutate.sh"],
        cwd=ROOT,
        env={**os.environ, "MUTATE_CHECK": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stale" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
