"""Every conforming blind driver, certified over many seeds: no clause fails.

The blind sets' own tests (tests/test_blind_*.py) certify each driver on
seed 1, in `make test`.  Seeds change what the probes draw (sizes, lengths,
the model's programs), so a conforming driver must also stay clean over
seeds 1..N.  That takes hours on two cores, so it is not part of
`make test`: `make blind-seeds` runs it (RIG_CONFORM_BLIND_SEEDS=N, default
20 there; this file is skipped without it).  Select drivers with
PYTEST_ARGS='-k NAME'.
"""

import importlib
import json
import os
import subprocess

import pytest

from conftest import ROOT, ensure_rig

SEEDS = os.environ.get("RIG_CONFORM_BLIND_SEEDS")

# module of tests/, and the name of its plugin's path in it
SETS = [
    ("test_blind_set", "BLINDSET"),
    ("test_blind_hangs", "BLIND"),
    ("test_blind_seq", "BLINDSEQ"),
    ("test_blind_t6", "BLINDT6"),
    ("test_blind_w", "BLINDW"),
    ("test_blind_s3", "BLINDS3"),
    ("test_blind_cm", "BLINDCM"),
    ("test_blind_c5", "BLINDC5"),
    ("test_blind_q2", "BLINDQ2"),
    ("test_blind_l3", "BLINDL3"),
    ("test_blind_tm", "BLINDTM"),
    ("test_blind_st6", "BLINDST6"),
    ("test_blind_st3", "BLINDST3"),
    ("test_blind_pr", "BLINDPR"),
    ("test_blind_c7", "BLINDC7"),
    ("test_blind_c7r", "BLINDC7R"),
    ("test_blind_c7n", "BLINDC7N"),
    ("test_blind_rf", "BLINDRF"),
    ("test_blind_c7f", "BLINDC7F"),
    ("test_blind_s3b", "BLINDS3B"),
    ("test_blind_sf", "BLINDSF"),
    ("test_blind_c7b", "BLINDC7B"),
    ("test_blind_st8", "BLINDST8"),
    ("test_blind_s3c", "BLINDS3C"),
    ("test_blind_qs", "BLINDQS"),
    ("test_blind_sg", "BLINDSG"),
    ("test_blind_mb", "BLINDMB"),
    ("test_blind_gq", "BLINDGQ"),
    ("test_blind_ts", "BLINDTS"),
    ("test_blind_lk", "BLINDLK"),
    ("test_blind_mc", "BLINDMC"),
    ("test_blind_fw", "BLINDFW"),
    ("test_blind_fx", "BLINDFX"),
    ("test_blind_ld", "BLINDLD"),
    ("test_blind_cl", "BLINDCL"),
    ("test_blind_a2", "BLINDA2"),
    ("test_blind_fn", "BLINDFN"),
    ("test_blind_s3d", "BLINDS3D"),
    ("test_blind_tq", "BLINDTQ"),
    ("test_blind_iv", "BLINDIV"),
    ("test_blind_nj", "BLINDNJ"),
    ("test_blind_bw", "BLINDBW"),
    ("test_blind_cs", "BLINDCS"),
    ("test_blind_hw", "BLINDHW"),
    ("test_blind_lq", "BLINDLQ"),
    ("test_blind_oc", "BLINDOC"),
    ("test_blind_am", "BLINDAM"),
    ("test_blind_sr", "BLINDSR"),
]


def conforming():
    for module, plugin in SETS:
        m = importlib.import_module(module)
        for driver in sorted(m.CONFORMING):
            yield pytest.param(getattr(m, plugin), driver, id=driver)


pytestmark = pytest.mark.skipif(not SEEDS, reason="set RIG_CONFORM_BLIND_SEEDS=N (make blind-seeds)")


@pytest.mark.parametrize("plugin,driver", list(conforming()))
def test_conforming_is_clean_over_seeds(plugin, driver, tmp_path):
    report = tmp_path / f"{driver}.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--plugin", str(plugin), "--driver", driver, "--seeds", SEEDS,
         "-j", os.environ.get("RIG_CONFORM_BLIND_JOBS", "4"), "--no-color", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=6 * 3600,
    )
    assert proc.returncode in (0, 1), f"certify {driver} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    data = json.loads(report.read_text())
    assert not data["interrupted"] and data.get("load_error") is None
    failed = {c["id"]: c for c in data["clauses"] if c["verdict"] == "fail"}
    assert not failed, "\n".join(f"{i}: {c['evidence']}\n  replay: {c.get('repro')}" for i, c in sorted(failed.items()))
