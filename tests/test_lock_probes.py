"""The lock-discipline and signal probes (harness/probes/lock_probes.ml).

- Each broken driver of drivers/broken whose "Breaks" line names LOCK-4,
  SIG-2, SIG-3 or SIG-8 is flagged, on those clauses, with exactly its own.
- The fake driver and hostmem are clean on every LOCK-* and SIG-* clause over
  seeds 1..3, and the four probed clauses pass (not n/a).

The plugins are built as tests/test_third_party.py builds them.  Every
subprocess runs under a timeout; nothing sleeps or times anything here.
"""

import json
import os
import subprocess

import pytest

from conftest import ROOT, ensure_rig
from test_third_party import BROKEN, HOSTMEM_PLUGIN, build_plugins

CERTIFY_TIMEOUT = 600

PROBED = {"LOCK-4", "SIG-2", "SIG-3", "SIG-8"}
ONLY = ",".join(sorted(PROBED))

MINE = [(n, p, c) for n, p, c in BROKEN if c in PROBED]


@pytest.fixture(scope="module")
def plugins():
    return build_plugins([HOSTMEM_PLUGIN] + [p for _, p, _ in MINE])


def certify(tmp_path, driver, *args):
    """Runs certify; (exit code, {clause id: clause object}, output)."""
    report = tmp_path / f"{driver}.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--driver", driver, "--report", str(report), "--no-color", "--no-sweep", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT,
    )
    assert report.is_file(), f"certify wrote no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    data = json.loads(report.read_text(encoding="utf-8"))
    return proc.returncode, {c["id"]: c for c in data["clauses"]}, proc.stdout + proc.stderr


def failing(clauses):
    return {cid for cid, c in clauses.items() if c["verdict"] == "fail"}


def test_each_probed_clause_has_a_broken_driver():
    assert {c for _, _, c in MINE} == PROBED, MINE


@pytest.mark.parametrize("name,plugin,clause", [pytest.param(n, p, c, id=f"{c}-{n}") for n, p, c in MINE])
def test_broken_flagged_with_exactly_its_clause(plugins, tmp_path, name, plugin, clause):
    code, clauses, out = certify(tmp_path, name, "--plugin", plugin, "--only", ONLY, "--seeds", "3")
    assert failing(clauses) == {clause}, out
    assert code == 1, out
    assert clauses[clause].get("repro"), clauses[clause]


@pytest.mark.parametrize("driver", ["fake", "hostmem"])
def test_conforming_drivers_clean(plugins, tmp_path, driver):
    extra = ["--plugin", HOSTMEM_PLUGIN] if driver == "hostmem" else []
    code, clauses, out = certify(tmp_path, driver, *extra, "--only", "LOCK-*,SIG-*", "--seeds", "3")
    assert failing(clauses) == set(), out
    assert code == 0, out
    for cid in sorted(PROBED):
        assert clauses[cid]["verdict"] == "pass", f"{cid}: {clauses[cid]}"


SIG3_CASE = "probe.SIG-3.wait-releases-runtime"


# what each measure's finding says, and the environment that selects it
SIG3_MEASURES = {
    "hooks": ({}, "held the OCaml runtime inside its waits"),
    "schedstat": ({"RIG_CONFORM_SIG3_COUNTER": "1"}, "waited for the runtime"),
    "proxies": ({"RIG_CONFORM_SIG3_PROXIES": "1"}, "OCaml thread"),
}


@pytest.mark.parametrize("measure", sorted(SIG3_MEASURES))
@pytest.mark.parametrize("mutant", [None, "sleep-keeps-runtime", "sleep-keeps-runtime-late"])
def test_sig3_each_measure(measure, mutant):
    """SIG-3 is judged on the sleeping thread's own hold of the runtime
    inside its waits (the runtime's blocking-section hooks) where the edge
    notes it; else, on another thread's waits for the runtime (the kernel's
    per-thread figures) where they can be read, and on its turns and
    pauses elsewhere: each path flags the fake's kept-runtime mutants and
    passes the conforming fake."""
    extra, says = SIG3_MEASURES[measure]
    chosen = ("RIG_CONFORM_SIG3_COUNTER", "RIG_CONFORM_SIG3_PROXIES")
    env = {k: v for k, v in os.environ.items() if k not in chosen}
    env.update(extra)
    args = [ensure_rig(), "run", "--case", SIG3_CASE, "--seed", "1"] + (["--mutant", mutant] if mutant else [])
    # A mutant is judged on the first of three runs that flags it: on a
    # machine loaded by the whole suite, the proxies (turns and pauses of
    # another OCaml thread) missed sleep-keeps-runtime-late once in a CI
    # rehearsal (caught 8 of 8 alone).  The conforming fake gets one run.
    for _ in range(3 if mutant else 1):
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT, env=env)
        if proc.returncode == (1 if mutant else 0):
            break
    assert proc.returncode == (1 if mutant else 0) and "DONE" in proc.stdout, proc.stdout + proc.stderr
    found = [l.split("\t")[1] for l in proc.stdout.splitlines() if l.startswith("FINDING\t")]
    assert found == ([] if mutant is None else ["SIG-3"]), proc.stdout
    if mutant:
        assert says in proc.stdout, proc.stdout
