#!/usr/bin/env bash
# tools/mutate.sh: source-level mutation testing of what the certifier catches
# (docs/mutate.md).  Reads mutate/mutants.tsv, copies the tree once into
# out/mutate/tree, builds it there once, then for each mutant: applies its
# edit, builds incrementally, runs the certify command of its target, reads
# the report's verdicts, restores the file.  Writes out/mutate/report.tsv and
# out/mutate/report.md after every mutant, so a partial run has a report.
#
# Environment:
#   MUTATE_ONLY=id1,id2      run only these mutants
#   MUTATE_TARGET=T          run only the mutants of target T (hostmem, fake, rig)
#   MUTATE_TIMEOUT=S         seconds one certify may take (default 600)
#   MUTATE_LIST=PATH         the mutant list (default mutate/mutants.tsv)
#   MUTATE_OUT=DIR           where the tree, logs and reports go (default out/mutate)
#   MUTATE_CERTIFY_ARGS=...  extra certify arguments (e.g. --no-sweep)
#   MUTATE_CHECK=1           only check the list (each original text occurs once)
# A run with MUTATE_ONLY or MUTATE_TARGET keeps the rows of report.tsv of the
# other mutants still in the list; a run of the whole list starts afresh.
# Exit: 0 when it ran to its end, whatever the score; 2 on a bad list or bad
# environment; 1 when the tree does not build unmutated.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIST=${MUTATE_LIST:-$ROOT/mutate/mutants.tsv}
OUT=${MUTATE_OUT:-$ROOT/out/mutate}
TIMEOUT=${MUTATE_TIMEOUT:-600}
ONLY=${MUTATE_ONLY:-}
TARGET_FILTER=${MUTATE_TARGET:-}
EXTRA=${MUTATE_CERTIFY_ARGS:-}
TREE=$OUT/tree
BIN=./_build/default/harness/certify/main.exe
PLUGIN=_build/default/drivers/hostmem/hostmem.cmxs

die() { echo "mutate: $*" >&2; exit 2; }
say() { echo "mutate: $*" >&2; }

case "$TARGET_FILTER" in ""|hostmem|fake|rig) ;; *) die "MUTATE_TARGET must be hostmem, fake or rig, not '$TARGET_FILTER'" ;; esac
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "MUTATE_TIMEOUT must be a positive number of seconds, not '$TIMEOUT'"
[ -f "$LIST" ] || die "no mutant list at $LIST"
for tool in timeout awk tar; do command -v $tool >/dev/null || die "needs $tool on PATH"; done

# The project's OCaml (the Makefile exports it; alone, as the Makefile finds it).
if ! command -v dune >/dev/null; then
  OCAML_BIN=$(cd "$ROOT" && ./tools/setup.sh | tail -n 1) || die "tools/setup.sh failed"
  export PATH=$OCAML_BIN:$PATH
  export OCAMLPATH=$(cd "$OCAML_BIN/../lib/ocaml" && pwd)
fi

