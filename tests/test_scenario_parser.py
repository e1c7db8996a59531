"""The scenario language's parser (harness/scenario/scn_parse.c) and its
OCaml binding (Scenario_syntax, through scn_check.exe).

* a tiny C driver, compiled here with gcc (under ASan/UBSan when the
  toolchain has them), parses a file and prints its statements or the
  error; it exits 0 (parsed) or 3 (error), anything else is a crash;
* valid scenarios parse, into the statements and typed arguments expected;
* each malformed input gives `FILE:LINE:COL: expected ..., found ...` at the
  right line and column (unknown verb, bad key, missing argument, unclosed
  string, undeclared name, wrong sort, duplicate name, `=>` after spawn,
  huge line, NUL bytes, binary garbage, the limits, ...);
* hypothesis: random bytes, and random lines of the language's own words
  after a valid header, never crash or hang the parser and always end in
  success or an error with that prefix, within the input;
* the example of docs/scenario-language.md parses;
* the OCaml binding: header split off, arguments typed, the same errors,
  an unreadable file is an error.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import build_lock

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "harness" / "scenario"
SCN_CHECK = ROOT / "_build" / "default" / "harness" / "scenario" / "scn_check.exe"
TIMEOUT = 20
BUILD_TIMEOUT = 1800

DRIVER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "scn_parse.h"
/* scn_driver PATH NAME: parses PATH (bytes), naming it NAME in errors. */
int main(int argc, char **argv) {
  if (argc != 3) return 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 2;
  size_t cap = 1 << 16, n = 0, r;
  char *buf = malloc(cap);
  while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return 2;
  struct scn_script *s;
  char err[1024];
  if (scn_parse(argv[2], buf, n, &s, err, sizeof err)) {
    printf("%s\n", err);
    free(buf);
    return 3;
  }
  free(buf); /* the script must not point into the input */
  for (int i = 0; i < s->nstmts; i++) {
    const struct scn_stmt *t = &s->stmts[i];
    printf("%d:%d %s", t->line, t->col, t->verb);
    for (int j = 0; j < t->nargs; j++) {
      const struct scn_arg *a = &t->args[j];
      switch (a->kind) {
      case SCN_WORD: printf(" W:%s", a->text); break;
      case SCN_INT: printf(" I:%lld", a->ival); break;
      case SCN_STRING:
        printf(" S:");
        for (size_t k = 0; k < a->len; k++) printf("%02x", (unsigned char)a->text[k]);
        break;
      case SCN_SEP: printf(" ;"); break;
      case SCN_KV: printf(" K:%s=%s", a->key, a->text); break;
      }
    }
    if (t->expect) printf(" => %s", t->expect);
    printf("\n");
  }
  scn_free(s);
  return 0;
}
"""

