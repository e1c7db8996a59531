"""A driver outside this tree, built and certified as docs/writing-a-driver.md
("Outside this tree") says: `make install PREFIX=...`, then a project of its
own holding a copy of hostmem's sources, the `dune` file the page shows (read
from the page itself, so that the page cannot drift from what works), and the
environment it gives.  The installed rig-cert, run from that project, must
load the plugin, find its bundled scenarios there (not in the current folder)
and certify a few clauses.
"""

import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, build_lock

DOC = ROOT / "docs" / "writing-a-driver.md"
TIMEOUT = 900


def section(text, title):
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def code_blocks(text):
    """The fenced blocks of a Markdown text, as (language, body)."""
    blocks, lang, body = [], None, []
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, "".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def the_dune_file():
    """The first plain code block of the section that starts with (library."""
    blocks = code_blocks(section(DOC.read_text(encoding="utf-8"), "Outside this tree"))
    files = [b for lang, b in blocks if lang == "" and b.startswith("(library")]
    assert files, "docs/writing-a-driver.md, Outside this tree, shows no dune file"
    return files[0]


def run(cmd, cwd, env=None):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("prefix")
    with build_lock():
        code, out = run(["make", "-s", "install", f"PREFIX={prefix}"], ROOT)
    assert code == 0, out
    return prefix


def test_install_lays_out_what_the_page_names(installed):
    for rel in ["bin/rig-conform", "bin/rig-cert", "include/rig_edge.h", "lib/pkgconfig/rig_edge.pc",
                "lib/rig_conform/META"]:
        assert (installed / rel).exists(), rel
    shipped = sorted(p.name for p in (installed / "share/rig-conform/scenarios").glob("*.scn"))
    assert shipped == sorted(p.name for p in (ROOT / "scenarios").glob("*.scn"))


def test_driver_outside_the_tree(installed, tmp_path):
    project = tmp_path / "my-driver"
    project.mkdir()
    for f in ["hostmem.ml", "hostmem.mli", "hostmem_plugin.ml", "hostmem_stubs.c"]:
        shutil.copy(ROOT / "drivers" / "hostmem" / f, project / f)
    (project / "dune-project").write_text("(lang dune 2.9)\n")
    (project / "dune").write_text(the_dune_file())
    # A scenarios folder of the project's own must not be read.
    (project / "scenarios").mkdir()
    (project / "scenarios" / "not-rig-conform.scn").write_text("this is not a scenario\n")

    ocaml_bin = subprocess.run(["./tools/setup.sh"], cwd=ROOT, capture_output=True, text=True,
                               timeout=TIMEOUT).stdout.strip().splitlines()[-1]
    env = {k: v for k, v in os.environ.items() if k not in ("OCAMLPATH", "RIG_CONFORM_SCENARIOS")}
    env["PATH"] = f"{ocaml_bin}:{env['PATH']}"
    env["OCAMLPATH"] = f"{installed}/lib:{ocaml_bin}/../lib/ocaml"
    env["PKG_CONFIG_PATH"] = f"{installed}/lib/pkgconfig"

    code, out = run(["dune", "build", "./my_driver.cmxs"], project, env)
    assert code == 0, out
    plugin = "_build/default/my_driver.cmxs"
    cert = str(installed / "bin" / "rig-cert")

    code, out = run([cert, "list", "--plugin", plugin, "--driver", "hostmem"], project, env)
    assert code == 0, out
    assert re.search(r"^\s+scn\.\S+", out, re.M), "the installed rig-cert found no bundled scenario:\n" + out

    code, out = run([cert, "certify", "--plugin", plugin, "--driver", "hostmem", "--only", "CNT-1,STOP-2",
                     "--seed", "1", "--report", "out/rig.json", "--no-color"], project, env)
    assert code == 0, out
    assert "scn.reopen-by-name" in out, out
    assert (project / "out" / "rig.json").is_file() and (project / "out" / "rig.xml").is_file()
