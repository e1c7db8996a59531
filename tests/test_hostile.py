"""Hostile drivers (drivers/hostile, issue 13): nothing a driver does may
forge, hide or lose a verdict, leave a process behind or make a run
unbounded.

For every hostile driver, certify must write a whole, valid report (valid
UTF-8 JSON, one entry per row of spec/clauses.tsv, `interrupted` false, a
JUnit file that parses), and no process the driver started may be alive
after certify has exited.  Beyond that, each driver is in one of these kinds:

- FAILS: it misbehaves (dies, exits, never answers, forges the protocol,
  signals its own process group...): exit 1, every selected clause `fail`
  (none forged into a pass), the others `unchecked`; when it died or hung in
  a driver call, the evidence names that call's function.
- LOAD_FAILS: the plugin dies, exits, hangs or raises while it is loaded:
  exit 1, every clause `fail` with "load" in its evidence, and a string
  `load_error` in the report.
- SAME: what it does is not a violation (printing, even forged lines and
  512 MiB; its own stdout and stderr; a chdir): hostmem's exit code and
  hostmem's verdict for every clause.
- NO_BETTER: it tampers with descriptors or leaves processes, which the
  certifier may or may not see: each clause is `fail` or hostmem's verdict,
  never a pass that hostmem does not get.

A replay (`run`, by hand) of a driver that forks leaves nothing running
either.  Then: the certifier stays under 400 MiB while a child floods it; SIGINT and
SIGTERM (with a plugin that installs handlers of its own) write the report of
what was done, crash verdicts kept, and exit 130 / 143; a plugin that
registers no driver is refused (exit 2, naming it) before any case runs.

Each certify runs in a session of its own (a driver signals its process
group), under a Python parent that records the largest resident set of the
certifier and its children, with its output in files (a driver's forked
children keep pipes open).  The guards are hang guards, not speed checks.
"""

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections import namedtuple

import pytest

from conftest import ROOT, catalog, ensure_rig
from test_third_party import build_plugins

HOSTILE = "_build/default/drivers/hostile/hostile.cmxs"
LOAD = "_build/default/drivers/hostile/hostile_load.cmxs"
NONE = "_build/default/drivers/hostile/hostile_none.cmxs"
HOSTMEM = "_build/default/drivers/hostmem/hostmem.cmxs"

GUARD = 60        # one certification of a few cases, or of all at --seeds 1
FULL_GUARD = 300  # one certification at the defaults (issue 13: <= 5 minutes)
MAX_RSS_KIB = 400 * 1024
IDS = [cid for cid, _ in catalog()]

# Runs the certifier (argv[2:]) and writes the largest resident set, in KiB,
# of it and of its children to argv[1].  Its SIGINT and SIGTERM handlers do
# nothing (and, unlike SIG_IGN, do not pass to the certifier): a driver that
# signals its process group must not take this parent down.
MEASURE = r"""
import os, resource, signal, subprocess, sys
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda *_: None)
os.environ["HOSTILE_SPARE_PID"] = str(os.getpid())
code = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code if code >= 0 else 128 - code)
"""

Run = namedtuple("Run", "code report stdout stderr path max_rss_kib alive")


@pytest.fixture(scope="module")
def plugins():
    build_plugins([HOSTILE, LOAD, NONE, HOSTMEM])


