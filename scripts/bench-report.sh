#!/usr/bin/env bash
# Regenerates, on the current code and this machine, the figures behind BENCHMARKS.md's tables: every benchmark
# program that the document quotes, run side by side with its peers as the document describes, into one
# Markdown report. The report starts with the commit, the date, the machine, the compilers and MPI, and gives,
# for each section: the command, the sections of BENCHMARKS.md it re-measures, the load average before and after
# it, its time, and its output.
#
#   bash scripts/bench-report.sh [--quick] [--out FILE] [--only LIST] [--skip LIST] [--no-build]
#                                [--build-dir DIR] [--list]
#     --quick       short runs (the quick modes of the programs; minutes instead of hours). Use only to check
#                   the report's shape; quote full runs.
#     --out FILE    the report (default: bench-report-<UTC date>-<commit>.md in the current directory)
#     --only LIST   comma-separated sections to run (see --list); --skip LIST: all but these
#     --no-build    use the build as it is (default: configure and build the release preset first)
#     --build-dir DIR  the release build to run (default build/release; implies --no-build)
#     --list        print the sections and the BENCHMARKS.md sections each regenerates, and exit
#
# A section whose program is not built (no MPI, no valgrind, a peer missing) is reported as skipped, with the
# reason; one that fails is reported with its output and exit status, and the others still run. Exit status:
# 0 if every section that ran succeeded, 1 otherwise, 2 for bad options.
#
# Before/after tables in BENCHMARKS.md compare two commits; a report gives the "after" column of today's code.
# To compare commits, run the report on each (interleaving is then up to you: on a shared machine run them in
# turn, more than once, and quote medians and ranges).
set -euo pipefail
self=$(realpath "${BASH_SOURCE[0]}")
root=$(cd "$(dirname "$self")/.." && pwd)
here=$PWD  # --out and --build-dir are relative to where the script was started

# name | BENCHMARKS.md sections | what it measures
sections=(
  "micro|1, 2, 4.1, 22|chain, tree and independent tasks, taskiter replay and flow graphs against the peers"
  "instructions|7.1, 4.1, 25, 41.1, 42.1|instructions per task on one worker (valgrind --tool=callgrind)"
  "atomics|19|atomic read-modify-writes per task, by kind of task"
  "metg|3.1, 10.2, 15.1|Task Bench METG(50%), stencil_1d, every built system"
  "metg-vary|23|METG against dependencies per task, bytes per dependency, imbalance and concurrent graphs"
  "apps|4.2, 26, 43.2|the iterative applications: taskiter against plain tasks, replay with a barrier and OpenMP"
  "dense|16, 21.1|dense applications on 2 ranks: weft offload, MPI + weft, MPI + OpenMP"
  "cluster|17, 21.2, 40.1|the costs of offloaded tasks on 2 ranks against raw MPI; the hop between third ranks (3)"
  "dist|9, 11|flow graphs across 2 ranks against raw MPI"
  "comm|8|the transport: latency and bandwidth against raw MPI"
  "halo|12|MPI inside tasks: the halo application, 2 ranks"
  "hpccg|13|MPI inside tasks: HPCCG, 2 ranks"
)

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$self"; }
die() { echo "bench-report.sh: $*" >&2; exit 2; }

