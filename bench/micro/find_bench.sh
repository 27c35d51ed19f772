# Sourced by callgrind.sh and atomics.sh: default_bench_micro ROOT prints the weft-bench-micro binary to use
# when none is given: the first built of the `release` preset's and a plain build's, else the release path.
default_bench_micro() {
  local c
  for c in "$1/build/release/bench/micro/weft-bench-micro" "$1/build/bench/micro/weft-bench-micro"; do
    if [[ -x $c ]]; then
      echo "$c"
      return
    fi
  done
  echo "$1/build/release/bench/micro/weft-bench-micro"
}
