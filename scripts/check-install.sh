#!/usr/bin/env bash
# Installs a configured+built weft tree into a temporary prefix and builds and runs the out-of-tree project
# examples/consumer against it (find_package(weft) + weft::weft), as a user's project would.
# Built with the default compiler, then with clang++-16 when installed.
#
#   bash scripts/check-install.sh [BUILD_DIR]     # default build/release
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${1:-build/release}
if [[ ! -f "$build_dir/cmake_install.cmake" ]]; then
  echo "check-install.sh: '$build_dir' is not a configured build tree (run: cmake --preset release && cmake --build --preset release)" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

echo "+ cmake --install $build_dir --prefix $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
[[ -f "$prefix/include/weft/weft.hpp" ]] || { echo "check-install.sh: include/weft/weft.hpp not installed" >&2; exit 1; }
config=$(find "$prefix" -name weftConfig.cmake -print -quit)
[[ -n "$config" ]] || { echo "check-install.sh: weftConfig.cmake not installed" >&2; exit 1; }
echo "  installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

echo "+ configure + build examples/consumer with -DCMAKE_PREFIX_PATH=$prefix"
cmake -S examples/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
grep -F -- "-- weft " "$tmp/configure.log" || true
cmake --build "$tmp/consumer" || exit 1

echo "+ run weft-consumer"
"$tmp/consumer/weft-consumer"

# The library is built by GCC; a user's program may be built by Clang (the headers are compiled by the user's
# compiler): the same consumer again with Clang 16 (which scripts/install-deps.sh installs for the peers).
if command -v clang++-16 >/dev/null; then
  echo "+ configure + build examples/consumer with clang++-16"
  cmake -S examples/consumer -B "$tmp/consumer-clang" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure-clang.log" 2>&1 ||
    { cat "$tmp/configure-clang.log"; exit 1; }
  cmake --build "$tmp/consumer-clang" || exit 1
  echo "+ run weft-consumer (clang++-16)"
  "$tmp/consumer-clang/weft-consumer"
else
  echo "check-install.sh: clang++-16 not installed: the consumer is built with the default compiler only"
fi
