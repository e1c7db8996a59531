"""Shared helpers for the pytest suite of rig-conform.

Everything the tests parametrise over (the cases, the clauses each checks,
the mutants and the clause each breaks) comes from `rig-conform list` at
collection time, never from a list written here.  When the binary is missing
it is built once with `make build`; if that fails, the session stops with the
build's output.

The binary can be overridden with the RIG_CONFORM environment variable.
"""

import contextlib
import fcntl
import functools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
DEFAULT_RIG = ROOT / "_build" / "default" / "harness" / "certify" / "main.exe"
CLAUSES_TSV = ROOT / "spec" / "clauses.tsv"

# The suite's model.driver runs report their counterexample as drawn: the
# shrinking keeps the clause a verdict names, and took up to 30 s of each
# run that found one (blind drivers, mutants).  test_model asks for it where
# it tests the shrinking.
os.environ.setdefault("RIG_CONFORM_SHRINK_SECONDS", "0")

# No single case run or certify of the suite comes close to these; they only
# keep a hung child from hanging the suite.
RUN_TIMEOUT = 120
CERTIFY_TIMEOUT = 600
BUILD_TIMEOUT = 3600


@contextlib.contextmanager
def build_lock():
    """One build (dune, or make that calls it) at a time in this tree, across
    pytest-xdist's workers: dune refuses to start while another holds
    _build."""
    ROOT.joinpath("out").mkdir(exist_ok=True)
    with open(ROOT / "out" / ".test-build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def once_per_run(name, compute):
    """compute()'s JSON-able value, computed once per test run and shared by
    pytest-xdist's workers: the first to ask computes it under a lock, the
    others read what it wrote (a reference certification that several test
    modules compare with, say)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    cache = ROOT / "out" / ".test-cache"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name}-{run}.json"
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return json.loads(path.read_text())
        value = compute()
        for old in cache.glob(f"{name}-*.json"):
            old.unlink()
        path.with_suffix(".tmp").write_text(json.dumps(value))
        path.with_suffix(".tmp").replace(path)
        return value


class RigError(Exception):
    """The binary is missing, cannot be built, or `list` cannot be parsed."""


def rig_path() -> Path:
    env = os.environ.get("RIG_CONFORM")
    return Path(env).resolve() if env else DEFAULT_RIG


@functools.lru_cache(maxsize=None)
def ensure_rig() -> str:
    """Path of the binary; built with `make build` (once) when it is missing."""
    rig = rig_path()
    if rig.is_file() and os.access(rig, os.X_OK):
        return str(rig)
    if os.environ.get("RIG_CONFORM"):
        raise RigError(f"RIG_CONFORM={rig} is not an executable file")
    try:
        with build_lock():
            proc = subprocess.run(
                ["make", "build"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT,
            )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RigError(f"`make build` in {ROOT} could not run: {e}") from e
    if proc.returncode != 0 or not (rig.is_file() and os.access(rig, os.X_OK)):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise RigError(
            f"{rig} is missing and `make build` (exit {proc.returncode}) did not "
            f"produce it; last lines of its output:\n{tail}"
        )
    return str(rig)


def rig(*args, timeout=RUN_TIMEOUT, cwd=ROOT):
    """Runs the binary with `args`; returns the CompletedProcess (text mode)."""
    return subprocess.run(
        [ensure_rig(), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


# ----------------------------------------------------------------------------
# `rig-conform list`


# The mutants that show only under an injected failure: name -> (case,
# FN:NTH:KIND), from the "[under CASE --inject X]" of `rig-conform list`.
UNDER_FAULT = {}


@functools.lru_cache(maxsize=None)
def parse_list():
    """(cases, mutants) from `rig-conform list`:
    cases   {case name: [clause IDs it checks]} in the listed order;
    mutants [(name, clause, side)], side "rig" for mutants of the reference
            rig, "edge" for those of the edge primitives and "driver" for
            mutants of the driver."""
    proc = rig("list")
    if proc.returncode != 0:
        raise RigError(f"`rig-conform list` exited {proc.returncode}: {proc.stderr}")
    cases, mutants = {}, []
    section = None
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            head = line.strip()
            if head == "cases:":
                section = "cases"
            elif head == "mutants of the reference rig:":
                section = "rig"
            elif head == "mutants of the edge primitives:":
                section = "edge"
            elif head.startswith("mutants of driver") and head.endswith(":"):
                section = "driver"
            else:
                raise RigError(f"`rig-conform list`: unexpected heading {line!r}")
            continue
        words = line.split()
        if section == "cases":
            if len(words) < 2:
                raise RigError(f"`rig-conform list`: case line without clauses: {line!r}")
            cases[words[0]] = words[1:]
        elif section in ("rig", "edge", "driver"):
            if len(words) < 2:
                raise RigError(f"`rig-conform list`: bad mutant line {line!r}")
            mutants.append((words[0], words[1], section))
            shown = re.search(r"\[under (\S+) --inject (\S+)\]$", line)
            if shown:
                UNDER_FAULT[words[0]] = (shown.group(1), shown.group(2))
        else:
            raise RigError(f"`rig-conform list`: line outside any section: {line!r}")
    if not cases or not mutants:
        raise RigError(f"`rig-conform list` gave no cases or no mutants:\n{proc.stdout}")
    return cases, mutants


def cases_of_clause(clause):
    """The cases that check `clause`, in listed order."""
    cases, _ = parse_list()
    return [name for name, clauses in cases.items() if clause in clauses]


def checked_clauses():
    cases, _ = parse_list()
    return {c for clauses in cases.values() for c in clauses}


def catalog():
    """Rows of spec/clauses.tsv (header skipped): [(id, side)] in file order."""
    rows = []
    with open(CLAUSES_TSV, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines[1:]:
        if line.strip():
            fields = line.split("\t")
            rows.append((fields[0], fields[1]))
    return rows


# ----------------------------------------------------------------------------
# One case run


def parse_run_output(stdout):
    """(set of flagged clause IDs, list of output lines)."""
    lines = stdout.splitlines()
    flagged = set()
    for line in lines:
        fields = line.split("\t")
        if fields[0] == "FINDING" and len(fields) >= 2:
            flagged.add(fields[1])
        # run's watch killed the case: a call that never returned, and its clause
        if fields[0] == "HUNG" and len(fields) >= 4:
            flagged.update(fields[3].split(","))
    return flagged, lines


def replay_args(case, seed, mutant=None, driver="fake"):
    """The arguments of certify's replay line for one job (see runner.ml)."""
    args = ["run", "--driver", driver, "--case", case, "--seed", str(seed)]
    if mutant is not None:
        args += ["--mutant", mutant]
    return args


def run_case(case, seed, mutant=None, inject=None):
    """Runs one case once: (exit code, set of flagged clause IDs, output lines)."""
    args = ["run", "--case", case, "--seed", seed]
    if mutant is not None:
        args += ["--mutant", mutant]
    if inject is not None:
        args += ["--inject", inject]
    proc = rig(*args)
    flagged, lines = parse_run_output(proc.stdout)
    if proc.stderr.strip():
        lines = lines + ["stderr: " + l for l in proc.stderr.splitlines()]
    return proc.returncode, flagged, lines


@functools.lru_cache(maxsize=None)
def run_case_cached(case, seed, mutant=None):
    """run_case, once per session for each (case, seed, mutant): a case
    checking several clauses is parametrised once per clause."""
    code, flagged, lines = run_case(case, seed, mutant)
    return code, frozenset(flagged), tuple(lines)


# ----------------------------------------------------------------------------
# pytest hooks and fixtures


def pytest_configure(config):
    try:
        ensure_rig()
        parse_list()
    except RigError as e:
        pytest.exit(f"rig-conform test suite cannot start: {e}", returncode=1)


# Tests that take half a minute or more (make pytest's --durations): they
# start first, so that none of them starts last and holds the suite's end
# while the other workers idle.  Matched against the test's node id.
SLOW_FIRST = (
    "test_blind_hangs.py::test_conforming",
    "test_sanitizers.py::test_asan",
    "test_third_party.py::test_hostmem_passes_twenty_seeds",
    "test_third_party.py::test_broken_flagged_with_its_clause",
    "test_hostile.py::test_a_stop_that_never_returns",
    "test_blind_set.py::test_conforming_gets_hostmems_verdicts[bs-ok-",
    "test_blind_tm.py::test_broken",
    "test_blind_l3.py::test_broken",
    "test_clauses.py::test_mutant_caught[TIME-4",
    "test_clauses.py::test_mutant_caught[CODE-6",
    "test_model.py::test_shrinks",
)


# CPU per test (issue 14): this process's and the children it waited for
# (a certifier and every child it reaped), one line per test in
# out/test-cpu/<worker>.tsv; the terminal summary adds them up per file.
TEST_CPU_DIR = ROOT / "out" / "test-cpu"


def _cpu_seconds():
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = _cpu_seconds()
    yield
    used = _cpu_seconds() - before
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    TEST_CPU_DIR.mkdir(parents=True, exist_ok=True)
    with open(TEST_CPU_DIR / f"{worker}.tsv", "a") as f:
        f.write(f"{item.nodeid}\t{used:.2f}\n")


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for old in TEST_CPU_DIR.glob("*.tsv"):
            old.unlink()


def pytest_terminal_summary(terminalreporter):
    per_file = {}
    for path in TEST_CPU_DIR.glob("*.tsv"):
        for line in path.read_text().splitlines():
            nodeid, _, cpu = line.rpartition("\t")
            name = nodeid.split("::")[0]
            per_file[name] = per_file.get(name, 0.0) + float(cpu)
    if per_file:
        terminalreporter.write_line(
            f"CPU of the tests (theirs and their children's), {sum(per_file.values()):.0f} s in all; the most:"
        )
        for name, cpu in sorted(per_file.items(), key=lambda kv: -kv[1])[:12]:
            terminalreporter.write_line(f"  {cpu:8.1f} s  {name}")


def pytest_collection_modifyitems(config, items):
    # A stable sort: the same order in every xdist worker, as it requires.
    items.sort(key=lambda item: not any(s in item.nodeid for s in SLOW_FIRST))


def clause_case_params():
    """pytest.param((clause, case)) for each pair, id "<clause>-<case>"."""
    cases, _ = parse_list()
    return [
        pytest.param(clause, case, id=f"{clause}-{case}")
        for case, clauses in cases.items()
        for clause in clauses
    ]


def mutant_params():
    """pytest.param((name, clause, side)) for each mutant, id "<clause>-<name>"."""
    _, mutants = parse_list()
    return [
        pytest.param(name, clause, side, id=f"{clause}-{name}")
        for name, clause, side in mutants
    ]


def pytest_generate_tests(metafunc):
    # Only tests that do not parametrise these names themselves.
    own = {
        n.strip()
        for m in metafunc.definition.iter_markers("parametrize")
        for n in (m.args[0].split(",") if isinstance(m.args[0], str) else m.args[0])
    }
    names = set(metafunc.fixturenames) - own
    if {"clause", "case"} <= names:
        metafunc.parametrize(("clause", "case"), clause_case_params())
    elif {"mutant", "clause", "side"} <= names:
        metafunc.parametrize(("mutant", "clause", "side"), mutant_params())


@pytest.fixture(scope="session")
def rig_bin():
    return ensure_rig()


@pytest.fixture(scope="session")
def rig_list():
    return parse_list()
