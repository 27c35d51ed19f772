#!/usr/bin/env bash
# weft's main job: installs what is missing (scripts/install-deps.sh), builds the `release` preset and runs the
# micro-benchmarks (weft next to its peers) in their quick mode, printing their table.
#
#   bash scripts/main.sh [--no-deps] [--full] [-- ARGS...]
#     --no-deps   do not run scripts/install-deps.sh
#     --full      run the benchmarks without --quick (long)
#     ARGS        passed on to the benchmark program
set -euo pipefail
self=$(realpath "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/.."

do_deps=1
mode=(--quick)
extra=()
while (($#)); do
  case "$1" in
    --no-deps) do_deps=0 ;;
    --full) mode=() ;;
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

bench=build/release/bench/micro/weft-bench-micro
if [[ ! -x "$bench" ]]; then
  bench=$(find build/release -type f -name weft-bench-micro -perm -u+x -print -quit 2>/dev/null || true)
fi
if [[ -z "$bench" || ! -x "$bench" ]]; then
  echo "main.sh: no weft-bench-micro program under build/release (is bench/ built? WEFT_BUILD_BENCH=ON)" >&2
  exit 1
fi

echo "main.sh: $bench ${mode[*]} ${extra[*]}"
echo
"$bench" "${mode[@]}" "${extra[@]}"
