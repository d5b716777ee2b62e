#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs them all; the raw console output of each goes to
# $OUT_DIR/<name>.txt (and JSON to <name>.json), and everything is also printed here. At the end
# it writes $OUT_DIR/summary.md, the issue-10 side-by-side table (bench/summarize.py), which is
# what BENCHMARKS.md pastes at its top.
#
#   bench/run_all.sh                  # build in build-bench/, write to build-bench/bench-results/
#   BUILD_DIR=/tmp/b OUT_DIR=/tmp/r REPS=5 MIN_TIME=1 bench/run_all.sh
#   DATA_BYTES=64M MH_DATA_BYTES=64M REPS=1 MIN_TIME=0.2 WAIT_S=30 bench/run_all.sh   # quick
#
# Bench-only Debian packages, installed here with apt-get when missing (never by
# scripts/setup.sh): openmpi-bin (mpirun, a 64-worker start-up peer) and libzmq3-dev (the
# ZeroMQ REQ/REP round-trip peer; without it call_latency_bench prints that it skipped it).
# Needs root to install; otherwise it says which are missing and goes on.
#
# Binaries run: call_latency_bench, throughput_bench, startup_bench, death_bench,
# control_plane_bench, data_plane_bench (DATA_BYTES, default 1G), bench/python_bench.py (the
# Python peers: multiprocessing.Pipe, Pool.apply_async), and, as root, bench/multihost_bench.sh
# (network-namespace hosts; MH_DATA_BYTES, default 1G).
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
export DATA_BYTES="${DATA_BYTES:-1G}" MH_DATA_BYTES="${MH_DATA_BYTES:-1G}"

BENCH_PACKAGES=(openmpi-bin libzmq3-dev)
missing=()
for p in "${BENCH_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  if ((EUID == 0)); then
    echo "installing bench-only packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
      >/dev/null || { apt-get update >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
        >/dev/null; } || echo "warning: could not install ${missing[*]}; their peers are skipped"
  else
    echo "warning: bench-only packages missing (not root, not installed): ${missing[*]}"
  fi
fi

# Reconfigured every time, so a libzmq installed just now is found.
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTROUPE_BUILD_TESTS=OFF \
  -DTROUPE_BUILD_BENCH=ON >/dev/null
make --no-print-directory -C "$BUILD_DIR" -j"$JOBS" call_latency_bench throughput_bench \
  startup_bench death_bench control_plane_bench data_plane_bench multihost_bench troupe_cli
have_python=1
make --no-print-directory -C "$BUILD_DIR" -j"$JOBS" troupe_python >/dev/null 2>&1 || have_python=0

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

# One Bytes of DATA_BYTES to 8 workers on one host (plain harness: REPS repetitions, at least 3).
echo
wait_quiet | tee -a "$OUT_DIR/machine.txt"
echo "\$ DATA_BYTES=$DATA_BYTES REPS=$((REPS < 3 ? REPS : 3)) data_plane_bench"
REPS=$((REPS < 3 ? REPS : 3)) "$BUILD_DIR/bench/data_plane_bench" 2>&1 |
  tee "$OUT_DIR/data_plane_bench.txt" || echo "data_plane_bench FAILED"

# The Python peers (multiprocessing.Pipe, Pool.apply_async) beside the Python driver.
echo
if ((have_python)); then
  wait_quiet | tee -a "$OUT_DIR/machine.txt"
  echo "\$ PYTHONPATH=$BUILD_DIR/python /usr/bin/python3 bench/python_bench.py --reps $REPS"
  (cd "$ROOT/bench" && PYTHONPATH="$BUILD_DIR/python" /usr/bin/python3 python_bench.py \
    --reps "$REPS") 2>&1 | tee "$OUT_DIR/python_bench.txt" || echo "python_bench FAILED"
else
  echo "python_bench: skipped (the Python package did not build: pybind11-dev missing?)" |
    tee "$OUT_DIR/python_bench.txt"
fi

# Across network-namespace hosts (needs root): bench/multihost_bench.sh.
echo
if ((EUID == 0)); then
  wait_quiet | tee -a "$OUT_DIR/machine.txt"
  echo "\$ bench/multihost_bench.sh $BUILD_DIR"
  bash "$ROOT/bench/multihost_bench.sh" "$BUILD_DIR" 2>&1 | tee "$OUT_DIR/multihost_bench.txt" ||
    echo "multihost_bench FAILED"
else
  echo "multihost_bench: skipped (needs root for network namespaces)" |
    tee "$OUT_DIR/multihost_bench.txt"
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT_DIR/machine.txt"
sleep 1
if left=$(pgrep -a -f "$BUILD_DIR/bench/|python_bench.py"); then
  echo "PROCESSES LEFT BEHIND:"
  echo "$left"
else
  echo "no benchmark process left behind"
fi
if leftover=$(ls /dev/shm/troupe_data_plane_bench.* /tmp/troupe_bench_zmq.* 2>/dev/null); then
  echo "FILES LEFT BEHIND: $leftover"
else
  echo "no benchmark file left behind (/dev/shm, /tmp)"
fi
if ip netns list 2>/dev/null | grep -q '^tr-h'; then
  echo "NETWORK NAMESPACES LEFT BEHIND: $(ip netns list | grep '^tr-h' | tr '\n' ' ')"
fi

echo
echo "RATIO lines of this run:"
cat "$OUT_DIR"/*.txt | grep -E '^(RATIO|RSS|PEER|ratio )|RATIO troupe' || true
/usr/bin/python3 "$ROOT/bench/summarize.py" "$OUT_DIR" >"$OUT_DIR/summary.md"
echo
echo "summary table ($OUT_DIR/summary.md):"
cat "$OUT_DIR/summary.md"