@pytest.fixture
def piddir(tmp_path):
    """$HOSTILE_PIDDIR: where hostile processes leave their pids.  Whatever
    is still alive at the end is killed, so that a failing test leaves
    nothing running either."""
    d = tmp_path / "pids"
    d.mkdir()
    yield d
    for pid in pids_in(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def pids_in(d):
    """The pids recorded in `d` that are still hostile processes of this
    test.  Most have ended, and with pid_max at 32768 a busy suite soon
    gives their numbers to other tests' processes (a SIGKILL to a recorded
    number once ended a hostmem certification's child): a process counts
    only while its environment names `d`."""
    mark = f"HOSTILE_PIDDIR={d}".encode()
    def ours(pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return mark in f.read().split(b"\0")
        except OSError:
            return False
    return [pid for pid in recorded(d) if ours(pid)]


def recorded(d):
    """Every pid a hostile process left in `d`, ended or not."""
    return [int(f.name[len("pid."):]) for f in d.glob("pid.*")]


def alive(d, grace=2.0):
    """The pids of `d` still running (a zombie does not count), each given
    `grace` seconds to end (pidfd: no polling)."""
    left = []
    for pid in pids_in(d):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        except OSError:
            # ENOENT or EINVAL: the number is now a thread's of another
            # process (reused meanwhile, seen under load), or it is a process
            # pidfd_open refuses, which /proc then shows running.
            if tgid(pid) == pid and proc_state(pid) not in ("Z", None):
                left.append(pid)
            continue
        try:
            ended, _, _ = select.select([fd], [], [], grace)
        finally:
            os.close(fd)
        if not ended and proc_state(pid) not in ("Z", None):
            left.append(pid)
    return left


def tgid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(l.split()[1]) for l in f if l.startswith("Tgid:")), None)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def certify(tmp_path, piddir, plugin, driver, *args, load=None, guard=GUARD, cwd=ROOT, report=None):
    """Runs `certify` for `driver` of `plugin`; a Run.  `report` (default
    tmp_path/r.json) may be relative to `cwd`, as may `plugin`."""
    report = report or str(tmp_path / "r.json")
    env = {**os.environ, "NO_COLOR": "1", "HOSTILE_PIDDIR": str(piddir)}
    env.pop("HOSTILE_LOAD", None)
    if load is not None:
        env["HOSTILE_LOAD"] = load
    argv = [ensure_rig(), "certify", "--no-color", "--report", report, *args]
    if plugin is not None:
        argv[2:2] = ["--plugin", plugin]
    if driver is not None:
        argv[2:2] = ["--driver", driver]
    rss = tmp_path / "rss"
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-c", MEASURE, str(rss), *argv], cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=o, stderr=e, start_new_session=True)
        try:
            code = proc.wait(timeout=guard)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    stdout, stderr = tail(out), tail(err)
    out.unlink()  # a flood's copy may be large
    assert code is not None, f"certify did not end within {guard} s\n{stdout}\n{stderr}"
    path = cwd / report if not os.path.isabs(report) else report
    data = read_report(path)
    max_rss = int(rss.read_text()) if rss.exists() else None
    return Run(code, data, stdout, stderr, path, max_rss, alive(piddir))


def tail(path, n=1200):
    data = path.read_bytes()
    return data[-n:].decode("utf-8", "replace")


