#!/usr/bin/env bash
# Installs the Debian 12 packages weft needs to build, test and benchmark, and only those that are missing.
#
#   bash scripts/install-deps.sh          # as root: apt-get installs what is missing (nothing if all present)
#   bash scripts/install-deps.sh --check  # only report; exit 1 if something is missing
#
# As a non-root user it prints the apt-get command to run and exits 1 when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build g++           # toolchain (GCC 12 ships the TSan/ASan/UBSan runtimes)
  googletest libgtest-dev                         # tests
  libtbb-dev clang-16 libomp-16-dev               # peers in the benchmarks (oneTBB, LLVM OpenMP)
  libstarpu-dev                                   # Task Bench peer taskbench-starpu (StarPU 1.3, pkg-config)
  openmpi-bin libopenmpi-dev                      # MPI: src/comm and its tests (mpiexec), Task Bench peer
  mpich libmpich-dev                              # the second MPI the tests run on (preset mpich); Open MPI
                                                  # stays the default mpi/mpirun alternative (higher priority)
  libcereal-dev                                   # flow graphs across ranks: values that are not plain bytes
  valgrind                                        # instruction counts (bench/micro/callgrind.sh)
  nlohmann-json3-dev                              # tests: parsing profile and trace files
  python3 python3-numpy python3-matplotlib        # tools: metg (METG sweeps and plots), weft-gantt
  libopenblas-dev liblapacke-dev                  # dense apps across ranks (bench/apps/cluster): BLAS tile
                                                  # kernels (cblas_dgemm...) and LAPACKE_dpotrf; Task Bench's
                                                  # compute_dgemm and memory_daxpy (OpenBLAS only)
)

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  "") ;;
  *) echo "install-deps.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps.sh: dpkg-query not found: not a Debian-like system; make sure these (or equivalents) are installed:" >&2
  echo "  ${PACKAGES[*]}" >&2
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps.sh: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps.sh: missing: ${missing[*]}"
if ((check_only)); then
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps.sh: not root; install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps.sh: installed ${missing[*]}"
