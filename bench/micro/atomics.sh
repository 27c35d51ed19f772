#!/usr/bin/env bash
# Atomic read-modify-write instructions per task of weft, counted on the optimized binary: each kind of task
# runs single-threaded under valgrind --tool=callgrind --dump-instr=yes, objdump -d finds the atomic
# instructions of every object that ran, and the executed counts of those instructions are summed.
#
#   bench/micro/atomics.sh [--expect=FILE] [--by-function] [--binary=PATH] [--stencil-binary=PATH] [KIND...]
#
# Counted as atomic RMWs: every `lock`-prefixed instruction and `xchg` with a memory operand (implicitly locked),
# except the fences: `mfence` and `lock or $0,(%rsp)` (GCC's std::atomic_thread_fence(seq_cst)), reported beside
# them (each costs about what an RMW costs, but only orders: it updates no shared datum). Each kind runs at two
# sizes, N1 and N2 tasks, and the figure is (count(N2) - count(N1)) / (N2 - N1): start-up and tear-down cancel.
# One worker (the chains are sequential anyway, and valgrind runs threads one at a time), so every count is
# deterministic: the same binary gives the same figures to the last digit.
#
# KIND (default: all of them):
#   deps1 deps2 deps3 deps6  dependency chain, each task inout on D addresses (the previous task's): --bench=chain
#   stencil1 stencil2 stencil3 stencil6
#                            dependency tasks with D distinct predecessors (weft-bench-stencil D: each task reads
#                            D cells of the previous step and writes its own)
#   independent              tasks without dependencies, spawned by one parent, then one taskwait
#   tree                     binary tree: each inner task spawns two children and waits for them (taskwait)
#   flow0 flow1 flow2 flow6  flow-graph chain (weft/flow.hpp), D flows per task (0: a control edge)
#   replay                   taskiter chain, recorded once and replayed: per replayed task
#   independent2             independent tasks on 2 workers (not in the default list: valgrind interleaves the
#                            threads differently from run to run, so the figures vary; an illustration only)
# --expect=FILE: lines `KIND RMW FENCE` (# comments): the most RMWs and fences per task; fails (exit 1) when a
#   kind exceeds either (figures are printed with two decimals and compared at that precision). Kinds missing
#   from FILE are not checked. Used by the ctest test bench.atomics.
# --by-function: also prints where each kind's RMWs are executed (function, instruction).
# BINARY defaults to $WEFT_BENCH_MICRO, else build/release/bench/micro/weft-bench-micro, else
# build/bench/micro/weft-bench-micro; the stencil binary to weft-bench-stencil beside it. WEFT_* settings in the
# environment are ignored (they would change the counts).
# Exit status: 0; 1 (a count above its bound, or a run failed); 2 (bad usage); 77 (valgrind or objdump missing:
# the ctest test is then skipped).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
all_kinds=(deps1 deps2 deps3 deps6 stencil1 stencil2 stencil3 stencil6 independent tree flow0 flow1 flow2 flow6 replay)

bin=${WEFT_BENCH_MICRO:-}
stencil_bin=
expect=
by_function=0
kinds=()
for a in "$@"; do
  case $a in
    --expect=*) expect=${a#--expect=} ;;
    --by-function) by_function=1 ;;
    --binary=*) bin=${a#--binary=} ;;
    --stencil-binary=*) stencil_bin=${a#--stencil-binary=} ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "atomics.sh: unknown option $a" >&2; exit 2 ;;
    *) kinds+=("$a") ;;
  esac
