"""Command-line behaviour of rig-conform.

* usage errors (unknown clause ID, bad flag, --seeds 0, unknown subcommand,
  unknown case, unknown mutant, run without --case/--seed): exit 2 and a
  message on stderr that names the culprit;
* the JSON report of `certify --only 'STOP-*'`: valid JSON, one entry per row
  of spec/clauses.tsv in its order, verdicts from the documented set, the
  selected clauses with a case pass, the others unchecked because of --only;
* the full report (`certify --seeds 1`): a clause that no case checks is never
  "pass", every clause a case checks passes on the conforming pair;
* `rig-conform list` names only clauses of the catalog;
* replay: a mutant's run, typed as certify's replay line, gives the same
  flagged clauses twice (one rig-side, one driver-side and the GUAR-7 mutant).
"""

import json
import shlex

import pytest

from conftest import (
    CERTIFY_TIMEOUT,
    catalog,
    checked_clauses,
    parse_list,
    parse_run_output,
    replay_args,
    rig,
)

VERDICTS = {"pass", "fail", "n/a", "unchecked"}


def _usage_error(proc, needle):
    assert proc.returncode == 2, f"exit {proc.returncode}, stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert needle in proc.stderr, f"stderr does not name {needle!r}:\n{proc.stderr}"
    assert "FINDING" not in proc.stdout and "DONE" not in proc.stdout.splitlines()


def _a_case():
    cases, _ = parse_list()
    return next(iter(cases))


# ----------------------------------------------------------------------------
# usage errors


def test_certify_unknown_clause(tmp_path):
    _usage_error(rig("certify", "--only", "NOPE-1", "--seeds", "1", "--report", tmp_path / "r.json"), "NOPE-1")
    assert not (tmp_path / "r.json").exists()


def test_certify_unknown_clause_among_known(tmp_path):
    _usage_error(rig("certify", "--only", "STOP-3,NOPE-1", "--seeds", "1", "--report", tmp_path / "r.json"), "NOPE-1")


def test_certify_bad_flag(tmp_path):
    _usage_error(rig("certify", "--frobnicate", "--report", tmp_path / "r.json"), "--frobnicate")


@pytest.mark.parametrize("seeds", ["0", "-1", "x"])
def test_certify_bad_seeds(tmp_path, seeds):
    proc = rig("certify", "--seeds", seeds, "--report", tmp_path / "r.json")
    _usage_error(proc, "--seeds")


def test_unknown_subcommand():
    _usage_error(rig("frobnicate"), "frobnicate")


def test_run_unknown_case():
    _usage_error(rig("run", "--case", "no.such.case", "--seed", "1"), "no.such.case")


def test_run_unknown_mutant():
    _usage_error(rig("run", "--case", _a_case(), "--seed", "1", "--mutant", "no-such-mutant"), "no-such-mutant")


def test_run_needs_seed():
    _usage_error(rig("run", "--case", _a_case()), "--seed")


def test_run_needs_case():
    _usage_error(rig("run", "--seed", "1"), "--case")


# ----------------------------------------------------------------------------
# list


def test_list_names_catalog_clauses():
    cases, mutants = parse_list()
    ids = {cid for cid, _ in catalog()}
    unknown = {c for cl in cases.values() for c in cl} - ids
    assert not unknown, f"`list` cases name clauses not in spec/clauses.tsv: {sorted(unknown)}"
    unknown = {c for _, c, _ in mutants} - ids
    assert not unknown, f"`list` mutants name clauses not in spec/clauses.tsv: {sorted(unknown)}"
    names = [m for m, _, _ in mutants]
    assert len(names) == len(set(names)), "mutant names repeat"


# ----------------------------------------------------------------------------
# reports


def _certify(tmp_path, *args):
    report = tmp_path / "r.json"
    proc = rig("certify", "--no-sweep", *args, "--report", report, timeout=CERTIFY_TIMEOUT)
    assert report.is_file(), f"no report at {report}; exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    with open(report, encoding="utf-8") as f:
        data = json.load(f)
    return proc, data


def _check_shape(data):
    assert data["driver"] == "fake"
    rows = catalog()
    entries = data["clauses"]
    assert [e["id"] for e in entries] == [cid for cid, _ in rows], "report clauses differ from spec/clauses.tsv"
    for e, (_, side) in zip(entries, rows):
        assert e["verdict"] in VERDICTS, e
        assert e.get("side") == side, e
        assert isinstance(e.get("evidence"), str) and e["evidence"], e
        if e["verdict"] != "fail":
            assert "repro" not in e, e
    return {e["id"]: e for e in entries}


