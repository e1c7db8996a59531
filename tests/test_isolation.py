"""Isolation of the certifier from the drivers it runs (issue 13).

The hostile drivers of test_hostile.py try every way of breaking it; these
tests pin the mechanisms themselves: each case's limit comes from the
calibration table, a stop signal writes the report with the right exit code,
a plugin is described by a child and never loaded by the certifier, and what
a case's child writes on stdout is never taken for its records.
"""

import json
import signal
import subprocess

import pytest

from conftest import CERTIFY_TIMEOUT, ROOT, ensure_rig, parse_list, rig

HOSTMEM = ROOT / "_build" / "default" / "drivers" / "hostmem" / "hostmem.cmxs"
TABLE = ROOT / "harness" / "certify" / "case_seconds.tsv"


def test_every_case_has_a_calibrated_limit():
    # A case missing from the table would get the flat 60 s: rerun
    # `rig-conform calibrate` when cases change.
    cases, _ = parse_list()
    calibrated = {l.split("\t")[0] for l in TABLE.read_text().splitlines() if l and not l.startswith("#")}
    assert set(cases) - calibrated == set()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_writes_the_report_and_exits_with_its_code(tmp_path, sig, code):
    report = tmp_path / "r.json"
    proc = subprocess.Popen(
        [ensure_rig(), "certify", "--no-color", "--no-sweep", "--seeds", "20", "-j", "2", "--report", str(report)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # The first progress line: a run has ended.
        for line in proc.stderr:
            if line.startswith("certify: 1/"):
                break
        proc.send_signal(sig)
        proc.communicate(timeout=CERTIFY_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    assert data["runs"], "the runs done before the signal are kept"
    catalog = [l for l in (ROOT / "spec" / "clauses.tsv").read_text().splitlines()[1:] if l.strip()]
    assert len(data["clauses"]) == len(catalog)


def test_describe_names_what_a_plugin_registers():
    proc = rig("describe", "--plugin", HOSTMEM)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"PLUGIN\t{HOSTMEM}\thostmem" in lines
    assert "DRIVER\thostmem\tfalse" in lines
    assert lines[-1] == "DONE"


def test_output_that_looks_like_records_is_not_taken_for_them(tmp_path):
    # The child's stdout carries what the driver prints; its records go on a
    # channel of their own.  A run by hand prints records on stdout: the
    # certifier's child must not.
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--no-color", "--no-sweep", "--seeds", "1", "--only", "STOP-3", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FINDING" not in proc.stdout
    data = json.loads(report.read_text())
    assert data["load_error"] is None
    assert all(r["outcome"] == "pass" for r in data["runs"])


def test_a_plugin_that_is_not_one_is_refused_before_any_case(tmp_path):
    fake = tmp_path / "x.cmxs"
    fake.write_text("not a plugin\n")
    report = tmp_path / "r.json"
    proc = rig("certify", "--plugin", fake, "--driver", "x", "--report", report)
    assert proc.returncode == 2
    assert "x.cmxs" in proc.stderr
    assert not report.exists()
