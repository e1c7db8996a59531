#!/bin/bash
# fuzz/to_scenario.sh: turns an input of the room/grow fuzzer (a crash, a
# violation, a corpus or regression file) into a scenario file that replays
# the same schedule in the certifier (the statement `schedule`,
# docs/scenario-language.md).
#
#   fuzz/to_scenario.sh INPUT [MUTANT] [OUT.scn]
#   make fuzz-to-scenario INPUT=path [MUTANT=name] [OUT=dir/file.scn]
#
# MUTANT is the fuzzer's RIG_FUZZ_MUTANT the input was found with (a name,
# "none", or a code); OUT defaults to out/fuzz/scenarios/fuzz-<input name>.scn.
# The scenario is case scn.<OUT's name>; run it with
#   RIG_CONFORM_SCENARIOS=<OUT's directory> rig-conform run --case scn.NAME --seed 1
set -eu
usage() {
  echo "usage: $0 INPUT [MUTANT] [OUT.scn]" >&2
  exit 2
}
[ $# -ge 1 ] && [ $# -le 3 ] || usage
input=$1
mutant=${2:-}
[ -f "$input" ] && [ -r "$input" ] || { echo "$0: $input: not a readable file" >&2; exit 2; }
# A scenario's lines are at most 4096 bytes and its files 10000 statements.
size=$(wc -c < "$input")
[ "$size" -le 300000 ] || { echo "$0: $input: $size bytes, more than a scenario holds (300000)" >&2; exit 2; }
if [ -n "$mutant" ] && ! [[ "$mutant" =~ ^([A-Za-z_][A-Za-z0-9_.-]*|[0-9]+)$ ]]; then
  echo "$0: MUTANT $mutant: expected a name (like grow-writes-queue) or a code" >&2
  exit 2
fi
# The case name is the file name: keep it to the words the certifier lists.
name=$(basename "$input" | tr -c 'A-Za-z0-9_.\n-' '-')
out=${3:-out/fuzz/scenarios/fuzz-$name.scn}
case "$out" in *.scn) ;; *) echo "$0: OUT $out: must end in .scn (the certifier reads *.scn)" >&2; exit 2 ;; esac
dir=$(dirname "$out")
mkdir -p "$dir" || { echo "$0: cannot make $dir" >&2; exit 2; }
case_name=scn.$(basename "$out" .scn)
sha=$(sha1sum < "$input" | cut -c1-40)

{
  echo "# Replays the room/grow fuzz input $input ($size bytes, sha1 $sha)"
  echo "# as the fuzzer runs it${mutant:+ with RIG_FUZZ_MUTANT=$mutant}; written by fuzz/to_scenario.sh."
  echo "# The fuzzer's own replay:"
  echo "#   ${mutant:+RIG_FUZZ_MUTANT=$mutant }RIG_FUZZ_TRACE=1 out/fuzz/room_grow_fuzz $input"
  echo "# The certifier's (RIG_FUZZ_TRACE=1 prints the same trace):"
  echo "#   RIG_CONFORM_SCENARIOS=$dir ./_build/default/harness/certify/main.exe run --case $case_name --seed 1"
  echo "# A violation is a finding under the clause the fuzzer names."
  echo "scenario \"room/grow fuzz input $(basename "$input" | tr -c 'A-Za-z0-9_.\n-' '-')\""
  echo "clauses QUEUE-1 QUEUE-2 QUEUE-3 CNT-6 STOP-3 STOP-4 STOP-6 TIME-1 TIME-5 TIME-6 LOCK-3 MEM-2"
  echo "needs fake"
  if [ -n "$mutant" ]; then echo "schedule_mutant $mutant"; fi
  # 32 bytes a line; consecutive schedule lines are one input.
  if [ "$size" -eq 0 ]; then echo 'schedule ""'; fi # the empty input is a schedule too
  od -An -v -tx1 "$input" | tr -d ' \n' | fold -w 64 | sed 's/.*/schedule "&"/'
  echo
} > "$out.tmp" || { rm -f "$out.tmp"; echo "$0: cannot write $out" >&2; exit 2; }
mv "$out.tmp" "$out"
echo "$out: case $case_name"
