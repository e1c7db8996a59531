"""Drivers written as a third party would: certified from their plugins.

- drivers/hostmem: a conforming driver whose device is the host.  certify over
  seeds 1..3 must exit 0 with no clause failing, and every driver-side clause
  a probe checks must pass (not come out n/a) except those its kit cannot
  offer (no bus: MEM-8..MEM-11).  Over seeds 1..20 (without the sweeps)
  nothing fails.
- drivers/broken: hostmem with one function replaced, each breaking one
  clause (named by the "Breaks CLAUSE" line of its source).  certify must exit
  1 and fail exactly that clause.

The plugins are built here with `dune build` of their .cmxs targets, with the
OCaml that tools/setup.sh names (as the Makefile does).
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, build_lock, ensure_rig, parse_list

BUILD_TIMEOUT = 1800
CERTIFY_TIMEOUT = 600

HOSTMEM_PLUGIN = "_build/default/drivers/hostmem/hostmem.cmxs"
BROKEN_DIR = ROOT / "drivers" / "broken"

# Driver-side clauses hostmem cannot show: it has no bus (MEM-8..MEM-11: no
# bus function, no bus agent) and no finaliser (SIG-7).
HOSTMEM_NA = {"MEM-8", "MEM-9", "MEM-10", "MEM-11", "SIG-7"}


def broken_drivers():
    """[(registered name, plugin path, clause)] from drivers/broken/*.ml."""
    found = []
    for src in sorted(BROKEN_DIR.glob("broken_*.ml")):
        text = src.read_text(encoding="utf-8")
        name = re.search(r'let name = "([^"]+)"', text)
        clause = re.search(r"Breaks\s+([A-Z]+-[0-9]+)", text)
        assert name and clause, f"{src}: no `let name = ...` or no `Breaks CLAUSE` line"
        plugin = f"_build/default/drivers/broken/{src.stem}.cmxs"
        found.append((name.group(1), plugin, clause.group(1)))
    return found


BROKEN = broken_drivers()

def ocaml_env():
    proc = subprocess.run(
        ["./tools/setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )
    assert proc.returncode == 0, f"tools/setup.sh failed:\n{proc.stderr[-3000:]}"
    bin_dir = proc.stdout.strip().splitlines()[-1]
    env = dict(os.environ)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["OCAMLPATH"] = str((Path(bin_dir) / ".." / "lib" / "ocaml").resolve())
    return env


def build_plugins(paths):
    """Builds the plugins at `paths` (as _build/default/...) with the OCaml
    tools/setup.sh names; answers the paths relative to _build/default."""
    ensure_rig()
    targets = [t.replace("_build/default/", "", 1) for t in paths]
    with build_lock():
        proc = subprocess.run(
            ["dune", "build", *targets],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            env=ocaml_env(),
        )
    assert proc.returncode == 0, f"dune build of the plugins failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    return targets


@pytest.fixture(scope="module")
def plugins():
    """Builds the plugins; the paths that exist afterwards."""
    return build_plugins([HOSTMEM_PLUGIN] + [p for _, p, _ in BROKEN])


def certify(plugin, driver, tmp_path, *args):
    """Runs certify; (exit code, {clause id: clause object}, stdout)."""
    report = tmp_path / f"{driver}.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--plugin", plugin, "--driver", driver, "--report", str(report),
         "--no-color", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CERTIFY_TIMEOUT,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert report.is_file(), f"certify wrote no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["driver"] == driver
    return proc.returncode, {c["id"]: c for c in data["clauses"]}, proc.stdout + proc.stderr


def failing(clauses):
    return {cid for cid, c in clauses.items() if c["verdict"] == "fail"}


def test_broken_drivers_found():
    assert len(BROKEN) >= 7
    names = [n for n, _, _ in BROKEN]
    assert len(set(names)) == len(names), names


def test_plugins_load(plugins):
    """Each plugin loads alone and registers its driver."""
    for name, plugin, _ in [("hostmem", HOSTMEM_PLUGIN, None)] + BROKEN:
        proc = subprocess.run(
            [ensure_rig(), "list", "--plugin", plugin, "--driver", name],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 0, f"{plugin}: {proc.stderr}"


def test_hostmem_certifies(plugins, tmp_path):
    code, clauses, out = certify(HOSTMEM_PLUGIN, "hostmem", tmp_path, "--seeds", "3")
    assert failing(clauses) == set(), out
    assert code == 0, out
    # Every driver-side clause a probe checks passes, but those the kit
    # cannot offer: hostmem must not slip through as n/a.
    cases, _ = parse_list()
    probed = {c for name, cs in cases.items() if name.startswith("probe.") for c in cs}
    for cid in sorted(probed - HOSTMEM_NA):
        assert clauses[cid]["verdict"] == "pass", f"{cid}: {clauses[cid]}"
    for cid in HOSTMEM_NA:
        assert clauses[cid]["verdict"] == "n/a", f"{cid}: {clauses[cid]}"


def test_list_marks_what_needs_the_fakes_knobs(plugins):
    """certify --list runs nothing, names every clause, and marks the cases
    that will be n/a for a driver that is not the fake."""
    proc = subprocess.run(
        [ensure_rig(), "certify", "--list", "--plugin", HOSTMEM_PLUGIN, "--driver", "hostmem", "--no-color"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = {l.split()[0]: l for l in proc.stdout.splitlines() if re.match(r"^[A-Z]+-\d+ ", l)}
    catalog = re.findall(r"^([A-Z]+-\d+)\t", (ROOT / "spec" / "clauses.tsv").read_text(encoding="utf-8"), re.M)
    assert sorted(lines) == sorted(catalog), proc.stdout
    assert "rig.c-call-in-flight(n/a)" in lines["CNT-3"], lines["CNT-3"]
    assert "(n/a)" not in lines["STOP-2"], lines["STOP-2"]


def test_hostmem_passes_twenty_seeds(plugins, tmp_path):
    """No false positive on the second conforming driver over 20 seeds of
    every case but the sweeps (seed-independent, run by the test above)."""
    code, clauses, out = certify(HOSTMEM_PLUGIN, "hostmem", tmp_path, "--seeds", "20", "--no-sweep")
    assert failing(clauses) == set(), out
    assert code == 0, out


@pytest.mark.parametrize(
    "name,plugin,clause",
    [
        pytest.param(n, p, c, id=f"{c}-{n}")
        for n, p, c in BROKEN
    ],
)
def test_broken_flagged_with_its_clause(plugins, tmp_path, name, plugin, clause):
    code, clauses, out = certify(plugin, name, tmp_path, "--seed", "1")
    assert failing(clauses) == {clause}, out
    assert code == 1, out
    assert clauses[clause].get("repro"), clauses[clause]


def test_kit_more_reaches_its_case_and_is_optional(plugins):
    """An item of Rig_edge.kit_more given at registration reaches the case
    that needs it (hostmem's refused_launch: probe.STOP-3.failed-submit runs
    and passes), and a package registered without ~more, as every package
    written before kit_more, still loads and gets that case n/a, naming the
    item."""
    def run(plugin, driver):
        proc = subprocess.run(
            [ensure_rig(), "run", "--plugin", plugin, "--driver", driver, "--case", "probe.STOP-3.failed-submit",
             "--seed", "1"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        return proc.returncode, proc.stdout.splitlines()

    code, lines = run(HOSTMEM_PLUGIN, "hostmem")
    assert code == 0 and lines == ["DONE"], lines
    name, plugin, _ = next(b for b in BROKEN if b[2] == "STOP-3")
    code, lines = run(plugin, name)
    assert code == 0, lines
    assert any(l.startswith("NA\t") and "refused_launch" in l for l in lines), lines