# ---------------------------------------------------------------- the list
# Fields: id target file original replacement expected (docs/mutate.md).
declare -a M_ID M_TARGET M_FILE M_ORIG M_REPL M_EXP
declare -A SEEN
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%$'\r'}
  [[ -z "${line//[[:space:]]/}" || "$line" == \#* ]] && continue
  # Split at each tab (read -a would merge the empty field of an empty replacement).
  f=() rest=$line
  while [[ "$rest" == *$'\t'* ]]; do f+=("${rest%%$'\t'*}"); rest=${rest#*$'\t'}; done
  f+=("$rest")
  [ "${#f[@]}" -eq 6 ] || die "$LIST:$lineno: ${#f[@]} tab-separated fields, not 6 (id, target, file, original, replacement, expected)"
  id=${f[0]} target=${f[1]} file=${f[2]}
  [[ "$id" =~ ^[A-Za-z0-9._-]+$ ]] || die "$LIST:$lineno: bad mutant id '$id' (letters, digits, . _ -)"
  [ -z "${SEEN[$id]:-}" ] || die "$LIST:$lineno: mutant id '$id' already used on line ${SEEN[$id]}"
  SEEN[$id]=$lineno
  case "$target" in hostmem|fake|rig) ;; *) die "$LIST:$lineno: target '$target' is not hostmem, fake or rig" ;; esac
  [ -f "$ROOT/$file" ] || die "$LIST:$lineno: no file $file in $ROOT"
  [ -n "${f[3]}" ] || die "$LIST:$lineno: empty original text"
  [ "${f[3]}" != "${f[4]}" ] || die "$LIST:$lineno: the replacement is the original text"
  [[ "${f[5]}" =~ ^equivalent:\ *[^\ ] || "${f[5]}" =~ ^[A-Z]+-[0-9]+([,\ ]+[A-Z]+-[0-9]+)*$ ]] ||
    die "$LIST:$lineno: expected must be clause IDs (CNT-1,STOP-3) or 'equivalent: <why>', not '${f[5]}'"
  M_ID+=("$id"); M_TARGET+=("$target"); M_FILE+=("$file"); M_ORIG+=("${f[3]}"); M_REPL+=("${f[4]}"); M_EXP+=("${f[5]}")
done <"$LIST"
[ "${#M_ID[@]}" -gt 0 ] || die "$LIST holds no mutant"

if [ -n "$ONLY" ]; then
  IFS=',' read -r -a only <<<"$ONLY"
  for o in "${only[@]}"; do [ -n "${SEEN[$o]:-}" ] || die "MUTATE_ONLY names '$o', which is not in $LIST"; done
fi
selected() {
  local i=$1
  [ -n "$TARGET_FILTER" ] && [ "${M_TARGET[$i]}" != "$TARGET_FILTER" ] && return 1
  if [ -n "$ONLY" ]; then
    local o
    for o in "${only[@]}"; do [ "$o" = "${M_ID[$i]}" ] && return 0; done
    return 1
  fi
  return 0
}
declare -a RUN
for i in "${!M_ID[@]}"; do selected "$i" && RUN+=("$i"); done
[ "${#RUN[@]}" -gt 0 ] || die "no mutant of $LIST is selected (MUTATE_ONLY='$ONLY' MUTATE_TARGET='$TARGET_FILTER')"

# The side of each clause (column 2 of spec/clauses.tsv).
declare -A SIDE
while IFS=$'\t' read -r cid side _; do [ "$cid" = id ] || SIDE[$cid]=$side; done <"$ROOT/spec/clauses.tsv"

# ------------------------------------------------------------- the report
mkdir -p "$OUT/logs" "$OUT/reports" || die "cannot write $OUT"
TSV=$OUT/report.tsv MD=$OUT/report.md
HEADER=$'id\ttarget\tfile\texpected\toutcome\texpected_hit\tfailed_clauses\tseconds'
declare -A ROW
if [ -n "$ONLY$TARGET_FILTER" ] && [ -f "$TSV" ]; then
  while IFS= read -r r; do
    rid=${r%%$'\t'*}
    [ "$r" = "$HEADER" ] || [ -z "${SEEN[$rid]:-}" ] || ROW[$rid]=$r
  done <"$TSV"
fi

write_report() {
  local tmp=$TSV.tmp i
  { echo "$HEADER"; for i in "${!M_ID[@]}"; do if [ -n "${ROW[${M_ID[$i]}]:-}" ]; then echo "${ROW[${M_ID[$i]}]}"; fi; done; } >"$tmp" && mv "$tmp" "$TSV"
  awk -F'\t' -v started="$STARTED" -v now="$(date -u '+%Y-%m-%d %H:%M:%S UTC')" -v total="${#RUN[@]}" -v list="${LIST#$ROOT/}" '
    function esc(s) { gsub(/\|/, "\\|", s); return s }
    NR == 1 { next }
    {
      n++; id[n] = $1; tg[n] = $2; ex[n] = $4; oc[n] = $5; hit[n] = $6; fc[n] = $7; sec[n] = $8
      eq = ($4 ~ /^equivalent:/)
      if ($5 == "killed" || $5 == "survived" || $5 == "timeout") {
        if (eq) { eqn[$2]++; if ($5 == "killed") eqk[$2]++ }
        else { ne[$2]++; if ($5 == "killed") { k[$2]++; if ($6 == "yes") kh[$2]++ } }
      } else other[$2 "\t" $5]++
      secs += $8
    }
    END {
      print "# Mutation score of the certifier"
      print ""
      printf "List `%s`; run started %s, report written %s; %d of %d selected mutants in this report; %d s of mutant runs.\n\n", list, started, now, n, total, secs
      print "| mutant | target | expected | outcome | expected clause failed | failed clauses | s |"
      print "|---|---|---|---|---|---|---|"
      for (i = 1; i <= n; i++)
        printf "| %s | %s | %s | %s | %s | %s | %s |\n", id[i], tg[i], esc(ex[i]), oc[i], hit[i], esc(fc[i]), sec[i]
      print ""
      print "## Score per target"
      print ""
      print "Killed / non-equivalent mutants that compiled and ran (stillborn, stale and error rows are not counted)."
      print ""
      print "| target | killed / non-equivalent | score | with the expected clause | equivalent (killed) | stillborn | stale | error |"
      print "|---|---|---|---|---|---|---|---|"
      split("hostmem fake rig", ts, " ")
      for (j = 1; j <= 3; j++) {
        t = ts[j]
        pct = ne[t] ? sprintf("%.0f %%", 100 * k[t] / ne[t]) : "-"
        printf "| %s | %d / %d | %s | %d | %d (%d) | %d | %d | %d |\n", t, k[t], ne[t], pct, kh[t], eqn[t], eqk[t], other[t "\tstillborn"], other[t "\tstale"], other[t "\terror"]
      }
    }' "$TSV" >"$MD.tmp" && mv "$MD.tmp" "$MD"
}

# ------------------------------------------------------- one edit, in awk
# apply FILE ORIG REPL [OUT]: ORIG and REPL with \n, \t, \\ escapes; prints the
# number of times ORIG occurs in FILE, and writes OUT (default FILE.mut) only
# when it is 1.
apply() {
  O="$2" R="$3" awk -v out="${4:-$1.mut}" '
    function unesc(s,   r, i, c, d) {
      r = ""
      for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\" && i < length(s)) {
          d = substr(s, i + 1, 1)
          if (d == "n") { r = r "\n"; i++; continue }
          if (d == "t") { r = r "\t"; i++; continue }
          if (d == "\\") { r = r "\\"; i++; continue }
        }
        r = r c
      }
      return r
    }
    { buf = buf $0 "\n" }
    END {
      o = unesc(ENVIRON["O"]); r = unesc(ENVIRON["R"])
      n = 0; rest = buf; at = 0; pos = 0
      while ((p = index(rest, o)) > 0) { n++; if (n == 1) at = pos + p; pos += p; rest = substr(rest, p + 1) }
      if (n == 1) printf "%s", substr(buf, 1, at - 1) r substr(buf, at + length(o)) > out
      print n
    }' "$1"
}

