#!/usr/bin/env bash
# scripts/bench-report.sh: refuses bad options (exit 2, one line), lists its sections, writes a report with the
# machine's header and one section per program, and reports a program that is not built as skipped.
#   bench_report_test.sh SCRIPT BUILD_DIR
set -uo pipefail
script=$1
build=$(cd "$2" && pwd) || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Bad input: exit status 2 and a line naming it.
expect_refused() {  # PATTERN ARGS...
  local pattern=$1 rc=0
  shift
  bash "$script" "$@" >"$tmp/out" 2>&1 || rc=$?
  ((rc == 2)) || fail "$* exited $rc, not 2"
  grep -q -- "$pattern" "$tmp/out" || fail "$*: no '$pattern' in: $(cat "$tmp/out")"
}
expect_refused "unknown option '--bogus'" --bogus
expect_refused "no section 'nosuch'" --only=nosuch
expect_refused "exclude each other" --only=micro --skip=apps
expect_refused "needs a list" --only

# The list: every section, with the BENCHMARKS.md sections it regenerates.
bash "$script" --list >"$tmp/list" || fail "--list failed"
for s in micro instructions atomics metg metg-vary apps dense cluster dist comm halo hpccg; do
  grep -q "^$s  *BENCHMARKS.md " "$tmp/list" || fail "--list lacks $s"
done

# A section whose program is not built: skipped, with the reason, and the run succeeds.
rc=0
bash "$script" --quick --build-dir "$tmp/nowhere" --only=micro --out "$tmp/skip.md" >"$tmp/out" 2>&1 || rc=$?
((rc == 0)) || fail "a skipped section made the run fail ($rc): $(cat "$tmp/out")"
grep -q "^Skipped: $tmp/nowhere/bench/micro/weft-bench-micro is not built" "$tmp/skip.md" ||
  fail "the skipped section does not say why: $(cat "$tmp/skip.md")"

# A program that fails: its output and exit status in the report, and the run's exit status 1.
mkdir -p "$tmp/failing/bench/micro"
printf '#!/bin/sh\necho "boom: $*"\nexit 5\n' >"$tmp/failing/bench/micro/weft-bench-micro"
chmod +x "$tmp/failing/bench/micro/weft-bench-micro"
rc=0
bash "$script" --quick --build-dir "$tmp/failing" --only=micro --out "$tmp/fail.md" >"$tmp/out" 2>&1 || rc=$?
((rc == 1)) || fail "a failing section: exit status $rc, not 1"
grep -q '^\*\*Failed (exit status 1).\*\*' "$tmp/fail.md" || fail "the failing section is not marked failed"
grep -q '^boom: --quick$' "$tmp/fail.md" || fail "the failing program's output is not in the report"
grep -q '^(exit status 5)$' "$tmp/fail.md" || fail "the failing command's exit status is not in the report"

# A real section (the instruction counts: seconds under valgrind): the header, the command, the program's own
# output; without valgrind, the section says so.
rc=0
bash "$script" --quick --build-dir "$build" --only=instructions --out "$tmp/report.md" >"$tmp/out" 2>&1 || rc=$?
((rc == 0)) || fail "--only=instructions exited $rc: $(cat "$tmp/out")"
for pattern in "^# weft benchmark report" "^| commit | " "^| cores (online) | " "^## instructions: " \
               "^Re-measures BENCHMARKS.md section(s) 7.1, 4.1, 25, 41.1, 42.1. Load average before: " "^load average at the end: "; do
  grep -q -- "$pattern" "$tmp/report.md" || fail "the report lacks '$pattern'"
done
if command -v valgrind >/dev/null 2>&1; then
  for pattern in "^\\$ env DEPS=1 bench/micro/callgrind.sh $build/bench/micro/weft-bench-micro 20000 40000" \
                 "^instructions per task: [0-9.]*  ((" ; do
    grep -q -- "$pattern" "$tmp/report.md" || fail "the report lacks '$pattern'"
  done
  [[ $(grep -c "^instructions per task: " "$tmp/report.md") == 4 ]] || fail "not 4 instruction counts"
else
  grep -q "^Skipped: valgrind is not installed" "$tmp/report.md" || fail "no reason for the skipped section"
fi

if ((fails)); then
  echo "--- report ---"
  cat "$tmp/report.md" 2>/dev/null
  exit 1
fi
echo "bench-report: all checks passed"
