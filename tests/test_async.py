"""Asynchronous exceptions at every allocation point (ASYNC-1, ASYNC-2) and
calls from a callback (LOCK-5, LOCK-9): the async.* cases and async-sweep.

An injection point is FN:NTH:async@N, the N-th allocation inside the NTH call
of FN; it replays exactly, and the census a plain run prints (CALLS fn#nth)
is the same run after run.
"""

import json

import pytest

from conftest import CERTIFY_TIMEOUT, ROOT, rig

CASE = "async.rig.free-once"


def lines(proc, tag):
    return [l.split("\t")[1:] for l in proc.stdout.splitlines() if l.startswith(tag + "\t")]


def census(case=CASE, *extra):
    proc = rig("run", "--case", case, "--seed", "1", *extra)
    assert "DONE" in proc.stdout.splitlines(), proc.stdout + proc.stderr
    return proc, [(fn, int(n)) for fn, n in lines(proc, "CALLS")]


def test_census_is_deterministic():
    _, first = census()
    _, second = census()
    assert first == second
    assert first, "the census found no allocation inside a driver call"
    assert all("#" in fn and n > 0 for fn, n in first)


def test_plain_run_passes_on_the_conforming_pair():
    proc, _ = census()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines(proc, "FINDING") == []


@pytest.mark.parametrize("mutant,clause", [
    ("unlock-by-hand", "ASYNC-2"),
    ("alloc-in-protect-gap", "ASYNC-2"),
    ("signaled-takes-lock", "LOCK-5"),
    ("signaled-busy", "LOCK-9"),
    ("no-stop-after-async", "ASYNC-1"),
])
def test_mutant_flagged_with_its_clause(mutant, clause):
    proc, _ = census(CASE, "--mutant", mutant)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {f[0] for f in lines(proc, "FINDING")} == {clause}


def replay(point, *extra):
    proc = rig("run", "--case", CASE, "--seed", "1", "--inject", point, *extra)
    assert "DONE" in proc.stdout.splitlines(), proc.stdout + proc.stderr
    return proc.returncode, lines(proc, "FINDING")


def test_replay_of_a_failing_point_gives_the_same_findings_twice():
    # The first point of alloc's first call where the mutant's hand-made
    # unlock is skipped; its replay gives the same findings again.
    _, calls = census(CASE, "--mutant", "unlock-by-hand")
    points = [f"alloc:1:async@{at}" for at in range(1, dict(calls)["alloc#1"] + 1)]
    failing = [(p, r) for p in points for r in [replay(p, "--mutant", "unlock-by-hand")] if r[0] == 1]
    assert failing, f"no point of {points[0]}..{points[-1]} caught the mutant"
    point, first = failing[0]
    assert {f[0] for f in first[1]} == {"ASYNC-2"}, (point, first)
    assert replay(point, "--mutant", "unlock-by-hand") == first


def test_replay_of_every_point_of_one_call_is_clean_and_repeatable():
    _, calls = census()
    n = dict(calls)["alloc#1"]
    for at in range(1, n + 1):
        point = f"alloc:1:async@{at}"
        assert replay(point) == (0, []), point
        assert replay(point) == (0, []), point


def test_async_inject_is_only_for_async_cases():
    proc = rig("run", "--case", "rig.free-once", "--seed", "1", "--inject", "alloc:1:async@1")
    assert proc.returncode == 2
    proc = rig("run", "--case", CASE, "--seed", "1", "--inject", "alloc:1:async@0")
    assert proc.returncode == 2


def test_async_sweep_of_one_scenario_passes(tmp_path):
    report = tmp_path / "async.json"
    proc = rig("async-sweep", "--case", CASE, "-j", "2", "--max-alloc", "8", "--report", report,
               timeout=CERTIFY_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    injected = [r for r in data["runs"] if r["inject"]]
    assert injected and all("async@" in r["inject"] for r in injected)
    verdicts = {c["id"]: c["verdict"] for c in data["clauses"]}
    assert all(verdicts[c] == "pass" for c in ("ASYNC-1", "ASYNC-2", "LOCK-5", "LOCK-9"))


def test_async_sweep_shards_are_disjoint_and_whole(tmp_path):
    def runs(*shard):
        report = tmp_path / f"s{'-'.join(shard) or 'all'}.json".replace("/", "_")
        proc = rig("async-sweep", "--case", CASE, "-j", "2", "--max-alloc", "3", "--report", report, *shard,
                   timeout=CERTIFY_TIMEOUT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return {r["inject"] for r in json.loads(report.read_text())["runs"] if r["inject"]}

    whole = runs()
    parts = [runs("--shard", f"{i}/2") for i in (1, 2)]
    assert parts[0].isdisjoint(parts[1]) and parts[0] | parts[1] == whole


def test_a_signal_at_a_wait_is_a_point_too():
    # The census counts waits ("wait:fn#nth"); a SIGUSR2 at that wait, whose
    # handler raises as the wait ends, is a point like an allocation.
    proc, calls = census("async.rig.fault")
    assert ("wait:sleep#1", 1) in calls, calls
    clean = rig("run", "--case", "async.rig.fault", "--seed", "1", "--inject", "sleep:1:wait@1")
    assert clean.returncode == 0 and "FINDING" not in clean.stdout, clean.stdout
    caught = rig("run", "--case", "async.rig.fault", "--seed", "1", "--inject", "sleep:1:wait@1",
                 "--mutant", "no-stop-after-async")
    assert caught.returncode == 1
    found = lines(caught, "FINDING")
    assert {f[0] for f in found} == {"ASYNC-1"} and "wait 1 of sleep call 1" in found[0][1], found


def test_a_wait_point_below_one_is_refused():
    proc = rig("run", "--case", "async.rig.fault", "--seed", "1", "--inject", "sleep:1:wait@0")
    assert proc.returncode == 2 and "wait@N" in proc.stderr


@pytest.mark.parametrize("mutant", ["unlock-by-hand", "no-stop-after-async"])
def test_batched_async_sweep_gives_each_point_its_own_verdict(mutant, tmp_path):
    # Points share a child (--batch); the first that finds something, and
    # every one after it, runs again alone: the verdicts are those of a
    # process per point, point by point.  unlock-by-hand shows from the 6th
    # allocation of alloc on (the census finds nothing: it only counts).
    def runs(batch):
        report = tmp_path / f"b{batch}.json"
        proc = rig("async-sweep", "--case", CASE, "-j", "2", "--max-alloc", "8", "--mutant", mutant,
                   "--batch", str(batch), "--report", report, timeout=CERTIFY_TIMEOUT)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        return {(r["inject"], r["outcome"], tuple(r["flagged"])) for r in json.loads(report.read_text())["runs"]}

    alone, batched = runs(1), runs(16)
    assert any(flagged for _, _, flagged in alone), alone
    assert batched == alone


def test_async_sweep_refuses_an_unknown_mutant(tmp_path):
    proc = rig("async-sweep", "--case", CASE, "--mutant", "no-such-mutant", "--report", tmp_path / "r.json")
    assert proc.returncode == 2 and "no-such-mutant" in proc.stderr, proc.stdout + proc.stderr
