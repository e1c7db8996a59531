"""Bad input (issue 13): every one gets a clear message on stderr and exit 2
before any case runs, never a hang, a crash or an OCaml backtrace; and
whatever bytes a scenario file's name holds, every report stays valid.

"Before any case runs" is read from what was written, never from a clock:
no "certifying driver" line and no progress line, no report file (the
given paths, and nothing under the working directory, a fresh folder).  The
subprocess timeout only keeps a hang from hanging the suite.

Tests marked `# main.ml` are refusals of the command line (harness/cli/;
drivers.ml, runner.ml); the others of the scenario loader (Scenario_syntax,
Scenario_run) and the reports (Report).
"""

import json
import os
import re
import resource
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import ROOT, ensure_rig

# A guard, not an assertion: each of these refusals should be immediate.
GUARD = 120
# Enough for an accepted run of one clause and one seed (a bad input that is
# wrongly accepted must fail the test, not hang the suite).
RUN_GUARD = 300

NO_DRIVER_PLUGIN = ROOT / "_build" / "default" / "tests" / "fixtures" / "plugins" / "no_driver.cmxs"

# Enough for any refusal; a billion-element list of seeds is far above it.
MEMORY_CAP = 2 << 30

QUICK = ["--only", "CNT-1", "--seeds", "1", "--no-sweep", "-j", "1"]


def _run(args, cwd, env=None, timeout=GUARD, memory_cap=None):
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    limit = None
    if memory_cap is not None:
        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))
    return subprocess.run(
        [ensure_rig(), *map(os.fsencode, map(str, args))],
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
        env=full_env,
        preexec_fn=limit,
    )


def _text(b):
    return b.decode("utf-8", "replace")


def _clean_stderr(err):
    low = err.lower()
    for bad in ("exception", "fatal error", "raised at", "called from", "re-raised"):
        assert bad not in low, f"stderr shows an OCaml exception ({bad!r}):\n{err}"


def _refused(proc, needles, cwd, reports=()):
    """Exit 2, every needle on stderr, no exception, and no sign that a run
    happened: no certifying/progress line, no report file."""
    out, err = _text(proc.stdout), _text(proc.stderr)
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert err.strip(), "no message on stderr"
    for needle in needles:
        assert needle in err, f"stderr does not name {needle!r}:\n{err}"
    _clean_stderr(err)
    assert "certifying driver" not in out, f"a certification started:\n{out[:2000]}"
    assert not re.search(r"^(certify|census|sweep): \d+/\d+ runs", err, re.M), f"runs happened:\n{err[:2000]}"
    assert "FINDING" not in out
    for r in reports:
        assert not Path(r).exists(), f"a report was written at {r}"
    assert not (Path(cwd) / "out").exists(), f"a report was written under {cwd}/out"


@pytest.fixture
def work(tmp_path):
    """A fresh working directory: a default report would land in it."""
    d = tmp_path / "cwd"
    d.mkdir()
    return d


# ----------------------------------------------------------------------------
# report paths that cannot be written: refused before the run (main.ml:
# before e4bee92 they were found only after the whole run, with a Sys_error exception)


def _unwritable(tmp_path):
    somefile = tmp_path / "somefile"
    somefile.write_text("a regular file\n")
    adir = tmp_path / "adir"
    adir.mkdir()
    # Root is not stopped by chmod: /proc and a file used as a directory are.
    return {
        "proc": "/proc/x/r.json",
        "directory": str(adir),
        "under-a-file": str(somefile / "r.json"),
    }


@pytest.mark.parametrize("flag", ["--report", "--junit", "--markdown"])
@pytest.mark.parametrize("where", ["proc", "directory", "under-a-file"])
def test_unwritable_report_path_is_refused_before_the_run(tmp_path, work, flag, where):  # main.ml
    bad = _unwritable(tmp_path)[where]
    json_report = tmp_path / "r.json"
    args = ["certify", *QUICK]
    if flag != "--report":
        args += ["--report", json_report]
    args += [flag, bad]
    proc = _run(args, work, timeout=RUN_GUARD)
    # The message names the path and says which report it is.
    _refused(proc, [bad, "report"], work, reports=[json_report, tmp_path / "r.xml", tmp_path / "r.md"])


