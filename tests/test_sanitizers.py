"""The sanitizer runs of mk/sanitize.mk (issue 6).

Each make target already proves its sanitizer can see: `asan-c` requires the
stop-frees-regions mutant to be reported (use after free), `tsan` the
word-race mutant (data race), before they accept a clean run of the
conforming code.  Every subprocess has a timeout; nothing is timed.
"""

import subprocess
from pathlib import Path

import pytest

from conftest import build_lock

ROOT = Path(__file__).resolve().parent.parent


def make(target, timeout):
    with build_lock():
        proc = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def test_asan_c_clean_and_uaf_mutant_reported():
    rc, out = make("asan-c", 600)
    assert rc == 0, out[-4000:]
    assert "asan-real-worker:" in out and "no report" in out
    assert "asan-mutant-uaf: reported:" in out and "heap-use-after-free" in out


def test_tsan_clean_and_race_mutant_reported():
    rc, out = make("tsan", 600)
    assert rc == 0, out[-4000:]
    assert "tsan-mutant-race: reported: WARNING: ThreadSanitizer: data race" in out
    assert "tsan-real-worker:" in out


def test_asan_ocaml_smoke_and_certify_clean():
    rc, out = make("asan-ocaml", 1200)
    assert rc == 0, out[-4000:]
    assert "asan-fake-test: OK, no report" in out
    assert "asan-certify:" in out and "no report" in out
