#!/usr/bin/env bash
# weft's main job: installs what is missing (scripts/install-deps.sh), builds the `release` preset, then runs
# weft side by side with its peers on this machine, printing their tables:
#   1. the micro-benchmarks (bench/micro/weft-bench-micro: chain, tree, independent, taskiter replay, flow graphs)
#   2. the Task Bench METG comparison (tools/metg: stencil_1d, 1 and 2 cores, every built system; when weft is
#      built with MPI and mpirun is found, the 2-core table also has the 2-rank runs: taskbench-mpi, and weft's
#      flow graphs on 2 ranks of 1 worker, weft-flow@mpi)
#   3. when weft is built with MPI: flow graphs across 2 ranks against raw MPI (bench/comm/weft-bench-dist:
#      hop between ranks, empty fence, binary tree spread over the ranks)
# All in their quick modes (about 6 minutes in all on 2 cores).
#
#   bash scripts/main.sh [--no-deps] [--full] [--no-micro] [--no-metg] [-- ARGS...]
#     --no-deps   do not run scripts/install-deps.sh
#     --full      run both without --quick (long: an hour or more)
#     --no-micro  skip the micro-benchmarks
#     --no-metg   skip the METG comparison
#     --no-dist   skip the comparison across ranks
#     ARGS        passed on to the micro-benchmark program
set -euo pipefail
self=$(realpath "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/.."

do_deps=1 do_micro=1 do_metg=1 do_dist=1
mode=(--quick)
extra=()
while (($#)); do
  case "$1" in
    --no-deps) do_deps=0 ;;
    --full) mode=() ;;
    --no-micro) do_micro=0 ;;
    --no-metg) do_metg=0 ;;
    --no-dist) do_dist=0 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$self"; exit 0 ;;
    *) extra+=("$1") ;;
  esac
  shift
done

if ((do_deps)); then bash scripts/install-deps.sh; fi

echo "main.sh: building the release preset"
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)"

micro() {
  local bench=build/release/bench/micro/weft-bench-micro
  if [[ ! -x "$bench" ]]; then
    echo "main.sh: no $bench (is bench/ built? WEFT_BUILD_BENCH=ON)" >&2
    return 1
  fi
  echo "main.sh: $bench ${mode[*]} ${extra[*]}"
  echo
  "$bench" "${mode[@]}" "${extra[@]}"
}

metg() {
  echo
  echo "main.sh: tools/metg ${mode[*]} --bin build/release/bench/taskbench"
  tools/metg "${mode[@]}" --bin build/release/bench/taskbench
}

dist() {
  local bench=build/release/bench/comm/weft-bench-dist
  if [[ ! -x "$bench" ]] || ! command -v mpirun >/dev/null 2>&1; then
    echo
    echo "main.sh: no $bench or no mpirun (weft built without MPI): no comparison across ranks"
    return 0
  fi
  local quick=()
  ((${#mode[@]})) && quick=(--reps=5 --hops=10000 --fences=1000 --depth=13)
  echo
  echo "main.sh: mpirun -np 2 --bind-to none $bench ${quick[*]}"
  # Open MPI as root needs the two variables; in containers its shared-memory transport needs the third
  # (README, "Across processes").
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
    timeout 600 mpirun -np 2 --bind-to none "$bench" "${quick[@]}"
}

status=0
if ((do_micro)); then micro || status=1; fi
if ((do_metg)); then metg || status=1; fi
if ((do_dist)); then dist || status=1; fi
exit $status
