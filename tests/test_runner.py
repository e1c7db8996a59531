"""The runner: shards, -j, time limits, Ctrl-C, malformed scenarios, sweeps.

Certify and sweep spread runs over processes and machines; these tests check
that how they are spread changes nothing, that a case over its time limit is
a verdict (with a replay line) and not the runner's hang, that an interrupted
run still writes its report, and that bad scenario files are refused.
"""

import json
import os
import signal
import subprocess

from conftest import CERTIFY_TIMEOUT, ROOT, ensure_rig, rig


def certify(tmp_path, name, *args, env=None):
    report = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [ensure_rig(), "certify", "--no-color", "--no-sweep", "--report", str(report), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT, env=env,
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return proc, data


def runs_of(data):
    return {(r["case"], r["seed"], r["inject"]): (r["outcome"], tuple(r["flagged"])) for r in data["runs"]}


def verdicts_of(data):
    return {c["id"]: c["verdict"] for c in data["clauses"]}


def test_shards_together_are_the_whole_run(tmp_path):
    only = ["--only", "STOP-*,CNT-1,MEM-5", "--seeds", "2", "-j", "2"]
    _, whole = certify(tmp_path, "whole", *only)
    parts = [certify(tmp_path, f"shard{i}", *only, "--shard", f"{i}/3")[1] for i in (1, 2, 3)]
    keys = [set(runs_of(p)) for p in parts]
    assert keys[0].isdisjoint(keys[1]) and keys[0].isdisjoint(keys[2]) and keys[1].isdisjoint(keys[2])
    joined = {}
    for p in parts:
        joined.update(runs_of(p))
    assert joined == runs_of(whole)


def test_results_do_not_depend_on_j(tmp_path):
    only = ["--only", "CODE-*,QUEUE-*", "--seeds", "2"]
    one_proc, one = certify(tmp_path, "j1", *only, "-j", "1")
    two_proc, two = certify(tmp_path, "j2", *only, "-j", "2")
    assert one_proc.returncode == two_proc.returncode == 0
    assert verdicts_of(one) == verdicts_of(two)
    assert runs_of(one) == runs_of(two)


def test_a_case_over_its_time_limit_with_no_call_hung_is_not_judged(tmp_path):
    # rig.hang-bound waits out the scenarios' hang bound (1 s): 0.05 s is too
    # short, and no driver call hangs: slow is no violation, and no pass.
    # (With 0.2 s, model.rig, 0.11-0.18 s, sometimes printed its end just as
    # its limit came and was judged an exit that hung; the runner now gives
    # such a run a second to exit.)
    proc, data = certify(tmp_path, "timeout", "--only", "GUAR-7", "--seeds", "1", "--timeout", "0.05")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    guar7 = next(c for c in data["clauses"] if c["id"] == "GUAR-7")
    assert guar7["verdict"] == "unchecked"
    assert "too slow to judge" in guar7["evidence"]
    timeouts = [r for r in data["runs"] if r["outcome"] == "timeout"]
    assert timeouts and all(r["flagged"] == [] for r in timeouts)


def test_ctrl_c_writes_the_report_of_what_was_done(tmp_path):
    report = tmp_path / "interrupted.json"
    proc = subprocess.Popen(
        [ensure_rig(), "certify", "--no-color", "--no-sweep", "--seeds", "20", "-j", "2", "--report", str(report)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first = proc.stdout.readline()  # "certifying driver ...": the runs have started
        assert first.startswith("certifying driver")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=CERTIFY_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    assert len(data["clauses"]) == len(verdicts_of(data))
    assert all(c["verdict"] != "pass" or c["evidence"] for c in data["clauses"])


def test_a_malformed_scenario_is_refused_with_its_position(tmp_path):
    (tmp_path / "bad.scn").write_text('scenario "bad"\nclauses CNT-1\nopen d0\n')
    env = dict(os.environ, RIG_CONFORM_SCENARIOS=str(tmp_path))
    proc = subprocess.run([ensure_rig(), "list"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert f"{tmp_path}/bad.scn:3:" in proc.stderr


def test_a_scenario_naming_an_unknown_clause_is_refused(tmp_path):
    (tmp_path / "unknown.scn").write_text('scenario "x"\nclauses NOPE-9\nopen d0 0\nclose d0\n')
    env = dict(os.environ, RIG_CONFORM_SCENARIOS=str(tmp_path))
    proc = subprocess.run([ensure_rig(), "list"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "NOPE-9" in proc.stderr


def test_a_sweep_shard_passes_and_reports(tmp_path):
    report = tmp_path / "sweep.json"
    proc = rig("sweep", "--only", "EXC-1", "--shard", "1/4", "-j", "2", "--no-color", "--report", str(report),
               timeout=CERTIFY_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-2000:]
    data = json.loads(report.read_text())
    assert any(r["inject"] for r in data["runs"])
    assert all(r["outcome"] in ("pass", "n/a") for r in data["runs"])


def test_an_injection_replays_the_same_findings():
    # A rig mutant under an injected failure: the same line twice, the same result.
    args = ["run", "--case", "rig.free-once", "--seed", "1", "--mutant", "double-free", "--inject", "unload:1:raise"]
    first, second = rig(*args), rig(*args)
    assert first.returncode == second.returncode
    findings = lambda p: sorted(l for l in p.stdout.splitlines() if l.startswith("FINDING"))
    assert findings(first) == findings(second) and findings(first)


def test_certify_with_its_sweep_shards_join_too(tmp_path):
    only = ["--only", "EXC-1,MEM-6", "--seeds", "1", "-j", "2"]
    def run(name, *extra):
        report = tmp_path / f"{name}.json"
        proc = subprocess.run([ensure_rig(), "certify", "--no-color", "--report", str(report), *only, *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT)
        assert proc.returncode == 0, proc.stdout[-2000:]
        return runs_of(json.loads(report.read_text()))
    whole = run("whole")
    assert any(key[2] for key in whole), "certify ran no injected run"
    parts = [run(f"s{i}", "--shard", f"{i}/2") for i in (1, 2)]
    assert set(parts[0]).isdisjoint(parts[1])
    assert {**parts[0], **parts[1]} == whole


def test_junit_and_markdown_reports_hold_every_clause(tmp_path):
    import xml.etree.ElementTree as ET
    proc, data = certify(tmp_path, "formats", "--only", "CODE-*", "--seeds", "1")
    assert proc.returncode == 0
    ids = [c["id"] for c in data["clauses"]]
    suite = ET.parse(tmp_path / "formats.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ids
    skipped = [c.get("name") for c in cases if c.find("skipped") is not None]
    assert skipped == [c["id"] for c in data["clauses"] if c["verdict"] in ("n/a", "unchecked")]
    assert int(suite.get("tests")) == len(ids) and int(suite.get("failures")) == 0
    rows = [l for l in (tmp_path / "formats.md").read_text().splitlines() if l.startswith("| ") and "---" not in l]
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == ids


def test_a_random_fault_plan_is_drawn_again_from_its_seed(tmp_path):
    def plan(name):
        report = tmp_path / f"{name}.json"
        proc = rig("sweep", "--only", "EXC-*,GUAR-1", "--random", "15", "--seed", "7", "-j", "2", "--no-color",
                   "--report", str(report), timeout=CERTIFY_TIMEOUT)
        assert proc.returncode == 0, proc.stdout[-2000:]
        return sorted((r["case"], r["inject"]) for r in json.loads(report.read_text())["runs"] if r["inject"])
    first = plan("a")
    assert len(first) == 15
    assert first == plan("b")


def test_failure_answers_are_swept_and_pass_on_the_conforming_pair(tmp_path):
    # The sweep answers the failure each function may answer (None, Error,
    # No_memory, Short, an early return, RIG_GROW), not only exceptions.
    report = tmp_path / "answers.json"
    proc = rig("sweep", "--only", "CODE-4,QUEUE-6", "-j", "2", "--no-color", "--report", str(report),
               timeout=CERTIFY_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    kinds = {r["inject"].split(":")[0] + ":" + r["inject"].split(":")[2]
             for r in json.loads(report.read_text())["runs"] if r["inject"]}
    assert {"alloc:none", "entry:no_memory", "grow:short", "room:grow"} <= kinds, sorted(kinds)


def test_an_answer_for_the_wrong_function_is_refused():
    proc = rig("run", "--case", "rig.grow-rounds", "--seed", "1", "--inject", "alloc:1:short")
    assert proc.returncode == 2
    assert "short is the answer of grow, not of alloc" in proc.stderr


def test_a_rig_bug_shown_only_under_an_answer_replays():
    # After a fourth grow answered Grown, a rig that asks grow again when
    # room answers RIG_GROW anew: only a room answering RIG_GROW shows it.
    args = ["run", "--case", "rig.grow-rounds", "--seed", "1", "--mutant", "grown-unbounded"]
    plain = rig(*args)
    assert plain.returncode == 0, plain.stdout
    under = rig(*args, "--inject", "room:6:grow")
    assert under.returncode == 1
    assert [l.split("\t")[1] for l in under.stdout.splitlines() if l.startswith("FINDING")] == ["QUEUE-6"]


def test_batched_points_give_what_a_process_per_point_gives(tmp_path):
    # A child runs several points of one scenario in turn (--batch): the
    # verdict of every point is the one its own process gives.
    def points(name, *extra):
        report = tmp_path / f"{name}.json"
        proc = rig("sweep", "--only", "QUEUE-6,EXC-1", "-j", "2", "--no-color", "--report", str(report), *extra,
                   timeout=CERTIFY_TIMEOUT)
        assert proc.returncode == 0, proc.stdout[-2000:]
        return {(r["case"], r["inject"]): (r["outcome"], tuple(r["flagged"]))
                for r in json.loads(report.read_text())["runs"] if r["inject"]}
    batched, alone = points("batched", "--batch", "64"), points("alone", "--batch", "1")
    assert batched == alone
    assert len(batched) > 200


def test_a_batch_run_prints_each_point_after_its_point_line():
    proc = rig("run", "--case", "rig.grow-rounds", "--seed", "1", "--mutant", "grown-unbounded",
               "--inject", "room:6:grow", "--inject", "alloc:1:none", "--inject", "room:6:grow")
    assert proc.returncode == 1
    out = proc.stdout.splitlines()
    marks = [i for i, l in enumerate(out) if l.startswith("POINT\t")]
    assert [out[i] for i in marks] == ["POINT\troom:6:grow", "POINT\talloc:1:none", "POINT\troom:6:grow"]
    segment = lambda k: out[marks[k]:(marks[k + 1] if k + 1 < len(marks) else len(out))]
    flagged = [sorted({l.split("\t")[1] for l in segment(k) if l.startswith("FINDING")}) for k in range(3)]
    assert flagged == [["QUEUE-6"], [], ["QUEUE-6"]]
    assert all("DONE" in segment(k) for k in range(3))


def crowded_and_alone(tmp_path, plugin_set, driver, only):
    """A certification of a broken driver at -j 1 with every run crowded
    (RIG_CONFORM_CROWD=always), then one that never runs more than -j: both
    must fail."""
    plugin = ROOT / "_build" / "default" / "drivers" / plugin_set / f"{plugin_set}.cmxs"
    args = ["--plugin", str(plugin), "--driver", driver, "--only", only, "-j", "1"]
    crowded = certify(tmp_path, "crowded", *args, env={**os.environ, "RIG_CONFORM_CROWD": "always"})
    alone = certify(tmp_path, "alone", *args, env={**os.environ, "RIG_CONFORM_OVERCOMMIT": "1"})
    assert crowded[0].returncode == alone[0].returncode == 1, crowded[0].stdout[-2000:]
    return crowded, alone


def test_timings_found_by_runs_beside_more_than_j_are_run_again_alone(tmp_path):
    # Beyond -j, children start while the cores idle; a run that had more
    # beside it than -j and found a timing runs again at the end with no
    # more beside it, and that run's verdict stands.  RIG_CONFORM_CROWD=always
    # crowds every run, idle cores or not.  The driver: a blind one whose
    # peer sleeps 250 ms (LOCK-6, judged on the time it slept).
    (crowded_proc, crowded), (alone_proc, alone) = crowded_and_alone(tmp_path, "blindlk", "lk-peer-waits-link", "LOCK-6")
    again = [l for l in crowded_proc.stderr.splitlines() if "found something and ran again" in l]
    assert len(again) == 1 and " 0 found it again" not in again[0], crowded_proc.stderr
    assert "ran again" not in alone_proc.stderr
    assert verdicts_of(crowded) == verdicts_of(alone)
    assert verdicts_of(crowded)["LOCK-6"] == "fail"
    assert runs_of(crowded) == runs_of(alone)


def test_values_found_by_runs_beside_more_than_j_stand_as_found(tmp_path):
    # A finding that is no timing (here a lock that signaled takes, counted
    # by the edge: LOCK-5) no load makes a conforming driver show: the
    # crowded run's verdict stands, with no second run (a bug that shows at
    # some runs only would be lost to one).
    (crowded_proc, crowded), (alone_proc, alone) = crowded_and_alone(tmp_path, "blindset", "bs-signaled-trylock", "LOCK-*")
    assert "ran again" not in crowded_proc.stderr, crowded_proc.stderr
    assert "found only values a driver showed, not timings" in crowded_proc.stderr, crowded_proc.stderr
    assert verdicts_of(crowded) == verdicts_of(alone)
    assert verdicts_of(crowded)["LOCK-5"] == "fail"
    assert runs_of(crowded) == runs_of(alone)


def test_a_self_test_never_runs_beyond_j(tmp_path):
    # Its mutants find something in nearly every run: crowding would only
    # run them twice.
    proc = subprocess.run(
        [ensure_rig(), "selftest", "--mutant", "stop-twice", "--seeds", "1", "-j", "1", "--no-color",
         "--report", str(tmp_path / "s.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT,
        env={**os.environ, "RIG_CONFORM_CROWD": "always"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ran again" not in proc.stderr


def test_verdicts_do_not_change_when_every_run_is_crowded(tmp_path):
    only = ["--only", "CODE-*,QUEUE-*,STOP-*", "--seeds", "2", "-j", "1"]
    crowded_proc, crowded = certify(tmp_path, "crowded", *only, env={**os.environ, "RIG_CONFORM_CROWD": "always"})
    alone_proc, alone = certify(tmp_path, "alone", *only, env={**os.environ, "RIG_CONFORM_OVERCOMMIT": "1"})
    assert crowded_proc.returncode == alone_proc.returncode == 0, crowded_proc.stdout[-2000:]
    assert verdicts_of(crowded) == verdicts_of(alone)
    assert runs_of(crowded) == runs_of(alone)


def test_children_copied_from_the_zygote_give_what_executed_children_give(tmp_path):
    # Children are copies of a zygote that loaded no driver; executed anew
    # (RIG_CONFORM_ZYGOTE=off) they must give the same runs, outcomes and
    # flags, on the fake and on a plugin's broken driver (LOCK-5).
    plugin = ROOT / "_build" / "default" / "drivers" / "blindset" / "blindset.cmxs"
    for name, only in [
        ("fake", ["--only", "SIG-*,STOP-*,TIME-*", "--seeds", "2", "-j", "2"]),
        ("blind", ["--plugin", str(plugin), "--driver", "bs-signaled-trylock", "--only", "LOCK-*", "-j", "2"]),
    ]:
        copied_proc, copied = certify(tmp_path, f"{name}-copied", *only)
        executed_proc, executed = certify(tmp_path, f"{name}-executed", *only, env={**os.environ, "RIG_CONFORM_ZYGOTE": "off"})
        assert copied_proc.returncode == executed_proc.returncode, copied_proc.stdout[-2000:]
        assert verdicts_of(copied) == verdicts_of(executed)
        assert runs_of(copied) == runs_of(executed)
