#!/usr/bin/env bash
# Usage: scripts/build.sh [release|asan]
#   release (default): build/      -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   asan:              build-asan/ -DTROUPE_SANITIZE=ON (ASan + UBSan), Debug, no benchmarks
# Reuses an existing build directory (re-running configure is cheap and picks up CMake changes).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-release}
case "$mode" in
  release)
    dir=build
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
    ;;
  asan)
    dir=build-asan
    args=(-DTROUPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DTROUPE_BUILD_BENCH=OFF)
    ;;
  *)
    echo "usage: $0 [release|asan]" >&2
    exit 2
    ;;
esac

cmake -S . -B "$dir" "${args[@]}"
cmake --build "$dir" -j"$(nproc)"
