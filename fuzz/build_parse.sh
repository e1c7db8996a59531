#!/bin/bash -eu
# fuzz/build_parse.sh: the scenario parser's libFuzzer target
# (fuzz/parse_fuzz.c over harness/scenario/scn_parse.c), run by fuzz/build.sh
# with its environment ($CC, $CFLAGS, $LIB_FUZZING_ENGINE, $OUT), and its seed
# corpus zip: the bundled scenarios and fuzz/corpus/parse.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
$CC $CFLAGS -I"$ROOT/harness/scenario" -c "$ROOT/harness/scenario/scn_parse.c" -o "$W/scn_parse.o"
$CC $CFLAGS -I"$ROOT/harness/scenario" -c "$ROOT/fuzz/parse_fuzz.c" -o "$W/parse_fuzz.o"
${CXX:-$CC} $CFLAGS "$W/parse_fuzz.o" "$W/scn_parse.o" $LIB_FUZZING_ENGINE -o "$OUT/parse_fuzz"
cp "$ROOT/fuzz/parse.dict" "$OUT/parse_fuzz.dict"
rm -f "$OUT/parse_fuzz_seed_corpus.zip"
(cd "$ROOT" && find scenarios fuzz/corpus/parse -name '*.scn' -type f -print0 |
  xargs -0 -r python3 -c 'import sys, zipfile, os
z = zipfile.ZipFile(sys.argv[1], "w")
for p in sys.argv[2:]: z.write(p, os.path.basename(p))
z.close()' "$OUT/parse_fuzz_seed_corpus.zip")