# The clauses that failed in a report: "ID ID ..." (one clause object a line).
failed_clauses() {
  if command -v jq >/dev/null; then
    jq -r '[.clauses[] | select(.verdict == "fail") | .id] | join(" ")' "$1" 2>/dev/null
  else
    grep -o '{"id": "[A-Z]*-[0-9]*", "side": "[a-z]*", "verdict": "fail"' "$1" | sed 's/{"id": "\([^"]*\)".*/\1/' | tr '\n' ' ' | sed 's/ $//'
  fi
}

restore() { cp -p "$OUT/orig.$$" "$1"; rm -f "$OUT/orig.$$" "$1.mut"; }
CURRENT=
trap 'if [ -n "$CURRENT" ] && [ -f "$OUT/orig.$$" ]; then restore "$CURRENT"; fi; say "interrupted: report so far in $MD"; exit 130' INT TERM

if [ -n "${MUTATE_CHECK:-}" ]; then
  # Only the list: each selected original text must occur once (no build, no run).
  bad=0
  for i in "${RUN[@]}"; do
    c=$(apply "$ROOT/${M_FILE[$i]}" "${M_ORIG[$i]}" "${M_REPL[$i]}" /dev/null)
    if [ "$c" != 1 ]; then say "${M_ID[$i]}: original text found $c times in ${M_FILE[$i]} (stale)"; bad=1; fi
  done
  [ $bad = 0 ] && say "${#RUN[@]} mutant(s): each original text occurs once"
  exit $((bad * 2))
fi