def test_certify_only_stop(tmp_path):
    proc, data = _certify(tmp_path, "--only", "STOP-*", "--seeds", "1")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert data["seeds"] == [1]
    by_id = _check_shape(data)
    checked = checked_clauses()
    stop = [cid for cid in by_id if cid.startswith("STOP-")]
    assert stop, "the catalog has no STOP-* clause"
    for cid, e in by_id.items():
        if cid.startswith("STOP-") and cid in checked:
            assert e["verdict"] == "pass", e
        elif not cid.startswith("STOP-"):
            assert e["verdict"] == "unchecked", e
            assert "--only" in e["evidence"], e
        else:
            assert e["verdict"] != "pass", e


def test_certify_full_report(tmp_path):
    proc, data = _certify(tmp_path, "--seeds", "1")
    by_id = _check_shape(data)
    checked = checked_clauses()
    wrong = {cid: e["verdict"] for cid, e in by_id.items() if cid not in checked and e["verdict"] == "pass"}
    assert not wrong, f"clauses no case checks are reported pass: {wrong}"
    # The conforming pair: every clause a case checks passes, nothing fails.
    failing = {cid: e for cid, e in by_id.items() if cid in checked and e["verdict"] != "pass"}
    assert not failing, f"clauses checked by a case do not pass on the conforming pair: {failing}"
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"


# ----------------------------------------------------------------------------
# replay


def _pick_mutants():
    """Three distinct mutants: rig-side (CNT-1 preferred), driver-side (STOP-3
    preferred) and the one for GUAR-7."""
    _, mutants = parse_list()

    def pick(pred, prefer, taken):
        pool = [m for m in mutants if pred(m) and m[0] not in taken]
        for m in pool:
            if m[1] == prefer:
                return m
        return pool[0] if pool else None

    chosen = []
    for pred, prefer in (
        (lambda m: m[1] == "GUAR-7", "GUAR-7"),
        (lambda m: m[2] == "rig", "CNT-1"),
        (lambda m: m[2] == "driver", "STOP-3"),
    ):
        m = pick(pred, prefer, {c[0] for c in chosen})
        if m is not None:
            chosen.append(m)
    return [pytest.param(*m, id=f"{m[1]}-{m[0]}") for m in chosen]


@pytest.mark.parametrize(("mutant", "clause", "side"), _pick_mutants())
def test_replay_deterministic(mutant, clause, side):
    cases, _ = parse_list()

    def replayed(case):
        line = shlex.join(["rig-conform", *replay_args(case, 1, mutant)])
        proc = rig(*shlex.split(line)[1:])
        flagged, lines = parse_run_output(proc.stdout)
        assert lines and lines[-1] == "DONE", f"{line}: {proc.stdout}\n{proc.stderr}"
        return line, (proc.returncode, flagged)

    # The first case of the clause that shows the mutant, replayed again.
    shown = [r for r in (replayed(name) for name, cl in cases.items() if clause in cl) if r[1][0] == 1]
    assert shown, f"no case of {clause} flags {mutant}"
    line, first = shown[0]
    again = rig(*shlex.split(line)[1:])
    assert (again.returncode, parse_run_output(again.stdout)[0]) == first, f"{line}: two runs disagree"
    assert first == (1, {clause}), f"{line}: {first}"


def test_replay_of_a_hang_ends_naming_the_call_and_its_clause():
    # The fake's prepare-oom-stuck: an entry that waits for good (CODE-6).
    # Replayed by hand, run watches its case as certify does: past entry's
    # call limit (30 s) the case is killed and the hang is reported, rather
    # than a process that waits for ever and, every thread blocked in the
    # driver, ignores SIGTERM.
    proc = rig("run", "--case", "probe.CODE-6.prepare-silent", "--seed", "1", "--mutant", "prepare-oom-stuck", timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    hung = proc.stdout.splitlines()[-1].split("\t")
    assert (hung[0], hung[1], hung[3]) == ("HUNG", "entry", "CODE-6"), proc.stdout
    assert "entry did not return" in proc.stderr and "CODE-6" in proc.stderr, proc.stderr
