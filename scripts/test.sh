#!/usr/bin/env bash
# weft's test suite, start to finish:
#   1. deps     scripts/install-deps.sh (installs only what is missing; nothing to do on a ready machine)
#   2. release  configure + build the `release` preset, run every ctest test
#   3. debug    only with --with-debug: build the `debug` preset (no optimisation, internal invariant checks
#               WEFT_ASSERT, libstdc++ assertions), run every test but the Python tools' (randomized tests at
#               WEFT_TEST_SCALE=0.4). The asan stage has the same checks, so CI leaves this one out.
#   4. tsan     build the `tsan` preset (ThreadSanitizer), run the tests labelled `concurrency` (randomized
#               tests at WEFT_TEST_SCALE=0.3)
#   5. asan     build the `asan` preset (AddressSanitizer + UBSan, leak checks on, with the internal invariant
#               checks and libstdc++ assertions), run every test but the Python tools' (randomized tests at
#               WEFT_TEST_SCALE=0.5)
#   6. mpich    the MPI tests again with MPICH instead of Open MPI: configure + build the `mpich` preset (the
#               programs of the tests labelled mpi only), run the tests labelled mpi but the deep runs of the
#               cluster differential test; skipped, with a note, when
#               MPICH (/usr/bin/mpicxx.mpich, /usr/bin/mpiexec.mpich) is not installed
#   7. install  install build/release into a temporary prefix, build and run examples/consumer against it
# The MPI communication layer's tests (label mpi, jobs of 1 to 4 ranks under mpiexec) are ctest tests: they run
# in every stage that runs the whole suite (with Open MPI, the default mpi alternative), in tsan for the transport
# and termination jobs, and in mpich.
# Stops at the first failing stage (unless --keep-going).
#
#   bash scripts/test.sh [--quick] [--no-deps] [--keep-going] [--with-debug] [--skip-tsan] [--skip-asan]
#                        [--skip-mpich] [--skip-install]
#     --quick         release stage only (2)
#     --with-debug    run the debug stage (3) too
#     --no-deps       do not run scripts/install-deps.sh
#     --keep-going    run the later stages even after a failure (exit status 1 at the end all the same)
#     -j N            build jobs (default: number of cores); ctest always runs -j2
set -euo pipefail
self=$(realpath "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/.."

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$self"; }

do_deps=1 do_release=1 do_debug=0 do_tsan=1 do_asan=1 do_mpich=1 do_install=1 keep_going=0
jobs=$(nproc 2>/dev/null || echo 2)
test_timeout=600  # seconds, for a test that sets no TIMEOUT of its own: a hang fails instead of stalling CI
while (($#)); do
  case "$1" in
    --quick) do_debug=0 do_tsan=0 do_asan=0 do_mpich=0 do_install=0 ;;
    --no-deps) do_deps=0 ;;
    --keep-going) keep_going=1 ;;
    --with-debug) do_debug=1 ;;
    --skip-debug) do_debug=0 ;;  # the default; kept for scripts that pass it
    --skip-tsan) do_tsan=0 ;;
    --skip-asan) do_asan=0 ;;
    --skip-mpich) do_mpich=0 ;;
    --skip-install) do_install=0 ;;
    -j) shift; jobs=${1:?-j needs a number} ;;
    -j*) jobs=${1#-j} ;;
    -h|--help) usage; exit 0 ;;
    *) echo "test.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

t_start=$SECONDS
passed=0 failed=0
summary=()

# stage NAME COMMAND...: runs COMMAND, records its time; on failure prints which stage failed and exits.
stage() {
  local name=$1; shift
  local t0=$SECONDS
  echo
  echo "==== test.sh: stage '$name' ===="
  if "$@"; then
    passed=$((passed + 1))
    summary+=("$name ok ($((SECONDS - t0))s)")
  else
    local rc=$?
    summary+=("$name FAILED ($((SECONDS - t0))s)")
    failed=$((failed + 1))
    echo
    if ((keep_going)); then
      echo "test.sh: FAILED at stage '$name' (exit status $rc); going on (--keep-going)."
      return 0
    fi
    echo "test.sh: FAILED at stage '$name' (exit status $rc); stopping here."
    echo "test.sh: stages: ${summary[*]}; total $((SECONDS - t_start))s"
    echo "test.sh: $passed passed, $failed failed"
    exit 1
  fi
}