ERR_RE = re.compile(r"^(?P<file>[^\n]*?):(?P<line>\d+):(?P<col>\d+): (?P<msg>expected .*, found .*)$")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.fail("gcc is needed to build the parser's test driver")
    d = tmp_path_factory.mktemp("scn_driver")
    (d / "driver.c").write_text(DRIVER_C)
    exe = d / "scn_driver"
    base = ["gcc", "-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{SRC}",
            str(d / "driver.c"), str(SRC / "scn_parse.c"), "-o", str(exe)]
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    proc = subprocess.run(base[:1] + san + base[1:], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT)
    if proc.returncode != 0:  # no sanitizer runtime: build it plain
        proc = subprocess.run(base, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return exe


def run_driver(exe, data: bytes, tmp_path, name="t.scn"):
    path = tmp_path / "input.scn"
    path.write_bytes(data)
    env = {**os.environ, "ASAN_OPTIONS": "exitcode=99:detect_leaks=1",
           "UBSAN_OPTIONS": "halt_on_error=1:exitcode=98"}
    proc = subprocess.run([str(exe), str(path), name], capture_output=True,
                          timeout=TIMEOUT, env=env)
    assert proc.returncode in (0, 3), (
        f"driver crashed (exit {proc.returncode}) on {data[:200]!r}:\n"
        f"{proc.stdout.decode(errors='replace')}{proc.stderr.decode(errors='replace')[-3000:]}")
    return proc.returncode, proc.stdout.decode("utf-8", errors="replace")


def check_verdict(exe, data, tmp_path):
    """Success, or one error line FILE:LINE:COL within the input."""
    rc, out = run_driver(exe, data, tmp_path, name="rand.scn")
    if rc == 0:
        return rc, out
    m = ERR_RE.match(out.rstrip("\n"))
    assert m, f"not a file:line:col error: {out!r} for {data[:200]!r}"
    assert m["file"] == "rand.scn"
    line, col = int(m["line"]), int(m["col"])
    assert 1 <= line <= data.count(b"\n") + 1
    assert 1 <= col <= 4097
    return rc, out


HEAD = 'scenario "s"\nclauses CNT-1\n'
FAKE = 'scenario "s"\nclauses CNT-1\nneeds fake\n'

FULL = r'''scenario "a readable name"   # every verb once
clauses CNT-6 STOP-1 MEM-11a
needs fake

configure device_bytes=65536 maps_host=false queue_slots=0x10
inject alloc 1 fault "why"
inject grow 2 raise "text\t\"q\"\\"
inject commit 3 fail
open d0 0
open d1 1
alloc b0 d0 device 64
alloc b1 d0 mapped 64 => out_of_memory
alloc b2 d1 pinned 0x40
map_peer p0 d1 b0
map_host h0 d0 4096
dma b0 "0000:41:00.0"
write b0 0 "te\x00t\n"
read p0 0 "text" => lost
load i0 d0 kit
load i1 d0 refused => error
load i2 d0 scratch 256
unload i1
entry e0 i0 spin
entry e1 i0 absent => absent
prepare i0 spin => invalid_argument
submit v0 d0 fill b0 0 64 171 ; launch e0 100 b0 -1 0x7 h0 ; copy b0 0 b1 0 4
wait d0 v0
spawn t1 wait d0 v0
await_call sleep
join t1 => lost
close d0
open d0 0
free h0
'''

FULL_DUMP = """\
1:1 scenario S:61207265616461626c65206e616d65
2:1 clauses W:CNT-6 W:STOP-1 W:MEM-11a
3:1 needs W:fake
5:1 configure K:device_bytes=65536 K:maps_host=false K:queue_slots=0x10
6:1 inject W:alloc I:1 W:fault S:776879
7:1 inject W:grow I:2 W:raise S:74657874092271225c
8:1 inject W:commit I:3 W:fail
9:1 open W:d0 I:0
10:1 open W:d1 I:1
11:1 alloc W:b0 W:d0 W:device I:64
12:1 alloc W:b1 W:d0 W:mapped I:64 => out_of_memory
13:1 alloc W:b2 W:d1 W:pinned I:64
14:1 map_peer W:p0 W:d1 W:b0
15:1 map_host W:h0 W:d0 I:4096
16:1 dma W:b0 S:303030303a34313a30302e30
17:1 write W:b0 I:0 S:746500740a
18:1 read W:p0 I:0 S:74657874 => lost
19:1 load W:i0 W:d0 W:kit
20:1 load W:i1 W:d0 W:refused => error
21:1 load W:i2 W:d0 W:scratch I:256
22:1 unload W:i1
23:1 entry W:e0 W:i0 W:spin
24:1 entry W:e1 W:i0 W:absent => absent
25:1 prepare W:i0 W:spin => invalid_argument
26:1 submit W:v0 W:d0 W:fill W:b0 I:0 I:64 I:171 ; W:launch W:e0 I:100 W:b0 I:-1 I:7 W:h0 ; W:copy W:b0 I:0 W:b1 I:0 I:4
27:1 wait W:d0 W:v0
28:1 spawn W:t1 W:wait W:d0 W:v0
29:1 await_call W:sleep
30:1 join W:t1 => lost
31:1 close W:d0
32:1 open W:d0 I:0
33:1 free W:h0
"""


def test_full_example_parses_to_typed_statements(driver, tmp_path):
    rc, out = run_driver(driver, FULL.encode(), tmp_path)
    assert rc == 0, out
    assert out == FULL_DUMP


VALID = {
    "minimal": HEAD,
    "no final newline": 'scenario "s"\nclauses A-1b',
    "crlf and tabs": 'scenario "s"\r\n\tclauses  A-1\t# c\r\nopen d0 0\t=> ok\r\n',
    "operators without spaces": HEAD + "open d0 0=>lost\nalloc b0 d0 device 8\n"
                                "submit v0 d0 fill b0 0 1 2;fill b0 0 1 2=>ok\n",
    "max int": HEAD + "open d0 4611686018427387903\n",
    "spawned open and reuse of a closed device": HEAD + "open d0 0\nclose d0\nspawn t0 open d0 1\njoin t0\n",
    "spawned configure with needs fake": FAKE + "spawn t0 configure may_block=true\n",
    "unicode in strings and comments": 'scenario "ŝćénàrio" # ĉu?\nclauses X-1\n',
    "escape x00 in name": 'scenario "a\\x00b"\nclauses X-1\n',
    "schedules": FAKE + 'schedule_mutant grow-writes-queue\nschedule "00aBcD"\nschedule "ff"\n'
                 "schedule_mutant 0\nschedule_mutant none\nschedule \"\"\n",
    "launch with five args": HEAD + "open d0 0\nalloc b0 d0 device 8\nload i0 d0 kit\n"
                             "entry e0 i0 fill\nsubmit v0 d0 launch e0 b0 1 2 3 b0\n",
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_inputs_parse(driver, tmp_path, name):
    rc, out = run_driver(driver, VALID[name].encode(), tmp_path)
    assert rc == 0, out


def _submit(fills, copies):
    """submit v0 d0 with fills (5 args) and copies (6 args): 1 + 6 fills + 7 copies args."""
    parts = ["fill b0 0 1 2"] * fills + ["copy b0 0 b0 0 1"] * copies
    return "submit v0 d0 " + " ; ".join(parts)


def test_sixty_four_arguments_is_the_limit(driver, tmp_path):
    pre = HEAD + "open d0 0\nalloc b0 d0 device 8\n"
    line = _submit(7, 3)  # 64 arguments
    rc, out = run_driver(driver, (pre + line + " => ok\n").encode(), tmp_path)
    assert rc == 0, out
    assert out.splitlines()[-1].count(" ") == 1 + 64 + 2
    for line in (_submit(6, 4), _submit(12, 0), _submit(30, 0) + " => ok"):  # 65, 73, 181 args
        rc, out = run_driver(driver, (pre + line + "\n").encode(), tmp_path)
        col65 = len(" ".join(line.split(" ")[:66])) - len(line.split(" ")[65]) + 1
        assert out.startswith(f"t.scn:5:{col65}: expected at most 64 arguments, found more"), out
    # 64 arguments, "=> ok", then more: the first extra word is reported.
    line = _submit(7, 3) + " => ok" + " x" * 10
    rc, out = run_driver(driver, (pre + line + "\n").encode(), tmp_path)
    col = len(_submit(7, 3) + " => ok") + 2
    assert out.startswith(f"t.scn:5:{col}: expected the end of the line, found 'x'"), out


# (text, line, column or a marker whose first occurrence on that line gives
#  the column, a fragment of the message)
MALFORMED = {
    "empty file": ("", 1, 1, "expected 'scenario \"a name\"' as the first statement, found end of file"),
    "only comments": ("# x\n\n", 3, 1, "found end of file"),
    "missing clauses": ('scenario "s"\n', 2, 1, "expected 'clauses'"),
    "action before clauses": ('scenario "s"\nopen d0 0\n', 2, 1, "expected 'clauses'"),
    "not first": ("open d0 0\n", 1, 1, "as the first statement, found 'open'"),
    "scenario twice": (HEAD + 'scenario "t"\n', 3, 1, "expected one scenario statement"),
    "empty name": ('scenario ""\n', 1, 10, "expected a non-empty string"),
    "clauses after action": (HEAD + "open d0 0\nclauses X-2\n", 4, 1, "before the first action (line 3)"),
    "bad clause id": ('scenario "s"\nclauses CNT-1 cnt-2\n', 2, "cnt-2", "expected a clause ID"),
    "duplicate clause": ('scenario "s"\nclauses CNT-1 CNT-1\n', 2, 15, "already listed"),
    "unknown verb": (HEAD + "frobnicate d0\n", 3, 1, "expected a statement (scenario, clauses"),
    "verb is a number": (HEAD + "  12 d0\n", 3, 3, "expected a statement"),
    "bad key": (FAKE + "configure device_bytes=1 colour=red\n", 4, "colour", "expected a key"),
    "bool key with int": (FAKE + "configure maps_host=1\n", 4, "1", "expected true or false for maps_host"),
    "int key with word": (FAKE + "configure device_bytes=lots\n", 4, "lots", "expected an integer >= 0"),
    "duplicate key": (FAKE + "configure may_block=true may_block=false\n", 4, "may_block=false", "again"),
    "configure without needs fake": (HEAD + "configure may_block=true\n", 3, 1, "expected 'needs fake'"),
    "configure with nothing": (FAKE + "configure\n", 4, 10, "expected KEY=VALUE"),
    "kv without value": (FAKE + "configure may_block=\n", 4, 21, "after '='"),
    "missing arg": (HEAD + "open d0\n", 3, 8, "expected an opener index (an integer >= 0), found end of line"),
    "missing arg before comment": (HEAD + "open d0 0\nalloc b0 d0 device # x\n", 4, "#", "expected a size"),
    "zero size": (HEAD + "open d0 0\nalloc b0 d0 device 0\n", 4, " 0", "expected a size (an integer > 0), found integer '0'"),
    "bad kind": (HEAD + "open d0 0\nalloc b0 d0 vram 4\n", 4, "vram", "expected a memory kind"),
    "extra argument": (HEAD + "open d0 0 1\n", 3, 11, "expected '=>' or the end of the line, found integer '1'"),
    "string not closed": (HEAD + 'open d0 0\nalloc b0 d0 device 8\nwrite b0 0 "abc\n', 5, '"', "closing the string"),
    "string not closed at eof": (HEAD + 'open d0 0\nalloc b0 d0 device 8\nwrite b0 0 "ab\\"', 5, '"', "closing"),
    "bad escape": (HEAD + 'open d0 0\nalloc b0 d0 device 8\nwrite b0 0 "a\\qb"\n', 5, "\\q", "expected an escape"),
    "short hex escape": (HEAD + 'open d0 0\nalloc b0 d0 device 8\nwrite b0 0 "a\\x4"\n', 5, "\\x", "expected an escape"),
    "control char in string": (HEAD + 'open d0 0\nalloc b0 d0 device 8\nwrite b0 0 "a\x01"\n', 5, "\x01", "expected a printable"),
    "string glued to word": (HEAD + 'open d0 0\nalloc b0 d0 device 8\nwrite b0 0 "a"b\n', 5, 15, "expected a space after a string"),
    "undeclared name": (HEAD + "alloc b0 d9 device 8\n", 3, "d9", "expected a device name, found 'd9', which is not declared"),
    "wrong sort": (HEAD + "open d0 0\nopen d1 1\nmap_peer p0 d1 d0\n", 5, " d0", "expected a buffer name, found device d0 (declared at line 3)"),
    "wrong sort in free": (HEAD + "open d0 0\nfree d0\n", 4, 6, "expected a buffer or mapping name, found device d0"),
    "wrong sort in launch": (HEAD + "open d0 0\nload i0 d0 kit\nentry e0 i0 spin\nsubmit v0 d0 launch e0 i0\n",
                             6, " i0", "expected a buffer or mapping name or an integer, found image i0"),
    "duplicate name": (HEAD + "open d0 0\nopen d0 1\n", 4, 6, "already declared at line 3 as a device"),
    "duplicate across sorts": (HEAD + "open d0 0\nalloc d0 d0 device 4\n", 4, 7, "already declared at line 3"),
    "reopen of an open device": (HEAD + "open d0 0\nopen d0 0\n", 4, 6, "reused only after its close"),
    "self reference": (HEAD + "open d0 0\nmap_host h0 d0 4\nmap_peer p0 d0 p0\n", 5, 16, "expected a buffer name, found 'p0', which is not declared"),
    "duplicate in spawn": (HEAD + "spawn t0 open t0 0\n", 3, " t0 0", "already declared on this line"),
    "=> after spawn": (HEAD + "open d0 0\nalloc b0 d0 device 4\nsubmit v0 d0 fill b0 0 4 1\nspawn t1 wait d0 v0 => lost\n",
                       6, "=>", "checked by its join"),
    "spawn spawn": (HEAD + "spawn t0 spawn t1 join t0\n", 3, 10, "expected a statement to run on the thread"),
    "spawn clauses": (HEAD + "spawn t0 clauses X-1\n", 3, 10, "any but scenario, clauses, needs, spawn, schedule"),
    "=> after configure": (FAKE + "configure may_block=true => ok\n", 4, "=>", "expected the end of the line, found '=>'"),
    "=> after inject": (FAKE + "inject free 1 fail => ok\n", 4, "=>", "found '=>'"),
    "absent after open": (HEAD + "open d0 0 => absent\n", 3, "absent", "absent only after entry"),
    "unknown outcome": (HEAD + "open d0 0 => fine\n", 3, "fine", "expected an outcome"),
    "missing outcome": (HEAD + "open d0 0 =>\n", 3, 13, "expected an outcome"),
    "two outcomes": (HEAD + "open d0 0 => ok ok\n", 3, 17, "expected the end of the line"),
    "inject nth zero": (FAKE + "inject alloc 0 fail\n", 4, "0", "an occurrence (an integer >= 1)"),
    "inject unknown fn": (FAKE + "inject malloc 1 fail\n", 4, "malloc", "expected a function"),
    "inject fault without why": (FAKE + "inject alloc 1 fault\n", 4, 21, "expected a string"),
    "fill byte too big": (HEAD + "open d0 0\nalloc b0 d0 device 4\nsubmit v0 d0 fill b0 0 4 256\n", 5, "256", "a byte (an integer from 0 to 255)"),
    "submit missing separator": (HEAD + "open d0 0\nalloc b0 d0 device 4\nsubmit v0 d0 fill b0 0 4 1 fill b0 0 4 1\n",
                                 5, 28, "expected '=>' or the end of the line, found 'fill'"),
    "launch six args": (HEAD + "open d0 0\nload i0 d0 kit\nentry e0 i0 spin\nsubmit v0 d0 launch e0 1 2 3 4 5 6\n",
                        6, " 6", "launch takes at most 5 arguments"),
    "empty part": (HEAD + "open d0 0\nalloc b0 d0 device 4\nsubmit v0 d0 fill b0 0 4 1 ;\n", 5, 29, "expected a part"),
    "bad integer": (HEAD + "open d0 12ab\n", 3, 9, "expected an integer (decimal or 0x hex), found '12ab'"),
    "bad hex": (HEAD + "open d0 0x\n", 3, 9, "expected an integer"),
    "integer too big": (HEAD + "open d0 4611686018427387904\n", 3, 9, "expected an integer between"),
    "hex too big": (HEAD + "open d0 0x10000000000000000000\n", 3, 9, "expected an integer between"),
    "lone dash": (HEAD + "open d0 - \n", 3, 9, "expected a word, an integer, a string"),
    "stray char": (HEAD + "open d0 0 @\n", 3, 11, "found '@'"),
    "word glued to =": (HEAD + "open d0=0\n", 3, 6, "expected a new device name, found 'd0=0'"),
    "huge line": (HEAD + "# " + "x" * 5000 + "\n", 3, 4097, "expected at most 4096 bytes on a line"),
    "NUL in a word": (HEAD + "open d0\x00 0\n", 3, 8, "expected a space after 'd0', found a NUL byte"),
    "NUL in a comment": (HEAD + "open d0 0 # a\x00b\n", 3, 14, "found a NUL byte"),
    "NUL in a string": ('scenario "a\x00b"\n', 1, 12, "found a NUL byte"),
    "NUL at line start": ("\x00", 1, 1, "found a NUL byte"),
    "binary garbage": ("\xff\xfe\x00\x01", 1, 1, "found byte 0xff"),
    "garbage after header": (HEAD + "\x7f\x80", 3, 1, "found byte 0x7f"),
    "lone CR": (HEAD + "open d0\r0\n", 3, 8, "found byte 0x0d"),
}


# The schedule statements' errors, each the one line after a `needs fake`
# header (line 4): (line, column or marker, a fragment of the message).
SCHEDULE_MALFORMED = {
    "spawn schedule": ('spawn t0 schedule "00"', 10, "expected a statement to run on the thread"),
    "schedule not hex": ('schedule "00a0g1"', "g", "expected a hex digit (0-9, a-f, A-F) in a schedule, found 'g'"),
    "schedule space": ('schedule "00 11"', 13, "expected a hex digit"),
    "schedule escape": ('schedule "0\\x30"', "\\", "expected a hex digit"),
    "schedule odd digits": ('schedule "abc"', '"', "expected an even number of hex digits (two per byte), found 3"),
    "schedule word": ("schedule ab", "ab", "expected a string of hex digits"),
    "schedule two strings": ('schedule "ab" "cd"', '"cd', "expected the end of the line"),
    "=> after schedule": ('schedule "ab" => ok', "=>", "expected the end of the line, found '=>'"),
    "schedule_mutant string": ('schedule_mutant "x"', '"', "expected a mutant of the fuzzer"),
    "schedule_mutant negative": ("schedule_mutant -1", "-1", "expected a mutant of the fuzzer"),
}
MALFORMED.update({name: (FAKE + text + "\n", 4, where, what) for name, (text, where, what) in SCHEDULE_MALFORMED.items()})
MALFORMED["schedule without needs fake"] = (HEAD + 'schedule "00"\n', 3, 1, "expected 'needs fake' before schedule")
MALFORMED["schedule_mutant without needs fake"] = (HEAD + "schedule_mutant none\n", 3, 1, "expected 'needs fake'")


def _col(text, line, where):
    if isinstance(where, int):
        return where
    # a marker's leading spaces only make it unique: the column is after them
    return text.split("\n")[line - 1].index(where) + 1 + len(where) - len(where.lstrip(" "))


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_inputs_give_file_line_col(driver, tmp_path, name):
    text, line, where, fragment = MALFORMED[name]
    data = text.encode("latin-1")
    rc, out = run_driver(driver, data, tmp_path, name="bad.scn")
    assert rc == 3, f"parsed but should not: {out}"
    m = ERR_RE.match(out.rstrip("\n"))
    assert m, out
    assert (m["file"], int(m["line"]), int(m["col"])) == ("bad.scn", line, _col(text, line, where)), out
    assert fragment in m["msg"], out


def test_statement_limit(driver, tmp_path):
    body = ["open d0 0"] + ["close d0"] * 9997  # 2 + 9998 = 10000 statements
    rc, out = run_driver(driver, (HEAD + "\n".join(body) + "\n").encode(), tmp_path)
    assert rc == 0, out[:300]
    rc, out = run_driver(driver, (HEAD + "\n".join(body + ["  close d0"]) + "\n").encode(), tmp_path)
    assert out.startswith("t.scn:10001:3: expected at most 10000 statements, found more"), out[:300]


def test_line_of_4096_bytes_is_accepted(driver, tmp_path):
    line = "open d0 0 #" + "x" * (4096 - 11)
    rc, out = run_driver(driver, (HEAD + line + "\n").encode(), tmp_path)
    assert rc == 0, out


# ---------------------------------------------------------------- random input

SETTINGS = settings(max_examples=250, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(data=st.binary(max_size=600))
def test_random_bytes_never_crash(driver, tmp_path, data):
    check_verdict(driver, data, tmp_path)


WORDS = ["scenario", "clauses", "needs", "fake", "configure", "inject", "open", "close", "alloc",
         "free", "map_peer", "map_host", "dma", "write", "read", "load", "unload", "entry",
         "prepare", "submit", "wait", "spawn", "await_call", "join", "device", "mapped", "pinned",
         "kit", "refused", "scratch", "spin", "fault", "hang", "fill", "absent", "copy", "launch",
         "raise", "fail", "sleep", "d0", "d1", "b0", "b1", "p0", "h0", "i0", "e0", "v0", "t0",
         "CNT-1", "=>", ";", "ok", "lost", "error", "0", "1", "64", "-1", "0x10", "255", "256",
         '"s"', '"a\\x00"', '"\\q"', '"', "#", "device_bytes=8", "maps_host=true", "queue_slots=0",
         "k=", "\t", "\x00", "\xff", "9223372036854775808"]


@SETTINGS
@given(lines=st.lists(st.lists(st.sampled_from(WORDS), max_size=12), max_size=25),
       head=st.sampled_from(["", HEAD, FAKE + "open d0 0\nalloc b0 d0 device 64\n"]))
def test_random_statements_never_crash(driver, tmp_path, lines, head):
    text = head + "\n".join(" ".join(ws) for ws in lines)
    check_verdict(driver, text.encode("latin-1"), tmp_path)


@SETTINGS
@given(cut=st.integers(min_value=0, max_value=len(FULL)), junk=st.binary(max_size=8),
       keep=st.integers(min_value=0, max_value=len(FULL)))
def test_mutated_full_example_never_crashes(driver, tmp_path, cut, junk, keep):
    data = FULL.encode()
    check_verdict(driver, data[:cut] + junk + data[max(cut, keep):], tmp_path)


# ---------------------------------------------------------------- OCaml binding

@pytest.fixture(scope="module")
def scn_check():
    if not SCN_CHECK.is_file():
        with build_lock():
            proc = subprocess.run(["make", "build"], cwd=ROOT, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT)
        assert SCN_CHECK.is_file(), (proc.stdout + proc.stderr)[-3000:]
    return SCN_CHECK


def test_ocaml_binding_splits_header_and_types_args(scn_check, tmp_path):
    f = tmp_path / "full.scn"
    f.write_text(FULL)
    proc = subprocess.run([str(scn_check), str(f)], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f'{f}: scenario "a readable name" clauses CNT-6,STOP-1,MEM-11a needs fake'
    assert lines[1] == "5:1: configure device_bytes=65536 maps_host=false queue_slots=0x10"
    assert '17:1: write b0 0 "te\\x00t\\n"' in lines
    assert "26:1: submit v0 d0 fill b0 0 64 171 ; launch e0 100 b0 -1 7 h0 ; copy b0 0 b1 0 4" in lines
    assert "28:1: spawn t1 wait d0 v0" in lines
    assert "30:1: join t1 => lost" in lines
    assert len(lines) == 1 + FULL_DUMP.count("\n") - 3  # header lines are not statements


def test_ocaml_binding_errors(scn_check, tmp_path):
    f = tmp_path / "bad.scn"
    f.write_text(HEAD + "open d0 0\nfree d0\n")
    proc = subprocess.run([str(scn_check), str(f), str(tmp_path / "missing.scn")],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 1
    err = proc.stderr.splitlines()
    assert err[0] == f"{f}:4:6: expected a buffer or mapping name, found device d0 (declared at line 3)"
    assert err[1].startswith(f"{tmp_path / 'missing.scn'}: cannot read: ")


def test_documented_example_parses(driver, tmp_path):
    doc = (ROOT / "docs" / "scenario-language.md").read_text()
    example = doc.split("## Example", 1)[1].split("```", 2)[1].lstrip("\n")
    rc, out = run_driver(driver, example.encode(), tmp_path)
    assert rc == 0, out
    assert out.splitlines()[0].startswith("3:1 scenario")