done
((${#kinds[@]})) || kinds=("${all_kinds[@]}")

for tool in valgrind objdump; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "atomics.sh: $tool not found (Debian packages: valgrind, binutils; scripts/install-deps.sh): not counted" >&2
    exit 77
  fi
done
# shellcheck source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"
[[ -n $bin ]] || bin=$(default_bench_micro "$root")
if [[ ! -x $bin ]]; then
  echo "atomics.sh: $bin not found; build it (cmake --preset release && cmake --build --preset release)" >&2
  exit 2
fi
stencil_bin=${stencil_bin:-$(dirname "$bin")/weft-bench-stencil}
if [[ " ${kinds[*]} " == *" stencil"* && ! -x $stencil_bin ]]; then
  echo "atomics.sh: $stencil_bin not found; build it (target weft-bench-stencil) or pass its path" >&2
  exit 2
fi
expect_text=
if [[ -n $expect ]]; then
  # Read once: FILE may be a pipe (the ctest test that shows the check can fail passes lowered bounds so).
  if ! expect_text=$(cat "$expect" 2>/dev/null); then
    echo "atomics.sh: cannot read $expect" >&2
    exit 2
  fi
fi

# The command for KIND with N units, and the tasks per unit: sets `cmd` and `per_unit`.
# Sizes: a few thousand tasks (seconds under valgrind), both sizes above the default max_tasks window so that
# the spawn/run pattern is the same at both.
kind_args() {
  local kind=$1 n=$2
  per_unit=1
  local common=(--reps=1 --no-warmup --no-quiesce)
  case $kind in
    stencil[1-6]) cmd=("$stencil_bin" "${kind#stencil}" "$n"); return ;;
    deps[1-6]) args=(--only=weft --bench=chain --deps="${kind#deps}" --tasks="$n") ;;
    flow[0-6]) args=(--only=flow --bench=chain --deps="${kind#flow}" --tasks="$n") ;;
    independent) args=(--only=weft --bench=independent --workers=1 --independent-tasks="$n") ;;
    independent2) args=(--only=weft --bench=independent --workers=2 --independent-tasks="$n") ;;
    tree)
      # 2^(H+1) - 1 tasks for height H; the count is given as a height.
      args=(--only=weft --bench=tree --workers=1 --tree=0:"$n") ;;
    replay)
      per_unit=200
      args=(--only=weft --bench=replay --replay-graphs=chain --replay-modes=taskiter --replay-tasks=$per_unit
            --replay-iters="$n") ;;
    *) echo "atomics.sh: unknown kind '$kind' (${all_kinds[*]} independent2)" >&2; exit 2 ;;
  esac
  cmd=("$bin" "${args[@]}" "${common[@]}")
}
sizes() {
  case $1 in
    tree) n1=11; n2=12 ;;   # 4095 and 8191 tasks
    replay) n1=10; n2=20 ;;  # iterations of 200 tasks
    *) n1=4000; n2=8000 ;;
  esac
}
tasks_of() {  # tasks in a run of KIND with N units
  if [[ $1 == tree ]]; then echo $(((1 << ($2 + 1)) - 1)); else echo $(($2 * per_unit)); fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Atomic instructions of one object: lines `ADDRESS KIND INSTRUCTION` (KIND: rmw or fence), addresses as
# callgrind writes them (relative to the object's load address for shared objects, as objdump prints them).
declare -A disassembled=()
atomics_of() {
  local obj=$1 out=$2
  objdump -d --no-show-raw-insn -w "$obj" 2>/dev/null | awk '
    /^ *[0-9a-f]+:\t/ {
      addr = $1; sub(/:$/, "", addr); sub(/^0+/, "", addr)
      ins = $0; sub(/^[^\t]*\t/, "", ins); gsub(/[ \t]+/, " ", ins); sub(/ *#.*$/, "", ins)
      # GCC writes atomic_thread_fence(seq_cst) as a locked or of 0 to the stack: a fence, not an RMW of data.
      if (ins ~ /^mfence/ || ins ~ /^lock or[bwlq]? \$0x0,(-?0x[0-9a-f]+)?\(%rsp\)$/) print "0x" addr, "fence", ins
      else if (ins ~ /^lock / || ins ~ /^xchg[bwlq]? .*\(/) print "0x" addr, "rmw", ins
    }' >>"$out"
}

# Runs KIND with N units under callgrind; writes the executed atomic instructions, `OBJECT FUNCTION KIND COUNT
# INSTRUCTION` lines, to $tmp/KIND.N.
count_run() {
  local kind=$1 n=$2
  kind_args "$kind" "$n"
  local cg=$tmp/cg.$kind.$n
  if ! env $(env | awk -F= '/^WEFT_/ { printf "-u %s ", $1 }') \
      valgrind --tool=callgrind --dump-instr=yes --dump-line=no --compress-pos=no --compress-strings=no \
      --callgrind-out-file="$cg" "${cmd[@]}" \
      >"$tmp/stdout" 2>"$tmp/stderr"; then
    echo "atomics.sh: $kind with $n failed:" >&2
    cat "$tmp/stdout" "$tmp/stderr" >&2
    exit 1
  fi
  local obj
  while IFS= read -r obj; do
    if [[ -z ${disassembled[$obj]:-} && -r $obj ]]; then
      disassembled[$obj]=1
      atomics_of "$obj" "$tmp/atomics.list.tmp"
      awk -v o="$obj" '{ print o "\t" $0 }' "$tmp/atomics.list.tmp" >>"$tmp/atomics.list"
      rm -f "$tmp/atomics.list.tmp"
    fi
  done < <(awk '/^ob=/ { print substr($0, 4) }' "$cg" | sort -u)
  touch "$tmp/atomics.list"
  # A cost line is `ADDRESS COUNT`; the line after `calls=` is the call's inclusive cost, not the instruction's.
  awk -F'\t' -v OFS='\t' '
    FNR == NR { split($2, a, " "); k = $1 SUBSEP a[1]; what[k] = a[2]; ins = $2; sub(/^[^ ]+ [^ ]+ /, "", ins)
                text[k] = ins; next }
    /^ob=/ { ob = substr($0, 4); next }
    /^fn=/ { fn = substr($0, 4); next }
    /^calls=/ { skip = 1; next }
    /^0x/ {
      if (skip) { skip = 0; next }
      split($0, f, " "); k = ob SUBSEP f[1]
      if (k in what) { c[k SUBSEP fn] += f[2] }
    }
    END { for (kf in c) { split(kf, p, SUBSEP); k = p[1] SUBSEP p[2]
            print p[1], p[3], what[k], c[kf], p[2] " " text[k] } }' "$tmp/atomics.list" "$cg" >"$tmp/$kind.$n"
  rm -f "$cg"
}

for kind in "${kinds[@]}"; do kind_args "$kind" 1; done  # unknown kinds: usage error before any run
status=0
printf '%-12s %8s %8s %12s   %s\n' kind "rmw/task" "fence/t" "bound" "tasks (N2 - N1)"
for kind in "${kinds[@]}"; do
  kind_args "$kind" 1
  sizes "$kind"
  count_run "$kind" "$n1"
  count_run "$kind" "$n2"
  t1=$(tasks_of "$kind" "$n1")
  t2=$(tasks_of "$kind" "$n2")
  bound_rmw=
  bound_fence=
  if [[ -n $expect ]]; then
    read -r bound_rmw bound_fence < <(awk -v k="$kind" '!/^#/ && $1 == k { print $2, $3; exit }' <<<"$expect_text") ||
      true
  fi
  # Per task: (count at N2 - count at N1) / (tasks at N2 - tasks at N1), by function and instruction.
  awk -F'\t' -v OFS='\t' -v d=$((t2 - t1)) -v tag="$tmp/$kind.$n1" '
    FILENAME == tag { c[$1 FS $2 FS $3 FS $5] -= $4; next }
    { c[$1 FS $2 FS $3 FS $5] += $4 }
    END { for (k in c) if (c[k] != 0) { split(k, p, FS); printf "%s\t%.4f\t%s\t%s\n", p[3], c[k] / d, p[2], p[4] } }
  ' "$tmp/$kind.$n1" "$tmp/$kind.$n2" | sort -t$'\t' -k2,2gr >"$tmp/$kind.per_task"
  read -r rmw fence < <(awk -F'\t' '{ s[$1] += $2 } END { printf "%.2f %.2f\n", s["rmw"], s["fence"] }' \
    "$tmp/$kind.per_task")
  verdict=
  if [[ -n $bound_rmw ]]; then
    verdict=$(awk -v r="$rmw" -v f="$fence" -v br="$bound_rmw" -v bf="$bound_fence" 'BEGIN {
      if (r + 0 > br + 0 || f + 0 > bf + 0) print "  FAIL: above the bound"
      else if (r + 0 < br + 0 || f + 0 < bf + 0) print "  (below the bound: lower it)" }')
    [[ $verdict == *FAIL* ]] && status=1
  fi
  printf '%-12s %8s %8s %12s   %d%s\n' "$kind" "$rmw" "$fence" "${bound_rmw:--} ${bound_fence:--}" $((t2 - t1)) \
    "$verdict"
  if ((by_function)); then
    awk -F'\t' '{ fn = $3; if (length(fn) > 90) fn = substr(fn, 1, 87) "..."
                  printf "    %-5s %8.4f  %-90s %s\n", $1, $2, fn, $4 }' "$tmp/$kind.per_task"
  fi
done
exit $status