configure_build() {  # PRESET
  cmake --preset "$1" && cmake --build --preset "$1" -j "$jobs"
}

run_ctest() {  # PRESET [ctest args...]: every test, or those the arguments select
  local preset=$1; shift
  ctest --test-dir "build/$preset" --output-on-failure -j2 --no-tests=error --timeout "$test_timeout" "$@"
}

release() {
  configure_build release && run_ctest release
}

# CI's time is bounded (30 minutes on 2 cores): the stages after release run the randomized tests at a smaller
# scale (WEFT_TEST_SCALE: fewer random programs; release runs them whole) and leave the Python tools' tests
# (label tools, no C++ of weft's own to check) to release; the asan stage carries the internal checks, so the
# debug stage (one more build) runs only when asked for.
debug() {
  configure_build debug && WEFT_TEST_SCALE=${WEFT_TEST_SCALE:-0.4} run_ctest debug -LE tools
}

tsan() {
  configure_build tsan || return
  local -a prefix=()
  # GCC 12's ThreadSanitizer cannot map its shadow memory with more than 28 bits of mmap randomisation:
  # run without address-space randomisation there.
  local bits
  bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)
  if ((bits > 28)) && setarch "$(uname -m)" -R true 2>/dev/null; then
    echo "test.sh: vm.mmap_rnd_bits=$bits: running the TSan tests with ASLR disabled (setarch -R)"
    prefix=(setarch "$(uname -m)" -R)
  fi
  WEFT_TEST_SCALE=${WEFT_TEST_SCALE:-0.3} TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "${prefix[@]}" \
    ctest --test-dir build/tsan --output-on-failure -j2 --no-tests=error --timeout "$test_timeout" -L concurrency
}

asan() {
  configure_build asan || return
  WEFT_TEST_SCALE=${WEFT_TEST_SCALE:-0.5} ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
    run_ctest asan -LE tools
}

# The paths the `mpich` preset names (Debian's libmpich-dev and mpich); prints those missing.
mpich_missing() {
  local f
  for f in /usr/bin/mpicxx.mpich /usr/bin/mpiexec.mpich; do [[ -x $f ]] || echo -n "$f "; done
}

mpich() {
  # Not the deep runs of the cluster differential test: they search for races between ranks (the release and asan
  # stages run them with Open MPI); this stage checks that everything works with another MPI.
  cmake --preset mpich && cmake --build --preset mpich -j "$jobs" && run_ctest mpich -L mpi -E 'cluster_differential[.]deep'
}

install_check() {
  [[ -f build/release/cmake_install.cmake ]] || configure_build release || return
  bash scripts/check-install.sh build/release
}

echo "test.sh: $(g++ --version | head -1); $(cmake --version | head -1); $jobs build jobs"
if ((do_deps)); then stage deps bash scripts/install-deps.sh; fi
if ((do_release)); then stage release release; fi
if ((do_debug)); then stage debug debug; fi
if ((do_tsan)); then stage tsan tsan; fi
if ((do_asan)); then stage asan asan; fi
if ((do_mpich)); then
  missing=$(mpich_missing)
  if [[ -z $missing ]]; then
    stage mpich mpich
  else
    echo
    echo "==== test.sh: stage 'mpich' ===="
    echo "test.sh: stage 'mpich' skipped: MPICH is not installed (no ${missing% }; Debian: mpich libmpich-dev," \
         "which scripts/install-deps.sh installs)"
    summary+=("mpich skipped (no MPICH)")
  fi
fi
if ((do_install)); then stage install install_check; fi

echo
if ((failed)); then
  echo "test.sh: FAILED: ${summary[*]}; total $((SECONDS - t_start))s"
  echo "test.sh: $passed passed, $failed failed"
  exit 1
fi
echo "test.sh: all stages passed: ${summary[*]}; total $((SECONDS - t_start))s"
echo "test.sh: $passed passed, 0 failed"
