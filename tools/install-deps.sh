#!/usr/bin/env bash
# Makes sure the build and test tools are there: installs the missing Debian packages when run as
# root, otherwise prints the one command that would. Usage: tools/install-deps.sh [test|bench|fuzz]
set -u
want="${1:-test}"
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)
# Google Benchmark: its CMake package (the shim and the allocator benchmark need it).
have_gbench=0
for f in /usr/lib/*/cmake/benchmark/benchmarkConfig.cmake /usr/lib/cmake/benchmark/benchmarkConfig.cmake \
         /usr/local/lib/cmake/benchmark/benchmarkConfig.cmake; do
  [ -f "$f" ] && have_gbench=1
done
[ $have_gbench = 1 ] || need+=(libbenchmark-dev)
# gnuplot is optional: make bench measures without it and says how to draw the figures later.
optional=()
if [ "$want" = fuzz ]; then
  # clang with libFuzzer (the clang_rt fuzzer archive is in libclang-rt-dev)
  command -v clang >/dev/null 2>&1 || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-dev)
fi
if [ "$want" = bench ]; then
  command -v gnuplot >/dev/null 2>&1 || optional+=(gnuplot-nox)
fi
if [ ${#optional[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "memopt: installing ${optional[*]} (apt-get; optional: the figures)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${optional[@]}"; } >/dev/null 2>&1 ||
      echo "memopt: could not install ${optional[*]} (no network?): measuring anyway, figures later" >&2
  else
    echo "memopt: ${optional[*]} not installed (optional, for the figures): sudo apt-get install -y ${optional[*]}" >&2
  fi
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "memopt: installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null && exit 0
  echo "memopt: apt-get could not install ${need[*]}" >&2
  exit 1
fi
echo "memopt: missing ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
exit 1