# --------------------------------------------------------------- the tree
STARTED=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
T0=$(date +%s)
say "copying $ROOT into $TREE (without _build, out, .git; its _build is kept)"
mkdir -p "$TREE" || die "cannot make $TREE"
find "$TREE" -mindepth 1 -maxdepth 1 ! -name _build -exec rm -rf {} + || die "cannot clear $TREE"
tar -C "$ROOT" --exclude=./_build --exclude=./out --exclude=./.git -cf - . | tar -C "$TREE" -xf - || die "cannot copy the tree"
cd "$TREE" || die "cannot enter $TREE"
export RIG_CONFORM_SCENARIOS=$TREE/scenarios
BUILD_TARGETS=(harness/certify/main.exe drivers/hostmem/hostmem.cmxs)
say "building the tree once"
if ! dune build --root . "${BUILD_TARGETS[@]}" >"$OUT/logs/build.log" 2>&1; then
  echo "mutate: the unmutated tree does not build: see $OUT/logs/build.log" >&2
  tail -n 20 "$OUT/logs/build.log" >&2
  exit 1
fi

# ------------------------------------------------------------ the mutants
write_report
n=${#RUN[@]} k=0
for i in "${RUN[@]}"; do
  k=$((k + 1))
  id=${M_ID[$i]} target=${M_TARGET[$i]} file=${M_FILE[$i]} exp=${M_EXP[$i]}
  log=$OUT/logs/$id.log json=$OUT/reports/$id.json
  rm -f "$json" "$log"
  t1=$(date +%s)
  outcome= hit=- failed=
  count=$(apply "$file" "${M_ORIG[$i]}" "${M_REPL[$i]}")
  if [ "$count" != 1 ]; then
    outcome=stale failed="original text found $count times in $file"
    rm -f "$file.mut"
  else
    cp -p "$file" "$OUT/orig.$$"
    CURRENT=$file
    cat "$file.mut" >"$file" && rm -f "$file.mut"
    if ! dune build --root . "${BUILD_TARGETS[@]}" >"$log" 2>&1; then
      outcome=stillborn failed="does not compile (logs/$id.log)"
    else
      case $target in
        hostmem) cmd=("$BIN" certify --plugin "$PLUGIN" --driver hostmem) ;;
        *) cmd=("$BIN" certify --driver fake) ;;
      esac
      # shellcheck disable=SC2206
      cmd+=(--seeds 1 -j 2 --no-color --report "$json" $EXTRA)
      echo "+ ${cmd[*]}" >>"$log"
      timeout -k 30 "$TIMEOUT" "${cmd[@]}" >>"$log" 2>&1
      rc=$?
      if [ ! -s "$json" ]; then
        outcome=error failed="certify exited $rc without a report (logs/$id.log)"
      else
        all=$(failed_clauses "$json")
        if [ "$target" = rig ]; then
          failed=
          for c in $all; do [ "${SIDE[$c]:-}" = rig ] && failed+="$c "; done
          failed=${failed% }
          other=
          for c in $all; do [ "${SIDE[$c]:-}" = rig ] || other+="$c "; done
        else
          failed=$all other=
        fi
        if [ -n "$failed" ]; then outcome=killed; else outcome=survived; fi
        if [ $rc -eq 124 ] || [ $rc -eq 137 ] || [ $rc -eq 143 ]; then
          [ -n "$failed" ] || outcome=timeout
          failed="${failed:+$failed }(certify killed after ${TIMEOUT} s)"
        elif [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
          outcome=error failed="certify exited $rc (logs/$id.log)"
        fi
        [ -n "${other:-}" ] && failed="${failed:+$failed; }driver side: ${other% }"
        if [[ "$exp" != equivalent:* ]] && [ "$outcome" = killed ]; then
          hit=no
          for e in ${exp//,/ }; do [[ " ${all} " == *" $e "* ]] && hit=yes; done
        fi
      fi
    fi
    restore "$file"
    CURRENT=
  fi
  secs=$(( $(date +%s) - t1 ))
  clean_exp=${exp//$'\t'/ }
  ROW[$id]="$id"$'\t'"$target"$'\t'"$file"$'\t'"$clean_exp"$'\t'"$outcome"$'\t'"$hit"$'\t'"${failed:--}"$'\t'"$secs"
  write_report
  say "[$k/$n] $id ($target, expects ${exp%%:*}): $outcome${failed:+ ($failed)}, ${secs} s"
done

# Leave the tree as the source is, built.
dune build --root . "${BUILD_TARGETS[@]}" >>"$OUT/logs/build.log" 2>&1 || say "warning: the restored tree does not build (logs/build.log)"
say "done: ${#RUN[@]} mutant(s) in $(( $(date +%s) - T0 )) s; report in ${MD#$ROOT/} and ${TSV#$ROOT/}"
exit 0
