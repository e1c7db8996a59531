"""How the certifier judges driver calls that do not return, or return slowly.

The drivers are drivers/blind/ (one plugin, blind.cmxs): hostmem with one
behaviour changed each.  The expectations were read off the document
(spec/rig_edge_driver.txt) alone, before running the certifier, and are not
fitted to its output.

Broken drivers: the clauses whose verdict is `fail` must be exactly the one
below (other clauses may be `unchecked`: runs ended by the hang are blocked).

| driver                | what it does                                     | clause | the sentence of the document it breaks |
|-----------------------|--------------------------------------------------|--------|----------------------------------------|
| blind-sleep-forever   | sleep ignores still_ms while the word stays      | TIME-4 (and TIME-5, below) | "sleep d ~seen ~still_ms blocks ... until the word differs from seen, and must return, or raise Fault, at the latest after still_ms milliseconds." |
| blind-stop-forever    | stop, with work running, waits on a condition    | STOP-2 | "stop d ~fault stops the lost d and must not wait for its work." |
|                       | nobody signals                                   |        |                                        |
| blind-signaled-blocks | signaled waits for the word to change            | TIME-1 | "rig may call it while it holds a lock of its own, so it must not block or call rig." |
| blind-locate-sleeps   | locate sleeps for ever                           | LOCK-6 | "rig calls locate and peer at any time, and they must call nothing that may block or fault." |
| blind-stop-drains     | stop lets the running work finish (up to 2 s)    | STOP-2 | "stop d ~fault stops the lost d and must not wait for its work." |
| blind-stop-drains-briefly | the same, up to 1 s (blind-stop-cleanup's time) | STOP-2 | "stop d ~fault stops the lost d and must not wait for its work." |

Conforming drivers: every clause's verdict must be hostmem's, under the same
options.  Why each is conforming:

| driver               | what it does                          | the document's words that allow it |
|----------------------|---------------------------------------|------------------------------------|
| blind-make-slow      | an opener's make waits 3 s, prints    | nothing bounds make; it checks rig_holds and blocks signals "for their whole run", its 3 s in a wait (Rig_edge_primitives.wait) |
| blind-image-slow     | image waits 4 s, prints               | "image d b takes the binary b, or is Error why if d refuses it. Counted." (no bound) |
| blind-sleep-spurious | sleep returns after 1 ms if still_ms > 1 | "It may return earlier, on an event of other work or a timer of the driver's own, since rig reads the word again after every return and sleeps again while it is unmoved." |
| blind-stop-cleanup   | hostmem's stop, then 1 s of cleanup   | stop "must not wait for its work": it does not (the work is stopped first, and the word written "before stop returns"); nothing else bounds stop |
| blind-alloc-slow     | alloc waits 200 ms a call             | "alloc d m n is n bytes of d's memory m, or None if d has none." (no bound) |
"""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, ensure_rig
from test_blind_set import hostmem  # noqa: F401 (a fixture: hostmem's verdicts, once per test run)

BLIND = ROOT / "_build" / "default" / "drivers" / "blind" / "blind.cmxs"

# Only a guard against a hung certifier: no verdict depends on it.
HANG_GUARD = 600

# A clause or a set of them: blind-sleep-forever also breaks TIME-5, which
# its author did not mean ("sleep raises Fault once the device has
# faulted"): its sleep returns on a word that differs from seen without
# looking for a fault (probe.TIME-5.fault-sticks shows it).
BROKEN = {
    "blind-sleep-forever": {"TIME-4", "TIME-5"},
    "blind-stop-forever": "STOP-2",
    "blind-signaled-blocks": "TIME-1",
    "blind-locate-sleeps": "LOCK-6",
    "blind-stop-drains": "STOP-2",
    "blind-stop-drains-briefly": "STOP-2",
}

CONFORMING = [
    "blind-make-slow",
    "blind-image-slow",
    "blind-sleep-spurious",
    "blind-stop-cleanup",
    "blind-alloc-slow",
]


def certify(plugin: Path, driver: str, tmp: Path) -> dict:
    if not plugin.is_file():
        pytest.fail(f"{plugin} is missing: run `dune build` first")
    report = tmp / f"{driver}.json"
    proc = subprocess.run(
        [
            ensure_rig(),
            "certify",
            "--plugin", str(plugin),
            "--driver", driver,
            "--seeds", "1",
            "--no-color",
            "--report", str(report),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert proc.returncode in (0, 1), f"certify {driver} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    data = json.loads(report.read_text())
    assert data["format"] == "rig-conform-report/1"
    assert data["driver"] == driver
    assert not data["interrupted"]
    assert data.get("load_error") is None, data.get("load_error")
    # The exit code says whether a clause failed (docs/report-format.md).
    failed = any(c["verdict"] == "fail" for c in data["clauses"])
    assert proc.returncode == (1 if failed else 0), proc.stdout
    return data


def verdicts(data: dict) -> dict:
    return {c["id"]: c["verdict"] for c in data["clauses"]}


def explain(data: dict, ids) -> str:
    by_id = {c["id"]: c for c in data["clauses"]}
    return "\n".join(f"{i} {by_id[i]['verdict']}: {by_id[i]['evidence']}" for i in sorted(ids))


@pytest.mark.parametrize(
    "driver",
    sorted(BROKEN),
)
def test_broken_fails_exactly_its_clause(driver, tmp_path):
    data = certify(BLIND, driver, tmp_path)
    failed = {i for i, v in verdicts(data).items() if v == "fail"}
    expected = BROKEN[driver] if isinstance(BROKEN[driver], set) else {BROKEN[driver]}
    assert failed == expected, explain(data, failed | expected)


@pytest.mark.parametrize("driver", CONFORMING)
def test_conforming_gets_hostmems_verdicts(driver, hostmem, tmp_path):
    data = certify(BLIND, driver, tmp_path)
    mine, theirs = verdicts(data), verdicts(hostmem)
    assert mine.keys() == theirs.keys()
    differ = {i for i in mine if mine[i] != theirs[i]}
    assert not differ, "verdicts that differ from hostmem's:\n" + explain(data, differ)
