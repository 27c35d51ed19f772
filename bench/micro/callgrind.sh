#!/usr/bin/env bash
# Instructions per task of weft's single-worker chain, counted by valgrind --tool=callgrind.
#
#   bench/micro/callgrind.sh [BINARY] [N1] [N2]
#
# Runs `weft-bench-micro --only=$SYSTEM --bench=chain --deps=$DEPS --tasks=N` (one worker, no warm-up, one
# repetition) under callgrind for N = N1 and N = N2 (default 200000 and 400000) and prints
# (Ir(N2) - Ir(N1)) / (N2 - N1): the instructions per task, with start-up and tear-down costs cancelled.
# BINARY defaults to $WEFT_BENCH_MICRO, else the first of build/release/bench/micro/weft-bench-micro (the
# "release" preset) and build/bench/micro/weft-bench-micro under the repository root.
# DEPS (environment, default 1): addresses each task accesses inout (1..6), or flows per task for SYSTEM=flow
# (0..6). SYSTEM (environment, default weft): weft, flow or flow-copy (flow graphs, weft/flow.hpp).
# BENCH=replay (environment): instead, the taskiter replay of the chain: `--bench=replay --replay-graphs=chain
# --replay-modes=taskiter` with 1000 tasks per iteration and N1, N2 iterations (default 200 and 400); prints the
# instructions per replayed task, (Ir(N2) - Ir(N1)) / ((N2 - N1) * 1000).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-${WEFT_BENCH_MICRO:-}}
# shellcheck source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"
[[ -n $bin ]] || bin=$(default_bench_micro "$root")
bench=${BENCH:-chain}
per_unit=1  # tasks per unit of N
if [[ $bench == replay ]]; then
  n1=${2:-200}
  n2=${3:-400}
  per_unit=1000
elif [[ $bench == chain ]]; then
  n1=${2:-200000}
  n2=${3:-400000}
else
  echo "callgrind.sh: BENCH must be chain or replay (got $bench)" >&2
  exit 2
fi
deps=${DEPS:-1}
system=${SYSTEM:-weft}

if ! command -v valgrind >/dev/null 2>&1; then
  echo "callgrind.sh: valgrind not found (Debian package: valgrind)" >&2
  exit 2
fi
if [[ ! -x $bin ]]; then
  echo "callgrind.sh: $bin not found; build it (cmake --preset release && cmake --build --preset release)" \
    "or pass its path" >&2
  exit 2
fi
if ! [[ $n1 =~ ^[0-9]+$ && $n2 =~ ^[0-9]+$ ]] || ((n2 <= n1)); then
  echo "callgrind.sh: N1 and N2 must be integers with N2 > N1 (got $n1 $n2)" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prints the total instruction count (Ir) of one run with N tasks.
count() {
  local n=$1
  local args=(--only="$system" --bench=chain --deps="$deps" --tasks="$n")
  if [[ $bench == replay ]]; then
    args=(--only=weft --bench=replay --replay-graphs=chain --replay-modes=taskiter --replay-tasks=$per_unit
          --replay-iters="$n")
  fi
  if ! valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind.$n" \
      "$bin" "${args[@]}" --reps=1 --no-warmup --no-quiesce \
      >"$tmp/stdout.$n" 2>"$tmp/stderr.$n"; then
    echo "callgrind.sh: the run with $n tasks failed:" >&2
    cat "$tmp/stdout.$n" "$tmp/stderr.$n" >&2
    exit 1
  fi
  local ir
  ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$tmp/callgrind.$n")
  if [[ -z $ir ]]; then
    echo "callgrind.sh: no instruction total in the callgrind output for $n tasks" >&2
    exit 1
  fi
  echo "$ir"
}

if [[ $bench == replay ]]; then
  echo "callgrind: weft taskiter replay of a chain of $per_unit tasks, 1 worker: $bin"
  unit="iterations"
else
  echo "callgrind: $system chain, 1 worker, deps=$deps: $bin"
  unit="tasks"
fi
ir1=$(count "$n1")
echo "  $n1 $unit: $ir1 instructions"
ir2=$(count "$n2")
echo "  $n2 $unit: $ir2 instructions"
awk -v a="$ir1" -v b="$ir2" -v n1="$n1" -v n2="$n2" -v k="$per_unit" \
  'BEGIN { printf "instructions per task: %.1f  ((%d - %d) / ((%d - %d) * %d))\n", (b - a) / ((n2 - n1) * k), b, a, n2, n1, k }'