def read_report(path):
    """The report, read strictly (valid UTF-8, valid JSON), or None."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        data = f.read()
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError too
        pytest.fail(f"{path} is not valid UTF-8 JSON: {e}")


def assert_whole(run, interrupted=False):
    """A whole, valid report: every clause once, in the catalog's order; its
    JUnit file parses; no hostile process alive."""
    why = f"exit {run.code}\n{run.stdout}\n{run.stderr}"
    assert run.report is not None, f"no report at {run.path}; " + why
    assert [c["id"] for c in run.report["clauses"]] == IDS, why
    assert run.report["interrupted"] is interrupted, why
    ET.parse(os.path.splitext(run.path)[0] + ".xml")
    assert not run.alive, f"still running after certify: {run.alive}"


def verdicts(run):
    return {c["id"]: c["verdict"] for c in run.report["clauses"]}


def clause(run, cid):
    return next(c for c in run.report["clauses"] if c["id"] == cid)


def names_call(evidence, fn):
    """Whether the evidence names the function `fn`, case names aside
    (probe.TIME-4.bounded-sleep does not name sleep)."""
    text = re.sub(r"\b(probe|edge|rig|scn|async)\.[\w.-]+", " ", evidence)
    return re.search(rf"\b{re.escape(fn)}\b", text) is not None


def selected(only):
    return set(only.split(",")) if only else set(IDS)


@pytest.fixture(scope="module")
def hostmem(plugins, tmp_path_factory):
    """hostmem's verdicts over every case at --seeds 1 (the reference of SAME
    and NO_BETTER)."""
    tmp = tmp_path_factory.mktemp("hostmem")
    (tmp / "pids").mkdir()
    run = certify(tmp, tmp / "pids", HOSTMEM, "hostmem", "--seeds", "1")
    assert run.code == 0, run.stdout
    return verdicts(run)


# ----------------------------------------------------------------- FAILS

# The clauses whose cases make the call of each phase (make and atexit: any
# case, it opens a device).
PHASE_ONLY = {"make": "MEM-2", "alloc": "MEM-2", "submit": "STOP-2", "commit": "STOP-2",
              "sleep": "TIME-4", "stop": "STOP-2", "atexit": "MEM-2"}
WAYS = ["segv", "abort", "exit0", "exit3", "_exit", "loop", "block"]
AT_EXIT_WAYS = ["segv", "abort", "exit3", "loop", "block"]

# (id, plugin, driver, HOSTILE_LOAD, --only, the call the evidence must name,
# --timeout: short, for the drivers that hang)
Hostile = namedtuple("Hostile", "id plugin driver load only call timeout", defaults=("3",))


def phase_drivers():
    for phase, only in PHASE_ONLY.items():
        for way in AT_EXIT_WAYS if phase == "atexit" else WAYS:
            call = None if phase == "atexit" else phase
            yield Hostile(f"{phase}-{way}", HOSTILE, f"hostile-{phase}-{way}", None, only, call)


FAILS = [
    *phase_drivers(),
    Hostile("forge-make", HOSTILE, "hostile-forge-make", None, "MEM-2,STOP-2,TIME-4", None),
    Hostile("forge-alloc", HOSTILE, "hostile-forge-alloc", None, "MEM-2", None),
    Hostile("forge-done", HOSTILE, "hostile-forge-done", None, "MEM-2,STOP-2,TIME-4", None),
    Hostile("forge-na", HOSTILE, "hostile-forge-na", None, "MEM-2,STOP-2,TIME-4", None),
    # probe.STOP-3.running waits 3 s for the word: not a hang.
    Hostile("partial-line-hides-stop-3", HOSTILE, "hostile-partial-hides", None, "STOP-3", None, "30"),
    Hostile("flood-stderr", HOSTILE, "hostile-alloc-flood-stderr", None, "MEM-2", "alloc"),
    Hostile("sigstop", HOSTILE, "hostile-alloc-sigstop", None, "MEM-2", "alloc"),
    Hostile("kill-group-int", HOSTILE, "hostile-alloc-kill-group-int", None, "MEM-2", None),
    Hostile("kill-group-term", HOSTILE, "hostile-alloc-kill-group-term", None, "MEM-2", None),
    Hostile("sigterm-ignored-hang", HOSTILE, "hostile-sigterm-ignored-alloc-block", None, "MEM-2", "alloc"),
    Hostile("raise-bad-bytes", HOSTILE, "hostile-alloc-raise-bytes", None, "MEM-2", None),
    Hostile("bad-bytes-segv", HOSTILE, "hostile-alloc-bytes-segv", None, "MEM-2", "alloc"),
]


@pytest.mark.parametrize("h", [pytest.param(h, id=h.id) for h in FAILS])
def test_a_misbehaving_driver_fails_its_cases(plugins, tmp_path, piddir, h):
    run = certify(tmp_path, piddir, h.plugin, h.driver, "--only", h.only, "--seeds", "1", "--timeout", h.timeout,
                  load=h.load)
    assert_whole(run)
    assert run.code == 1, run.stdout
    chosen = selected(h.only)
    got = verdicts(run)
    assert {c: v for c, v in got.items() if c in chosen} == {c: "fail" for c in chosen}
    assert {c: v for c, v in got.items() if c not in chosen} == {c: "unchecked" for c in IDS if c not in chosen}
    if h.call:
        for c in chosen:
            assert names_call(clause(run, c)["evidence"], h.call), clause(run, c)["evidence"]


@pytest.mark.parametrize("way", ["atexit-hang", "atexit-abort"])
def test_an_exit_handler_of_the_plugin_gets_no_pass(plugins, tmp_path, piddir, way):
    # Registered as the plugin loads: it runs wherever the plugin is loaded,
    # and never in the certifier.  Whether that is the load's failure (every
    # clause) or the cases' (those selected) is the certifier's choice.
    run = certify(tmp_path, piddir, LOAD, "hostile-load", "--only", "MEM-2", "--seeds", "1", "--timeout", "3",
                  load=way)
    assert_whole(run)
    assert run.code == 1
    assert verdicts(run)["MEM-2"] == "fail"
    assert "pass" not in verdicts(run).values()


# ------------------------------------------------------------ LOAD_FAILS


@pytest.mark.parametrize("way", WAYS + ["raise"])
def test_a_plugin_that_fails_to_load_fails_every_clause(plugins, tmp_path, piddir, way):
    run = certify(tmp_path, piddir, LOAD, "hostile-load", "--seeds", "1", "--timeout", "3", load=way)
    assert_whole(run)
    assert run.code == 1, run.stdout + run.stderr
    assert isinstance(run.report.get("load_error"), str) and run.report["load_error"]
    for c in run.report["clauses"]:
        assert c["verdict"] == "fail" and "load" in c["evidence"], c


# ------------------------------------------------------------------ SAME

SAME = [
    Hostile("chatty", HOSTILE, "hostile-chatty", None, None, None),
    Hostile("dup2-null", HOSTILE, "hostile-make-dup2-null", None, None, None),
    Hostile("flood-stdout-512MiB", HOSTILE, "hostile-alloc-flood-stdout", None, "MEM-2", None),
    Hostile("load-none", LOAD, "hostile-load", "none", None, None),
    Hostile("load-forging-thread", LOAD, "hostile-load", "thread", None, None),
]


def assert_same_as_hostmem(run, hostmem, only):
    chosen = selected(only)
    want = {c: (v if c in chosen else "unchecked") for c, v in hostmem.items()}
    assert verdicts(run) == want, run.stdout
    assert run.code == (1 if "fail" in want.values() else 0)


@pytest.mark.parametrize("h", [pytest.param(h, id=h.id) for h in SAME])
def test_printing_is_no_violation(plugins, hostmem, tmp_path, piddir, h):
    args = ["--seeds", "1"] + (["--only", h.only, "--timeout", "30"] if h.only else [])
    run = certify(tmp_path, piddir, h.plugin, h.driver, *args, load=h.load)
    assert_whole(run)
    assert_same_as_hostmem(run, hostmem, h.only)


# 512 MiB on stdout (then hostmem), an endless stream on stderr (a hang).
@pytest.mark.parametrize("driver,timeout", [("hostile-alloc-flood-stdout", "30"), ("hostile-alloc-flood-stderr", "5")])
def test_a_flood_keeps_the_certifier_small(plugins, tmp_path, piddir, driver, timeout):
    run = certify(tmp_path, piddir, HOSTILE, driver, "--only", "MEM-2", "--seeds", "1", "--timeout", timeout)
    assert_whole(run)
    assert run.max_rss_kib < MAX_RSS_KIB, f"{run.max_rss_kib} KiB"


@pytest.mark.parametrize("h", [
    pytest.param(Hostile("load-chdir", LOAD, "hostile-load", "chdir", None, None), id="load-chdir"),
    pytest.param(Hostile("make-chdir", HOSTILE, "hostile-make-chdir", None, None, None), id="make-chdir"),
])
def test_a_chdir_moves_neither_the_report_nor_the_cases(plugins, hostmem, tmp_path, piddir, h):
    start = tmp_path / "start"
    start.mkdir()
    plugin = os.path.relpath(ROOT / h.plugin, start)
    run = certify(tmp_path, piddir, plugin, h.driver, "--seeds", "1", load=h.load, cwd=start,
                  report="out/r.json")
    assert run.path == start / "out" / "r.json"
    assert_whole(run)
    assert_same_as_hostmem(run, hostmem, None)


# ------------------------------------------------------------- NO_BETTER

NO_BETTER = [
    Hostile("close-fds", HOSTILE, "hostile-make-close-fds", None, "MEM-2,STOP-2,TIME-4", None),
    Hostile("garbage-fds", HOSTILE, "hostile-make-garbage-fds", None, "MEM-2,STOP-2,TIME-4", None),
    Hostile("fork", HOSTILE, "hostile-make-fork", None, "MEM-2,STOP-2,TIME-4", None),
    Hostile("double-fork-setsid", HOSTILE, "hostile-make-double-fork", None, "MEM-2,STOP-2,TIME-4", None),
    Hostile("load-fork", LOAD, "hostile-load", "fork", "MEM-2", None),
    # A stop signal to the certifier: it may ignore it or fail the case, but
    # it must not stop (the report would say interrupted).
    Hostile("kill-parent-term", HOSTILE, "hostile-alloc-kill-parent-term", None, "MEM-2", None),
    Hostile("kill-parent-int", HOSTILE, "hostile-alloc-kill-parent-int", None, "MEM-2", None),
]


@pytest.mark.parametrize("h", [pytest.param(h, id=h.id) for h in NO_BETTER])
def test_tampering_earns_no_verdict_hostmem_does_not_get(plugins, hostmem, tmp_path, piddir, h):
    run = certify(tmp_path, piddir, h.plugin, h.driver, "--only", h.only, "--seeds", "1", load=h.load)
    assert recorded(piddir), "the driver did nothing hostile"
    assert_whole(run)
    chosen, got = selected(h.only), verdicts(run)
    for c in IDS:
        want = ("fail", hostmem[c]) if c in chosen else ("unchecked",)
        assert got[c] in want, (c, got[c], clause(run, c)["evidence"])
    assert run.code == (1 if "fail" in got.values() else 0)


# ---------------------------------------------------------- the defaults


def test_a_stop_that_never_returns_is_bounded_at_the_defaults(plugins, tmp_path, piddir):
    run = certify(tmp_path, piddir, HOSTILE, "hostile-stop-block", guard=FULL_GUARD)
    assert_whole(run)
    assert run.code == 1
    stop2 = clause(run, "STOP-2")
    assert stop2["verdict"] == "fail" and names_call(stop2["evidence"], "stop"), stop2


def test_forks_at_the_defaults_leave_nothing_behind(plugins, tmp_path, piddir):
    run = certify(tmp_path, piddir, HOSTILE, "hostile-make-fork", guard=FULL_GUARD)
    assert recorded(piddir), "the driver forked nothing"
    assert_whole(run)


@pytest.mark.parametrize("driver", ["hostile-make-fork", "hostile-make-double-fork"])
def test_a_replay_leaves_nothing_behind(plugins, tmp_path, piddir, driver):
    """`run`, the replay line a user runs by hand, ends what the driver
    forked, also a double fork into a session of its own."""
    env = {**os.environ, "NO_COLOR": "1", "HOSTILE_PIDDIR": str(piddir)}
    env.pop("HOSTILE_LOAD", None)
    # Output in files: a forked child left running would keep pipes open.
    with open(tmp_path / "out", "w") as out:
        proc = subprocess.run(
            [ensure_rig(), "run", "--plugin", HOSTILE, "--driver", driver, "--case", "rig.lifecycle", "--seed", "1"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=GUARD,
            start_new_session=True,
        )
    assert proc.returncode in (0, 1), (tmp_path / "out").read_text()
    assert recorded(piddir), "the driver forked nothing"
    assert not alive(piddir), f"left running after run ended: {alive(piddir)}"


# --------------------------------------------------------------- signals


def start(tmp_path, piddir, *args, load):
    env = {**os.environ, "NO_COLOR": "1", "HOSTILE_PIDDIR": str(piddir), "HOSTILE_LOAD": load,
           "HOSTILE_SPARE_PID": str(os.getpid())}
    return subprocess.Popen([ensure_rig(), "certify", "--no-color", *args], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def wait_for_a_run(proc):
    """Reads stderr until a progress line counts at least one run done;
    stdout is drained meanwhile.  Answers what was read."""
    out = []
    threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True).start()
    seen = []
    for line in iter(proc.stderr.readline, b""):
        seen.append(line.decode("utf-8", "replace"))
        m = re.search(r"(\d+)/\d+ runs", seen[-1])
        if m and int(m.group(1)) >= 1:
            return seen
    pytest.fail("certify ended without a progress line:\n" + "".join(seen))


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interruption_keeps_the_crash_it_saw(plugins, tmp_path, piddir, sig, code):
    # Both its SIGINT and SIGTERM handlers do nothing; its first alloc dies of
    # SIGSEGV, its second never returns, the others are hostmem's: the crash
    # is the first run to end, and the hang keeps the run going.
    report = tmp_path / "r.json"
    proc = start(tmp_path, piddir, "--plugin", LOAD, "--driver", "hostile-crash-then-hang", "--only", "MEM-2",
                 "--seeds", "100", "-j", "2", "--timeout", "300", "--report", str(report),
                 load="signal-handlers")
    guard = threading.Timer(GUARD, lambda: os.killpg(proc.pid, signal.SIGKILL))
    guard.start()
    try:
        wait_for_a_run(proc)
        proc.send_signal(sig)
        got = proc.wait()
    finally:
        guard.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run = Run(got, read_report(report), "", "", str(report), None, alive(piddir))
    assert got == code
    assert_whole(run, interrupted=True)
    # The crashed run ran again, without the crash (the token was gone):
    # MEM-2 is then unchecked, the crash in its evidence; had the second
    # run not ended, the crash would stand as MEM-2's fail.
    mem2 = clause(run, "MEM-2")
    assert mem2["verdict"] in ("fail", "unchecked") and "killed by SIGSEGV in alloc" in mem2["evidence"], mem2


# -------------------------------------------------------- no driver at all


@pytest.mark.parametrize("driver", ["hostile-none", None], ids=["named", "default-driver"])
def test_a_plugin_that_registers_no_driver_is_refused(plugins, tmp_path, piddir, driver):
    run = certify(tmp_path, piddir, NONE, driver, "--only", "MEM-2", "--seeds", "1")
    assert run.code == 2, run.stdout + run.stderr
    assert "hostile_none.cmxs" in run.stderr
    assert run.report is None
    assert "certifying" not in run.stdout
