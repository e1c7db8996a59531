"""The room/grow libFuzzer target (fuzz/room_grow_fuzz.c, issue 6).

Built once with `make fuzz-build`.  Every subprocess has a timeout; the
fuzzing runs are bounded by -max_total_time / -runs, never by a wall-clock
assertion.  Frugal: one process, no -jobs.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FUZZER = ROOT / "out" / "fuzz" / "room_grow_fuzz"
CORPUS = ROOT / "fuzz" / "corpus" / "room_grow"
REGRESSIONS = ROOT / "fuzz" / "regressions" / "room_grow"

# mutant of enum fake_mutant -> the clause (or sanitizer report) that finds it
MUTANTS = {
    "grow-writes-queue": "VIOLATION QUEUE-1",
    "grow-unused": "VIOLATION QUEUE-2",
    "grow-short-drops": "VIOLATION QUEUE-3",
    "stop-no-last-value": "VIOLATION STOP-3",
    "stop-runs-encoded": "VIOLATION STOP-4",
    "late-word-write": "VIOLATION STOP-3",
    "stop-frees-regions": "AddressSanitizer: heap-use-after-free",
}


@pytest.fixture(scope="module")
def fuzzer():
    proc = subprocess.run(["make", "-s", "fuzz-build"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert FUZZER.is_file()
    return str(FUZZER)


def run(args, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=e)


def test_corpus_and_regressions_pass(fuzzer):
    proc = run([fuzzer, "-runs=0", str(CORPUS), str(REGRESSIONS)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "VIOLATION" not in proc.stderr
    assert "INITED cov:" in proc.stderr


def test_trace_is_a_readable_schedule(fuzzer):
    proc = run([fuzzer, str(CORPUS / "two_threads_interleave")], env={"RIG_FUZZ_TRACE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stderr
    for needle in ("open ", "T0      room(", "T1      room(", "grow -> ", "submit(", "commit", "stop (close)"):
        assert needle in out, needle


def test_trace_is_the_same_twice(fuzzer):
    """An input replays the same schedule (deterministic worker)."""
    seed = str(CORPUS / "short_and_reclaim")
    env = {"RIG_FUZZ_TRACE": "1"}

    def steps(proc):
        return [l for l in proc.stderr.splitlines() if l[:4].strip().isdigit()]

    # libFuzzer runs an input a second time when it suspects a leak, which
    # would print the schedule twice: leak checks are the corpus test's.
    args = [fuzzer, "-detect_leaks=0", seed]
    first, second = run(args, env=env), run(args, env=env)
    assert first.returncode == second.returncode == 0, (first.stderr[-2000:], second.stderr[-2000:])
    assert len(steps(first)) > 5, first.stderr[-2000:]
    # handles differ between processes only by the process-wide counter: none here
    assert steps(first) == steps(second), (first.stderr[-3000:], second.stderr[-3000:])


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_regression_input_finds_mutant(fuzzer, mutant):
    """Each planted mutant's minimized input is kept and still finds it."""
    path = REGRESSIONS / f"mutant-{mutant}"
    assert path.is_file()
    proc = run([fuzzer, str(path)], env={"RIG_FUZZ_MUTANT": mutant})
    assert proc.returncode != 0
    assert MUTANTS[mutant] in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("mutant", ["grow-writes-queue", "grow-short-drops", "stop-runs-encoded"])
def test_fuzzer_finds_mutant_from_seeds(fuzzer, mutant, tmp_path):
    """Fuzzing from the seed corpus (a copy) finds the mutant within a bounded run."""
    work = tmp_path / "corpus"
    work.mkdir()
    proc = run(
        [fuzzer, "-seed=1", "-max_total_time=30", "-timeout=10", f"-artifact_prefix={tmp_path}/", str(work), str(CORPUS)],
        env={"RIG_FUZZ_MUTANT": mutant},
    )
    assert proc.returncode != 0
    assert MUTANTS[mutant] in proc.stderr, proc.stderr[-3000:]
    crashes = list(tmp_path.glob("crash-*"))
    assert crashes
    again = run([fuzzer, str(crashes[0])], env={"RIG_FUZZ_MUTANT": mutant})
    assert MUTANTS[mutant] in again.stderr


def test_short_fuzzing_finds_nothing_on_conforming_fake(fuzzer, tmp_path):
    work = tmp_path / "corpus"
    work.mkdir()
    proc = run(
        [fuzzer, "-seed=1", "-max_total_time=10", "-timeout=10", f"-artifact_prefix={tmp_path}/", str(work), str(CORPUS)]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DONE" in proc.stderr