quick=0 build=1 out="" only="" skip="" rel=build/release
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --build-dir) (($# >= 2)) || die "--build-dir needs a directory"; rel=$2; build=0; shift ;;
    --build-dir=*) rel=${1#--build-dir=}; build=0 ;;
    --out) (($# >= 2)) || die "--out needs a file"; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --only) (($# >= 2)) || die "--only needs a list"; only=$2; shift ;;
    --only=*) only=${1#--only=} ;;
    --skip) (($# >= 2)) || die "--skip needs a list"; skip=$2; shift ;;
    --skip=*) skip=${1#--skip=} ;;
    --list)
      for s in "${sections[@]}"; do IFS='|' read -r n b w <<<"$s"; printf '%-13s BENCHMARKS.md %-16s %s\n' "$n" "$b" "$w"; done
      exit 0 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[[ -n $only && -n $skip ]] && die "--only and --skip exclude each other"
abs() { if [[ $1 == /* ]]; then echo "$1"; else echo "$here/$1"; fi; }
[[ $rel == build/release ]] && rel=$root/build/release || rel=$(abs "$rel")

names=()
for s in "${sections[@]}"; do names+=("${s%%|*}"); done
check_list() {  # every name of a comma-separated list is a section
  local x
  IFS=',' read -ra xs <<<"$1"
  ((${#xs[@]})) || die "an empty section list"
  for x in "${xs[@]}"; do
    [[ " ${names[*]} " == *" $x "* ]] || die "no section '$x' (sections: ${names[*]})"
  done
}
[[ -n $only ]] && check_list "$only"
[[ -n $skip ]] && check_list "$skip"
wanted() {
  if [[ -n $only ]]; then [[ ",$only," == *",$1,"* ]]; return; fi
  [[ ",$skip," != *",$1,"* ]]
}

cd "$root"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $commit != unknown ]] && ! git diff --quiet HEAD 2>/dev/null; then commit="$commit (with uncommitted changes)"; fi
[[ -n $out ]] || out="bench-report-$(date -u +%Y%m%d-%H%M)-${commit%% *}.md"
out=$(abs "$out")
: >"$out" || die "cannot write $out"

if ((build)); then
  echo "bench-report.sh: building the release preset"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
fi
# Open MPI's shared-memory single copy (CMA) is left as the environment has it: BENCHMARKS.md's tables were
# measured with it (section 16 shows both; without it, weft's Cholesky variants lose 12-49% here). In a
# container that refuses CMA, set OMPI_MCA_btl_vader_single_copy_mechanism=none; the header says which.
mpi_env=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
mpirun2() { env "${mpi_env[@]}" timeout 1800 mpirun -np 2 --bind-to none "$@"; }
mpirun3() { env "${mpi_env[@]}" timeout 1800 mpirun -np 3 --oversubscribe --bind-to none "$@"; }
have_mpi() { command -v mpirun >/dev/null 2>&1; }
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }

{
  echo "# weft benchmark report"
  echo
  if ((quick)); then
    echo "Generated by \`scripts/bench-report.sh --quick\`: short runs, to check the report's shape; do not quote"
    echo "these figures."
  else
    echo "Generated by \`scripts/bench-report.sh\`, which re-measures what BENCHMARKS.md's tables quote."
  fi
  echo
  echo "| | |"
  echo "| --- | --- |"
  echo "| commit | $commit |"
  echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
  echo "| CPU | $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1) |"
  echo "| cores (online) | $(nproc 2>/dev/null || echo unknown) |"
  echo "| memory | $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null) |"
  echo "| system | $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), Linux $(uname -r) |"
  echo "| compiler | $(c++ --version 2>/dev/null | head -1) |"
  echo "| MPI | $(have_mpi && mpirun --version 2>/dev/null | head -1 || echo none) |"
  echo "| Open MPI single copy | ${OMPI_MCA_btl_vader_single_copy_mechanism:-default (CMA where the system allows it)} |"
  echo "| load average at the start | $(load) |"
  echo
} >>"$out"

status=0
ran=0
# section NAME COMMAND...: runs COMMAND (a function or program), appends its output to the report.
section() {
  local name=$1
  shift
  local line b w
  for line in "${sections[@]}"; do [[ ${line%%|*} == "$name" ]] && IFS='|' read -r _ b w <<<"$line"; done
  echo "bench-report.sh: $name"
  local before start rc=0 tmp
  before=$(load)
  start=$SECONDS
  tmp=$(mktemp)
  # A subshell: a runner that skips exits 3 (need), one whose command failed exits 1 (run).
  (
    failed=0
    "$@"
    exit $failed
  ) >"$tmp" 2>&1 || rc=$?
  {
    echo "## $name: $w"
    echo
    echo "Re-measures BENCHMARKS.md section(s) $b. Load average before: $before; after: $(load); $((SECONDS - start)) s."
    echo
    if ((rc == 3)); then
      echo "Skipped: $(tail -1 "$tmp")"
    else
      if ((rc)); then
        echo "**Failed (exit status $rc).**"
        echo
      fi
      echo '```'
      cat "$tmp"
      echo '```'
    fi
    echo
  } >>"$out"
  rm -f "$tmp"
  if ((rc == 3)); then return 0; fi
  ran=$((ran + 1))
  ((rc == 0)) || status=1
}
# Each runner prints its commands and their output; one that cannot run here prints why and exits 3 (skipped).
need() {  # need FILE...: skip unless every file is executable
  local f
  for f in "$@"; do
    [[ -x $f ]] || { echo "$f is not built"; exit 3; }
  done
}
run() {  # run COMMAND...: prints it, runs it; a failure is reported and marks the section failed
  local shown="$*"
  echo "\$ ${shown/#mpirun2/mpirun -np 2 --bind-to none}"
  local rc=0
  "$@" || rc=$?
  if ((rc)); then
    echo "(exit status $rc)"
    failed=1
  fi
  return 0
}

micro() {
  need "$rel/bench/micro/weft-bench-micro"
  local q=()
  ((quick)) && q=(--quick)
  run "$rel/bench/micro/weft-bench-micro" "${q[@]}"
}
instructions() {
  command -v valgrind >/dev/null 2>&1 || { echo "valgrind is not installed"; exit 3; }
  need "$rel/bench/micro/weft-bench-micro"
  local bin=$rel/bench/micro/weft-bench-micro n=() nr=() d
  ((quick)) && n=(20000 40000) nr=(20 40)
  for d in 1 6; do run env DEPS=$d bench/micro/callgrind.sh "$bin" "${n[@]}"; done
  run env SYSTEM=flow DEPS=1 bench/micro/callgrind.sh "$bin" "${n[@]}"
  run env BENCH=replay bench/micro/callgrind.sh "$bin" "${nr[@]}"
}
atomics() {
  command -v valgrind >/dev/null 2>&1 || { echo "valgrind is not installed"; exit 3; }
  need "$rel/bench/micro/weft-bench-micro" "$rel/bench/micro/weft-bench-stencil"
  local bins=(--binary="$rel/bench/micro/weft-bench-micro" --stencil-binary="$rel/bench/micro/weft-bench-stencil")
  if ((quick)); then
    run bench/micro/atomics.sh "${bins[@]}" deps1 flow1 replay
  else
    run bench/micro/atomics.sh "${bins[@]}" --expect=bench/micro/atomics.expected
  fi
}
metg() {
  need tools/metg
  local q=()
  ((quick)) && q=(--quick)
  local dir
  dir=$(mktemp -d)
  run tools/metg "${q[@]}" --bin "$rel/bench/taskbench" --out "$dir"
  rm -rf "$dir"
}
metg_vary() {  # the commands of BENCHMARKS.md section 23 (its tables came from tools/metg's --quick preset)
  need tools/metg
  local dir common=(--quick --cores 2 --bin "$rel/bench/taskbench")
  dir=$(mktemp -d)
  if ((quick)); then
    run tools/metg "${common[@]}" --out "$dir/radix" --type nearest --width-per-core 5 --vary radix=1,5
  else
    run tools/metg "${common[@]}" --out "$dir/radix" --type nearest --width-per-core 5 --vary radix=0,1,3,5,7,9
    run tools/metg "${common[@]}" --out "$dir/output" --vary output=16,256,4096,65536
    run tools/metg "${common[@]}" --out "$dir/imbalance" --vary imbalance=0,0.5,1,2
    run tools/metg "${common[@]}" --out "$dir/graphs" --type nearest --radix 5 --width-per-core 3 --vary graphs=1,4
  fi
  rm -rf "$dir"
}
apps() {
  need "$rel/bench/apps/weft-apps"
  local q=(--reps 3)
  ((quick)) && q=(--reps 1 --quick)
  local py
  py=$(. tools/python.sh && weft_python bench-report.sh && echo "$WEFT_PY") || { echo "no Python 3"; exit 3; }
  run "$py" bench/apps/compare.py --build "$rel" --workers 2 "${q[@]}"
}
# mpi_bench PROGRAM ARGS...: PROGRAM (under the build) on 2 ranks.
mpi_bench() {
  have_mpi || { echo "no mpirun"; exit 3; }
  need "$rel/$1"
  local bin=$rel/$1
  shift
  run mpirun2 "$bin" "$@"
}
dense() {
  local app q=(--reps=5)
  ((quick)) && q=(--quick --reps=1)
  for app in matvec matmul jacobi cholesky; do mpi_bench bench/apps/cluster/weft-dense-mpi --app=$app "${q[@]}"; done
}
cluster() {
  if ((quick)); then mpi_bench bench/comm/weft-bench-cluster --reps=1 --hops=200 --tasks=2000
  else mpi_bench bench/comm/weft-bench-cluster --reps=5; fi
  # 3 ranks: direct satisfaction against the way through rank 0 (more processes than cores here: oversubscribed)
  if ((quick)); then run mpirun3 "$rel/bench/comm/weft-bench-cluster" --reps=1 --hops=200
  else run mpirun3 "$rel/bench/comm/weft-bench-cluster" --reps=11 --hops=5000; fi
}
dist() {
  if ((quick)); then mpi_bench bench/comm/weft-bench-dist --reps=1 --hops=2000 --fences=200 --depth=10
  else mpi_bench bench/comm/weft-bench-dist; fi
}
comm() {
  if ((quick)); then mpi_bench bench/comm/weft-bench-comm --reps=1
  else mpi_bench bench/comm/weft-bench-comm; fi
}
halo() {  # checked once, then timed
  local q=()
  ((quick)) && q=(--iters=20 --reps=1)
  mpi_bench bench/apps/weft-halo-mpi --check "${q[@]}"
  mpi_bench bench/apps/weft-halo-mpi "${q[@]}"
}
hpccg() {
  if ((quick)); then mpi_bench bench/apps/weft-hpccg-mpi --iters=10 --reps=1
  else mpi_bench bench/apps/weft-hpccg-mpi; fi
}

for n in "${names[@]}"; do
  wanted "$n" || continue
  section "$n" "${n//-/_}"
done

echo "load average at the end: $(load)" >>"$out"
echo "bench-report.sh: $ran section(s) run; report: $out"
exit $status
