"""Drivers that crash or hang (drivers/crashing): each run ends in a crash or
timeout verdict naming how, the certifier exits 1, and its report still holds
every clause of the catalog with a replay line for each failure.  A hang
fails the clause that bounds the call that hung (a spinning locate LOCK-6's,
a stop that never returns STOP-2's), so --only selects those."""

import json
import os
import subprocess

import pytest

from conftest import CERTIFY_TIMEOUT, CLAUSES_TSV, ROOT, ensure_rig
from test_third_party import build_plugins

PLUGIN = "_build/default/drivers/crashing/crashing.cmxs"

# Each driver, and what the evidence of its failing clauses must say.
DRIVERS = {
    "crashing-segfault": "killed by SIGSEGV",
    "crashing-abort": "killed by SIGABRT",
    "crashing-locate-spins": "did not end within",
    "crashing-stop-hangs": "did not end within",
    "crashing-exit-aborts": "after its end",
}


@pytest.fixture(scope="module")
def plugin():
    build_plugins([PLUGIN])
    return PLUGIN


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_crash_or_a_hang_is_a_verdict_and_the_report_is_whole(plugin, driver, tmp_path):
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--plugin", plugin, "--driver", driver, "--no-sweep", "--no-color",
         "--seeds", "1", "--timeout", "4", "--only", "MEM-2,STOP-2,CNT-1,LOCK-6", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(report.read_text())
    ids = [l.split("\t")[0] for l in CLAUSES_TSV.read_text().splitlines()[1:] if l.strip()]
    assert [c["id"] for c in data["clauses"]] == ids
    fails = [c for c in data["clauses"] if c["verdict"] == "fail"]
    assert fails and all(DRIVERS[driver] in c["evidence"] and c["repro"] for c in fails)


def test_a_crash_that_does_not_come_again_passes_nothing_and_fails_nothing(plugin, tmp_path):
    # crashing-once aborts in the first stop of the whole certification only:
    # that case runs again, cleanly, and its clauses are unchecked.
    report = tmp_path / "r.json"
    env = {**os.environ, "CRASHING_ONCE_MARK": str(tmp_path / "mark")}
    proc = subprocess.run(
        [ensure_rig(), "certify", "--plugin", plugin, "--driver", "crashing-once", "--no-sweep", "--no-color",
         "--seeds", "1", "-j", "1", "--only", "STOP-2,STOP-3", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT, env=env,
    )
    data = json.loads(report.read_text())
    once = [r for r in data["runs"] if r["outcome"] == "crash-once"]
    assert len(once) == 1, proc.stdout[-3000:]
    assert not [r for r in data["runs"] if r["outcome"] == "crash"], proc.stdout[-3000:]
    verdict = {c["id"]: c for c in data["clauses"]}
    crashed = [c for c in verdict.values() if "crashed once" in c["evidence"]]
    assert crashed and all(c["verdict"] == "unchecked" and "killed by SIGABRT in stop" in c["evidence"] for c in crashed)
    assert all(verdict[i]["verdict"] != "fail" for i in ("STOP-2", "STOP-3")), proc.stdout[-3000:]


def test_a_crash_after_a_stop_that_releases_what_rig_made_fails_stop5_only(plugin, tmp_path):
    # crashing-stop-releases frees rig's regions in stop (STOP-5) and aborts
    # at rig's later unload: the flows that stop and unload crash, and those
    # crashes rest on STOP-5's finding, not on their cases' clauses.
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--plugin", plugin, "--driver", "crashing-stop-releases", "--no-sweep",
         "--no-color", "--seeds", "1", "--only", "STOP-5,STOP-1,CNT-4", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert [r for r in data["runs"] if r["outcome"] == "crash"], proc.stdout[-3000:]
    verdict = {c["id"]: c for c in data["clauses"]}
    assert [i for i, c in verdict.items() if c["verdict"] == "fail"] == ["STOP-5"], proc.stdout[-3000:]
    for i in ("STOP-1", "CNT-4"):
        assert verdict[i]["verdict"] == "unchecked", verdict[i]
        assert "STOP-5 finds stop releases what rig made" in verdict[i]["evidence"] and "SIGABRT" in verdict[i]["evidence"], verdict[i]
