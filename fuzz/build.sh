#!/bin/bash -eu
# fuzz/build.sh: builds the libFuzzer targets the way OSS-Fuzz and
# ClusterFuzzLite do: $CC, $CFLAGS and $LIB_FUZZING_ENGINE from the
# environment, binaries and <target>_seed_corpus.zip into $OUT.  $SRC is the
# directory holding this checkout (OSS-Fuzz: $SRC/rig-conform).
#
# Locally, with the defaults below: fuzz/build.sh  (or make fuzz-build)
#   CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fsanitize=fuzzer-no-link"
#   LIB_FUZZING_ENGINE=-fsanitize=fuzzer OUT=out/fuzz
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
: "${CC:=clang}"
: "${CFLAGS:=-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link}"
: "${LIB_FUZZING_ENGINE:=-fsanitize=fuzzer}"
: "${OUT:=$ROOT/out/fuzz}"
mkdir -p "$OUT"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT

INC="-I$ROOT/include -I$ROOT/drivers/fake -I$ROOT/fuzz"
# The fake's C core, with pthread_self() answering the scheduler's logical
# thread (fuzz/fake_shim.h); instrumented for coverage like the target.
$CC $CFLAGS $INC -include "$ROOT/fuzz/fake_shim.h" -c "$ROOT/drivers/fake/fake_core.c" -o "$W/fake_core.o"
for f in fake_adapter rig_edge_min room_grow_fuzz; do
  $CC $CFLAGS $INC -c "$ROOT/fuzz/$f.c" -o "$W/$f.o"
done
# The link is $CXX's in OSS-Fuzz (the engine is C++); clang links it too.
${CXX:-$CC} $CFLAGS "$W/room_grow_fuzz.o" "$W/fake_adapter.o" "$W/rig_edge_min.o" "$W/fake_core.o" \
  $LIB_FUZZING_ENGINE -lpthread -o "$OUT/room_grow_fuzz"

# Seed corpora: fuzz/corpus/<target>/, with the regression inputs.
for t in room_grow; do
  rm -f "$OUT/${t}_fuzz_seed_corpus.zip"
  (cd "$ROOT/fuzz" && find "corpus/$t" "regressions/$t" -type f ! -name '.*' -print0 2>/dev/null |
    xargs -0 -r python3 -c 'import sys, zipfile, os
z = zipfile.ZipFile(sys.argv[1], "w")
for p in sys.argv[2:]: z.write(p, os.path.basename(p))
z.close()' "$OUT/${t}_fuzz_seed_corpus.zip")
done
# Other targets (the scenario parser's) bring their own fuzz/build_<target>.sh,
# run here with the same environment.
export CC CFLAGS LIB_FUZZING_ENGINE OUT
for b in "$ROOT"/fuzz/build_*.sh; do
  if [ -f "$b" ]; then bash "$b"; fi
done
echo "built: $(ls "$OUT"/*_fuzz | tr "\n" " ")"
