#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs them all; the raw console output of each goes to
# $OUT_DIR/<name>.txt (and JSON to <name>.json), and everything is also printed here.
#
#   bench/run_all.sh                  # build in build-bench/, write to build-bench/bench-results/
#   BUILD_DIR=/tmp/b OUT_DIR=/tmp/r REPS=5 MIN_TIME=1 bench/run_all.sh
#
# The latency and throughput benchmarks run REPS repetitions of MIN_TIME seconds each (defaults 5
# and 1: a few seconds per benchmark on a 2-core machine), randomly interleaved with their
# floors, so a burst of load from another process hits a floor and its measurement alike; the
# ratios printed at the end use the medians. startup_bench runs a fixed 3 iterations (each
# starts and stops a 64-worker cluster).
#
# On a shared machine the script waits before each binary (at most WAIT_S seconds, default 900)
# until other processes keep the CPUs less than MAX_BUSY percent busy over 3 s (default 15); the
# CPU use and the load average are printed either way. The load average includes the
# benchmarks' own processes once they have run (it decays over about a minute).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-bench}"
OUT_DIR="${OUT_DIR:-$BUILD_DIR/bench-results}"
REPS="${REPS:-5}"
MIN_TIME="${MIN_TIME:-1}"
JOBS="${JOBS:-2}"
MAX_BUSY="${MAX_BUSY:-15}"
WAIT_S="${WAIT_S:-900}"

cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTROUPE_BUILD_TESTS=OFF \
  -DTROUPE_BUILD_BENCH=ON >/dev/null
make --no-print-directory -C "$BUILD_DIR" -j"$JOBS" call_latency_bench throughput_bench \
  startup_bench death_bench control_plane_bench multihost_bench troupe_cli

# Percent of all CPUs busy over the next 3 s (with no benchmark running: other processes' use).
cpu_busy() {
  local a b
  read -r -a a < <(grep '^cpu ' /proc/stat)
  sleep 3
  read -r -a b < <(grep '^cpu ' /proc/stat)
  local total=0 idle i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  idle=$((b[4] - a[4] + b[5] - a[5]))
  echo $((total > 0 ? 100 * (total - idle) / total : 0))
}
# Waits (at most WAIT_S seconds) until other processes keep the CPUs less than MAX_BUSY % busy.
wait_quiet() {
  local waited=0 busy
  while busy=$(cpu_busy) && ((busy >= MAX_BUSY)); do
    if ((waited >= WAIT_S)); then
      echo "warning: CPUs still ${busy}% busy after ${WAIT_S}s; measuring anyway" >&2
      break
    fi
    echo "waiting: CPUs ${busy}% busy (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    sleep 10
    waited=$((waited + 13))
  done
  echo "CPUs busy before the run: ${busy}% (load average $(cut -d' ' -f1-3 /proc/loadavg))"
}

mkdir -p "$OUT_DIR"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (uncommitted changes in the tree)')"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "kernel: $(uname -r)"
} | tee "$OUT_DIR/machine.txt"

for name in call_latency_bench throughput_bench startup_bench death_bench control_plane_bench; do
  args=(--benchmark_out="$OUT_DIR/$name.json" --benchmark_out_format=json --benchmark_color=false)
  if [[ "$name" != startup_bench && "$name" != death_bench ]]; then
    args+=(--benchmark_min_time="$MIN_TIME" --benchmark_repetitions="$REPS"
      --benchmark_enable_random_interleaving=true)
  fi
  echo
  wait_quiet | tee -a "$OUT_DIR/machine.txt"
  echo "\$ $name ${args[*]}"
  "$BUILD_DIR/bench/$name" "${args[@]}" 2>&1 | tee "$OUT_DIR/$name.txt"
done

# Across network-namespace hosts (needs root): bench/multihost_bench.sh.
echo
if ((EUID == 0)); then
  wait_quiet | tee -a "$OUT_DIR/machine.txt"
  echo "\$ bench/multihost_bench.sh $BUILD_DIR"
  bash "$ROOT/bench/multihost_bench.sh" "$BUILD_DIR" 2>&1 | tee "$OUT_DIR/multihost_bench.txt"
else
  echo "multihost_bench: skipped (needs root for network namespaces)"
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT_DIR/machine.txt"
sleep 1
if left=$(pgrep -a -f "$BUILD_DIR/bench/"); then
  echo "PROCESSES LEFT BEHIND:"
  echo "$left"
else
  echo "no benchmark process left behind"
fi
