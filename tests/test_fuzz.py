"""The room/grow libFuzzer target (fuzz/room_grow_fuzz.c, issue 6), and its
inputs turned into scenarios (fuzz/to_scenario.sh) that replay the same
schedule in the certifier (the statement `schedule`).

Built once with `make fuzz-build`.  Every subprocess has a timeout; the
fuzzing runs are bounded by -max_total_time / -runs, never by a wall-clock
assertion.  Frugal: one process, no -jobs.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import build_lock

ROOT = Path(__file__).resolve().parent.parent
FUZZER = ROOT / "out" / "fuzz" / "room_grow_fuzz"
CORPUS = ROOT / "fuzz" / "corpus" / "room_grow"
REGRESSIONS = ROOT / "fuzz" / "regressions" / "room_grow"
TO_SCENARIO = ROOT / "fuzz" / "to_scenario.sh"
RIG = ROOT / "_build" / "default" / "harness" / "certify" / "main.exe"

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
    with build_lock():
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


# ---------------------------------------------------------------------------
# Fuzz inputs as scenarios: fuzz/to_scenario.sh, replayed by the certifier.


@pytest.fixture(scope="module")
def rig_bin():
    from conftest import ensure_rig

    return ensure_rig()


def to_scenario(tmp_path, input_path, mutant=None, name=None):
    """Writes the scenario of input_path into tmp_path; returns its case name."""
    out = tmp_path / f"{name or Path(input_path).name}.scn"
    proc = run([str(TO_SCENARIO), str(input_path), mutant or "", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
    return "scn." + out.stem


def replay(rig_bin, tmp_path, case):
    """Runs one scenario case of tmp_path: (exit code, flagged clauses, stdout, stderr)."""
    proc = run([rig_bin, "run", "--case", case, "--seed", "1"], env={"RIG_CONFORM_SCENARIOS": str(tmp_path)})
    flagged = {l.split("\t")[1] for l in proc.stdout.splitlines() if l.startswith("FINDING\t")}
    return proc.returncode, flagged, proc.stdout, proc.stderr


# The mutants whose input the fuzzer reports as a clause (not a sanitizer report).
VIOLATING = sorted(m for m, what in MUTANTS.items() if what.startswith("VIOLATION"))


@pytest.mark.parametrize("mutant", VIOLATING)
def test_regression_scenario_reports_the_fuzzers_clause(fuzzer, rig_bin, tmp_path, mutant):
    """A regression input, as a scenario with its mutant, is a finding of the
    clause the fuzzer itself reports, and of no other."""
    path = REGRESSIONS / f"mutant-{mutant}"
    proc = run([fuzzer, str(path)], env={"RIG_FUZZ_MUTANT": mutant})
    m = re.search(r"VIOLATION (\S+) at step (\d+)", proc.stderr)
    assert m, proc.stderr[-3000:]
    case = to_scenario(tmp_path, path, mutant=mutant)
    rc, flagged, out, err = replay(rig_bin, tmp_path, case)
    assert rc == 1, out + err
    assert flagged == {m[1]}, out + err
    assert f"VIOLATION {m[1]} at step {m[2]}:" in out, out


def test_regression_inputs_pass_on_the_conforming_fake(rig_bin, tmp_path):
    """Without their mutant, the regression and corpus inputs find nothing."""
    inputs = sorted(REGRESSIONS.iterdir()) + sorted(CORPUS.iterdir())
    for p in inputs:
        case = to_scenario(tmp_path, p)
        rc, flagged, out, err = replay(rig_bin, tmp_path, case)
        assert rc == 0 and not flagged, (p, out, err)


def test_schedule_trace_matches_the_fuzzers(fuzzer, rig_bin, tmp_path):
    """RIG_FUZZ_TRACE=1 prints the same steps in the certifier as in the fuzzer."""
    seed = CORPUS / "two_threads_interleave"
    case = to_scenario(tmp_path, seed)

    def steps(text):
        # handles are process-wide counters: compare the steps without them
        return [re.sub(r"handle 0x[0-9a-f]+", "handle", l) for l in text.splitlines() if l[:4].strip().isdigit()]

    fz = run([fuzzer, "-detect_leaks=0", str(seed)], env={"RIG_FUZZ_TRACE": "1"})
    hv = run([rig_bin, "run", "--case", case, "--seed", "1"],
             env={"RIG_CONFORM_SCENARIOS": str(tmp_path), "RIG_FUZZ_TRACE": "1"})
    assert fz.returncode == hv.returncode == 0, (fz.stderr[-2000:], hv.stdout, hv.stderr[-2000:])
    assert len(steps(fz.stderr)) > 5
    assert steps(fz.stderr) == steps(hv.stderr)


def test_scenario_header_says_how_to_replay(tmp_path):
    out = tmp_path / "x.scn"
    proc = run([str(TO_SCENARIO), str(REGRESSIONS / "mutant-grow-unused"), "grow-unused", str(out)])
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "fuzz/regressions/room_grow/mutant-grow-unused" in text
    assert f"RIG_CONFORM_SCENARIOS={tmp_path}" in text and "run --case scn.x" in text
    assert "RIG_FUZZ_MUTANT=grow-unused" in text
    assert "\nschedule_mutant grow-unused\n" in text
    assert re.search(r"^clauses .*QUEUE-1 .*STOP-3", text, re.M)


def test_long_input_spans_several_schedule_lines(rig_bin, tmp_path):
    """Consecutive schedule lines are one input: 600 bytes over 19 lines replay
    as the same single file does (no finding on the conforming fake)."""
    data = bytes((i * 37 + 11) % 256 for i in range(600))
    p = tmp_path / "long-input"
    p.write_bytes(data)
    case = to_scenario(tmp_path, p, name="long")
    text = (tmp_path / "long.scn").read_text()
    hexes = re.findall(r'^schedule "([0-9a-f]+)"$', text, re.M)
    assert len(hexes) == 19 and bytes.fromhex("".join(hexes)) == data
    rc, flagged, out, err = replay(rig_bin, tmp_path, case)
    assert rc == 0 and not flagged, out + err


@pytest.mark.parametrize(
    "line, col, fragment",
    [
        ('schedule "00zz"', 13, "expected a hex digit (0-9, a-f, A-F) in a schedule, found 'z'"),
        ('schedule "000"', 10, "expected an even number of hex digits"),
        ("schedule_mutant grow-everything", 17, "expected a mutant of the fuzzer (none, "),
    ],
)
def test_malformed_schedule_is_a_file_line_col_error(rig_bin, tmp_path, line, col, fragment):
    f = tmp_path / "bad.scn"
    f.write_text('scenario "bad"\nclauses QUEUE-1\nneeds fake\n' + line + "\n")
    proc = run([rig_bin, "run", "--case", "scn.bad", "--seed", "1"], env={"RIG_CONFORM_SCENARIOS": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{f}:4:{col}: {fragment}" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [([], "usage:"), (["/nonexistent/input"], "not a readable file"), (["DIR"], "not a readable file"),
     (["INPUT", "bad mutant!"], "expected a name"), (["INPUT", "", "x.txt"], "must end in .scn")],
)
def test_to_scenario_errors(tmp_path, args, fragment):
    subst = {"DIR": str(tmp_path), "INPUT": str(CORPUS / "one_thread_fits")}
    proc = run([str(TO_SCENARIO)] + [subst.get(a, a) for a in args])
    assert proc.returncode == 2
    assert fragment in proc.stderr, proc.stderr