def test_unwritable_sweep_report_is_refused_before_the_run(work):  # main.ml
    proc = _run(["sweep", "--only", "EXC-1", "--shard", "1/50", "--report", "/proc/x/s.json"], work, timeout=RUN_GUARD)
    _refused(proc, ["/proc/x/s.json", "report"], work)


# ----------------------------------------------------------------------------
# empty and missing values


def test_empty_last_argument(work):  # main.ml; before: Invalid_argument("index out of bounds")
    _refused(_run(["certify", ""], work), [], work)


def test_empty_argument_in_the_middle(work):  # main.ml
    _refused(_run(["certify", "", "--list"], work), [], work)


def test_flag_without_value(work):
    _refused(_run(["certify", "--only"], work), ["--only"], work)


def test_empty_report_path(tmp_path, work):  # main.ml; before: accepted, the run writes ".tmp" files
    proc = _run(["certify", *QUICK, "--report", ""], work, timeout=RUN_GUARD)
    _refused(proc, ["--report"], work)
    assert not any(work.iterdir()), f"files written in {work}: {list(work.iterdir())}"


@pytest.mark.parametrize("only", ["", ",", ",,", " "])
def test_only_that_names_no_clause(work, only):  # main.ml; before: '' and ',' select every clause
    proc = _run(["certify", "--only", only, "--list"], work)
    _refused(proc, ["--only", "names no clause"], work)


def test_only_unknown_clause(tmp_path, work):
    _refused(_run(["certify", "--only", "NOPE-1", "--report", tmp_path / "r.json"], work), ["NOPE-1"], work,
             reports=[tmp_path / "r.json"])


# ----------------------------------------------------------------------------
# numbers out of range


def test_seeds_a_billion_is_refused_with_its_bound(tmp_path, work):  # main.ml; before: List.init 1e9
    # The memory cap keeps a billion-element list, were it built, from taking the machine.
    proc = _run(["certify", "--seeds", "1000000000", *QUICK[:2], "--report", tmp_path / "r.json"], work,
                memory_cap=MEMORY_CAP)
    _refused(proc, ["--seeds", "10000"], work, reports=[tmp_path / "r.json"])


def test_seeds_just_over_the_bound(work):  # main.ml
    _refused(_run(["certify", "--seeds", "10001", "--list"], work), ["--seeds", "10000"], work)


