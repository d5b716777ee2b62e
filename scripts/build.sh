#!/usr/bin/env bash
# Usage: scripts/build.sh [release|asan|tsan|fuzz] [TARGET...]
#   release (default): build/      -DCMAKE_BUILD_TYPE=RelWithDebInfo (-O2; debug info: see below)
#   asan:              build-asan/ -DTROUPE_SANITIZE=ON (ASan + UBSan), Debug, no benchmarks
#   tsan:              build-tsan/ -DTROUPE_SANITIZE_THREAD=ON (ThreadSanitizer), RelWithDebInfo,
#                      no benchmarks
#   fuzz:              build-fuzz/ clang++-14, only the libFuzzer target wire_fuzz (scripts/fuzz.sh)
# TARGETs: build only those (e.g. troupe_cli, the `troupe` command); default: everything the
# variant configures. Reuses an existing build directory (re-running configure is cheap and picks
# up CMake changes).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-release}
shift $(($# > 0 ? 1 : 0))
targets=()
case "$mode" in
  release)
    dir=build
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
    ;;
  asan)
    dir=build-asan
    args=(-DTROUPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DTROUPE_BUILD_BENCH=OFF)
    ;;
  tsan)
    dir=build-tsan
    args=(-DTROUPE_SANITIZE_THREAD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_BUILD_BENCH=OFF)
    ;;
  fuzz)
    dir=build-fuzz
    args=(-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_BUILD_FUZZ=ON
      -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_BENCH=OFF)
    targets=(--target wire_fuzz)
    ;;
  *)
    echo "usage: $0 [release|asan|tsan|fuzz]" >&2
    exit 2
    ;;
esac

if (($# > 0)); then
  targets=(--target "$@")
fi
# Debug information: line tables only (-g1) unless TROUPE_FULL_DEBUG=1 (-g, for a debugger's
# view of variables and types). Line tables are what stacks need (eu-stack, `troupe stack`,
# sanitizer reports), and -g took twice the compile time of -g1 on the library.
debug=-g1
[[ "${TROUPE_FULL_DEBUG:-0}" == 1 ]] && debug=-g
args+=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $debug -DNDEBUG" -DCMAKE_CXX_FLAGS_DEBUG="$debug")
# Unity build (CMakeLists.txt: TROUPE_UNITY_BUILD) unless TROUPE_UNITY=0, e.g. for incremental
# work on one file.
args+=(-DTROUPE_UNITY_BUILD="$([[ "${TROUPE_UNITY:-1}" == 0 ]] && echo OFF || echo ON)")
cmake -S . -B "$dir" "${args[@]}"
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