def test_seeds_at_the_bound_is_accepted(work):
    proc = _run(["certify", "--seeds", "10000", "--list", "--only", "CNT-1"], work)
    assert proc.returncode == 0, _text(proc.stderr)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seeds", "0"], "--seeds"),
        (["--seeds", "-3"], "--seeds"),
        (["-j", "0"], "-j"),
        (["-j", "-1"], "-j"),
        (["--timeout", "-1"], "--timeout"),
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "nan"], "--timeout"),
        (["--batch", "0"], "--batch"),
        (["--shard", "0/3"], "--shard"),
        (["--shard", "1/0"], "--shard"),
        (["--seed", "x"], "--seed"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_bad_numbers(tmp_path, work, args, needle):
    proc = _run(["certify", *args, "--report", tmp_path / "r.json"], work)
    _refused(proc, [needle], work, reports=[tmp_path / "r.json"])


@pytest.mark.parametrize("value", ["inf", "infinity", "-inf"])
def test_timeout_infinite(tmp_path, work, value):  # main.ml; before: "inf" is accepted (no limit at all)
    proc = _run(["certify", "--timeout", value, "--list"], work)
    _refused(proc, ["--timeout"], work)


# ----------------------------------------------------------------------------
# conflicting flags


def test_seeds_and_seed_together(tmp_path, work):  # main.ml
    proc = _run(["certify", "--only", "CNT-1", "--no-sweep", "--seeds", "2", "--seed", "5",
                 "--report", tmp_path / "r.json"], work, timeout=RUN_GUARD)
    _refused(proc, ["--seed"], work, reports=[tmp_path / "r.json"])


def test_two_different_reports(tmp_path, work):  # main.ml
    proc = _run(["certify", *QUICK, "--report", tmp_path / "a.json", "--report", tmp_path / "b.json"], work,
                timeout=RUN_GUARD)
    _refused(proc, ["--report"], work, reports=[tmp_path / "a.json", tmp_path / "b.json"])


# ----------------------------------------------------------------------------
# scenario folders with files that would hang or flood a reader


def _scenarios(tmp_path):
    d = tmp_path / "scn"
    d.mkdir()
    for f in (ROOT / "scenarios").glob("*.scn"):
        (d / f.name).write_bytes(f.read_bytes())
    return d


def _hostile_entry(d, kind):
    p = d / "x.scn"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev-zero":
        p.symlink_to("/dev/zero")
    elif kind == "directory":
        p.mkdir()
    elif kind == "huge":
        with open(p, "wb") as f:
            f.write(b'scenario "huge"\nclauses CNT-1\n')
            f.write(b"# padding\n" * (200 * 1024))  # 2 MiB
    return p, {"fifo": "not a regular file", "dev-zero": "not a regular file",
               "directory": "not a regular file", "huge": "too large"}[kind]


KINDS = ["fifo", "dev-zero", "directory", "huge"]


@pytest.mark.parametrize("kind", KINDS)
def test_help_works_whatever_the_scenario_folder(tmp_path, work, kind):  # main.ml: scenarios loaded lazily
    d = _scenarios(tmp_path)
    _hostile_entry(d, kind)
    proc = _run(["--help"], work, env={"RIG_CONFORM_SCENARIOS": str(d)})
    assert proc.returncode == 0, _text(proc.stderr)
    assert "Usage:" in _text(proc.stdout)
    _clean_stderr(_text(proc.stderr))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", [["list"], ["certify", *QUICK]], ids=["list", "certify"])
def test_a_scenario_that_is_no_regular_file_is_refused(tmp_path, work, kind, command):
    d = _scenarios(tmp_path)
    p, why = _hostile_entry(d, kind)
    proc = _run(command, work, env={"RIG_CONFORM_SCENARIOS": str(d)})
    _refused(proc, [f"{p}: {why}"], work)


def test_a_dangling_link_named_scn_is_refused(tmp_path, work):
    d = _scenarios(tmp_path)
    (d / "x.scn").symlink_to(tmp_path / "nowhere")
    _refused(_run(["list"], work, env={"RIG_CONFORM_SCENARIOS": str(d)}), [f"{d}/x.scn: cannot read"], work)


def test_a_scenario_folder_that_is_no_folder(tmp_path, work):
    _refused(_run(["list"], work, env={"RIG_CONFORM_SCENARIOS": str(tmp_path / "none")}),
             ["RIG_CONFORM_SCENARIOS"], work)


def test_an_unknown_clause_id_has_its_line_and_column(tmp_path, work):
    d = tmp_path / "scn"
    d.mkdir()
    (d / "unknown.scn").write_text('scenario "x"\n# the second ID is not in the catalog\nclauses CNT-1   NOPE-9\nopen d0 0\n')
    proc = _run(["certify", *QUICK], work, env={"RIG_CONFORM_SCENARIOS": str(d)})
    _refused(proc, [f"{d}/unknown.scn:3:17:", "NOPE-9"], work)


def test_an_unknown_fuzzer_mutant_has_its_column(tmp_path, work):
    d = tmp_path / "scn"
    d.mkdir()
    (d / "m.scn").write_text('scenario "x"\nclauses QUEUE-1\nneeds fake\nschedule_mutant    no-such-mutant\n')
    _refused(_run(["list"], work, env={"RIG_CONFORM_SCENARIOS": str(d)}), [f"{d}/m.scn:4:20:", "no-such-mutant"], work)


def test_a_file_name_with_control_bytes_does_not_reach_the_terminal(tmp_path, work):
    d = tmp_path / "scn"
    d.mkdir()
    bad = os.fsencode(d) + b"/a\x1b[2J\xff.scn"
    with open(bad, "wb") as f:
        f.write(b'scenario "x"\nclauses CNT-1\nopen d0\n')
    proc = _run(["list"], work, env={"RIG_CONFORM_SCENARIOS": str(d)})
    assert proc.returncode == 2
    assert b"\x1b" not in proc.stderr and b"\xff" not in proc.stderr, proc.stderr
    assert b"a\\x1b[2J\\xff.scn:3:" in proc.stderr, proc.stderr


# ----------------------------------------------------------------------------
# a scenario whose file name has non-UTF-8 and control bytes: every report valid

HOSTILE_NAME = b'caf\xe9\x1b[31m|<&"]]>`\xe2\x82x\x7f\xc2\x9b.scn'


def test_reports_stay_valid_whatever_a_file_name_holds(tmp_path, work):
    d = tmp_path / "scn"
    d.mkdir()
    with open(os.fsencode(d) + b"/" + HOSTILE_NAME, "wb") as f:
        # Fails CNT-1: the evidence names the file, the runs name the case.
        f.write(b'scenario "hostile name"\nclauses CNT-1\nopen d0 0\nclose d0 => lost\n')
    report = tmp_path / "r.json"
    proc = _run(["certify", *QUICK, "--report", report], work, env={"RIG_CONFORM_SCENARIOS": str(d)},
                timeout=RUN_GUARD)
    assert proc.returncode == 1, _text(proc.stdout + proc.stderr)

    # JSON: strict UTF-8, parses, names the case with U+FFFD in place of the
    # invalid bytes (one per maximal invalid subpart: \xe9 and \xe2\x82).
    data = json.loads(report.read_bytes().decode("utf-8"))
    cnt1 = next(c for c in data["clauses"] if c["id"] == "CNT-1")
    assert cnt1["verdict"] == "fail"
    assert "caf\ufffd\x1b[31m|<&\"]]>`\ufffdx\x7f\x9b" in cnt1["evidence"], cnt1
    assert any(r["case"] == "scn.caf\ufffd\x1b[31m|<&\"]]>`\ufffdx\x7f\x9b" for r in data["runs"]), data["runs"]
    raw = report.read_bytes()
    assert not any(b < 0x20 and b not in b"\n" for b in raw), "raw control bytes in report.json"

    # JUnit: well-formed XML 1.0 (expat refuses any forbidden character).
    tree = ET.parse(tmp_path / "r.xml")
    failure = next(tc.find("failure") for tc in tree.iter("testcase") if tc.get("name") == "CNT-1")
    message = failure.get("message")
    assert "caf\ufffd\\x1b[31m|<&\"]]>`\ufffdx\\x7f\\u{9b}" in message, message

    # Markdown: UTF-8, no control byte but line ends, each row one line with
    # the table's six unescaped pipes.
    md = (tmp_path / "r.md").read_bytes()
    assert not any(b < 0x20 and b != 0x0A for b in md), "raw control bytes in report.md"
    text = md.decode("utf-8")
    assert "\x7f" not in text and "\x9b" not in text
    rows = [l for l in text.splitlines() if l.startswith("|")]
    assert rows and all(len(re.findall(r"(?<!\\)\|", l)) == 6 for l in rows), [
        l for l in rows if len(re.findall(r"(?<!\\)\|", l)) != 6]
    assert any(l.startswith("| CNT-1 |") and "caf\ufffd" in l for l in rows)

    # The console: no escape byte, no C1 control, valid UTF-8.
    assert b"\x1b" not in proc.stdout and b"\xc2\x9b" not in proc.stdout
    proc.stdout.decode("utf-8")
    assert b"\\x1b[31m" in proc.stdout


# ----------------------------------------------------------------------------
# TMPDIR that cannot hold the children's output: the certifier's problem,
# never a verdict against the driver (main.ml: before e4bee92 CNT-1 came out fail)


@pytest.mark.parametrize("kind", ["missing", "regular-file"])
def test_unusable_tmpdir(tmp_path, work, kind):  # main.ml
    if kind == "missing":
        tmpdir = "/nonexistent"
    else:
        tmpdir = tmp_path / "afile"
        tmpdir.write_text("not a directory\n")
    report = tmp_path / "r.json"
    proc = _run(["certify", *QUICK, "--report", report], work, env={"TMPDIR": str(tmpdir)}, timeout=RUN_GUARD)
    _refused(proc, ["TMPDIR", str(tmpdir)], work, reports=[report])


# ----------------------------------------------------------------------------
# plugins and drivers


def test_plugin_that_does_not_exist(tmp_path, work):
    p = tmp_path / "none.cmxs"
    _refused(_run(["certify", "--plugin", p, "--list"], work), [str(p)], work)


def test_plugin_that_is_no_cmxs(tmp_path, work):
    p = tmp_path / "x.cmxs"
    p.write_text("this is text, not a plugin\n")
    _refused(_run(["certify", "--plugin", p, "--list"], work), [str(p)], work)


def test_plugin_that_is_a_directory(tmp_path, work):
    p = tmp_path / "d.cmxs"
    p.mkdir()
    _refused(_run(["certify", "--plugin", p, "--list"], work), [str(p)], work)


def test_plugin_that_registers_no_driver(tmp_path, work):  # main.ml; before: accepted silently
    assert NO_DRIVER_PLUGIN.is_file(), f"{NO_DRIVER_PLUGIN} is not built (make build)"
    report = tmp_path / "r.json"
    proc = _run(["certify", "--plugin", NO_DRIVER_PLUGIN, *QUICK, "--report", report], work, timeout=RUN_GUARD)
    _refused(proc, [str(NO_DRIVER_PLUGIN), "no driver"], work, reports=[report])


def test_unknown_driver(work):
    _refused(_run(["certify", "--driver", "nope", "--list"], work), ["nope"], work)


def test_unknown_subcommand(work):
    _refused(_run(["frobnicate"], work), ["frobnicate"], work)


@pytest.mark.parametrize("inject", ["bogus", "alloc:0:fault", "alloc:x:fault", "alloc:1:nokind", ""])
def test_run_with_a_bad_inject(work, inject):
    proc = _run(["run", "--case", "rig.lifecycle", "--seed", "1", "--inject", inject], work)
    _refused(proc, ["--inject"], work)
    assert "DONE" not in _text(proc.stdout).splitlines()


def test_run_injecting_a_function_that_is_no_driver_call(work):  # main.ml
    # Today Fake.inject raises Invalid_argument, uncaught: a backtrace, exit 2.
    proc = _run(["run", "--case", "rig.lifecycle", "--seed", "1", "--inject", "nofn:1:fault"], work)
    _refused(proc, ["--inject", "nofn"], work)


@pytest.mark.parametrize("command", [["list"], ["certify", "--list", "--only", "CNT-1"]], ids=["list", "certify-list"])
def test_listing_a_hostile_file_name_keeps_the_terminal_safe(tmp_path, work, command):  # main.ml
    d = tmp_path / "scn"
    d.mkdir()
    with open(os.fsencode(d) + b"/" + HOSTILE_NAME, "wb") as f:
        f.write(b'scenario "hostile name"\nclauses CNT-1\nopen d0 0\nclose d0\n')
    proc = _run(command, work, env={"RIG_CONFORM_SCENARIOS": str(d)})
    assert proc.returncode == 0, _text(proc.stderr)
    assert b"scn.caf" in proc.stdout
    assert b"\x1b" not in proc.stdout and b"\xc2\x9b" not in proc.stdout, proc.stdout[-2000:]
    proc.stdout.decode("utf-8")


# ----------------------------------------------------------------------------
# selftest --mutant: one mutant's runs, and a name that is no mutant


def test_selftest_unknown_mutant_is_refused(work):  # cmd_selftest.ml
    proc = _run(["selftest", "--mutant", "no-such-mutant"], work)
    _refused(proc, ["no-such-mutant", "mutant"], work)


def test_selftest_one_mutant_runs_only_its_cases(tmp_path, work):  # cmd_selftest.ml
    report = tmp_path / "s.json"
    proc = _run(["selftest", "--mutant", "sleep-word-first", "--report", report], work, timeout=RUN_GUARD)
    assert proc.returncode == 0, _text(proc.stdout) + _text(proc.stderr)
    data = json.loads(report.read_text())
    assert [m["mutant"] for m in data["mutants"]] == ["sleep-word-first"]
    assert data["mutants"][0]["caught"] and data["mutants"][0]["flagged"] == ["TIME-5"]
    assert data["conforming"]["runs"] == 0
