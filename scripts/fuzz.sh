#!/usr/bin/env bash
# Builds the libFuzzer target over the wire decoders (scripts/build.sh fuzz: build-fuzz/) and
# runs it from the checked-in seed corpus fuzz/corpus/wire.
#   scripts/fuzz.sh                  CI: a fixed number of inputs (FUZZ_RUNS, default 200000),
#                                    fixed seed, a few tens of seconds; exits non-zero on a finding
#   scripts/fuzz.sh --time SECONDS   a longer run, for as long as asked
# New inputs found go to a temporary directory (the seed corpus is never written); a crashing
# input is saved as build-fuzz/crash-* and reproduced with `build-fuzz/fuzz/wire_fuzz FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=(-runs="${FUZZ_RUNS:-200000}" -seed=1)
if [[ "${1:-}" == "--time" ]]; then
  limit=(-max_total_time="${2:?--time needs seconds}")
fi

bash scripts/build.sh fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# -max_len bounds one input (frames and bodies are exercised in full well below it);
# -rss_limit_mb bounds the fuzzer's own memory: a decoder that allocates on a claimed size fails.
# -timeout is libFuzzer's wall-clock limit per input: beside the TSan tests at nice 19 an input
# that decodes in milliseconds can wait seconds for a CPU. So a timeout is not yet a finding: the
# input is re-run once alone with a limit on its CPU time (ulimit -t, the same 10 s; libFuzzer's
# own wall-clock alarm off), and only a timeout there, or any crash or leak, fails the run.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
timeout_exit=70
per_input_s=10
rm -f build-fuzz/timeout-*
rc=0
build-fuzz/fuzz/wire_fuzz "${limit[@]}" -max_len=4096 -rss_limit_mb=1024 -timeout="$per_input_s" \
  -timeout_exitcode="$timeout_exit" -artifact_prefix=build-fuzz/ -print_final_stats=1 \
  "$work" fuzz/corpus/wire || rc=$?
if ((rc == timeout_exit)); then
  slow=$(ls -t build-fuzz/timeout-* | head -n 1)
  echo "fuzz.sh: $slow passed ${per_input_s} s of wall-clock time; re-running it alone," \
    "limited to ${per_input_s} s of CPU time"
  if (ulimit -t "$per_input_s" && exec build-fuzz/fuzz/wire_fuzz -timeout=0 "$slow"); then
    echo "fuzz.sh: $slow decodes within ${per_input_s} s of CPU time alone: the timeout was" \
      "the machine's load, not a finding"
    exit 0
  fi
  echo "fuzz.sh: FINDING: $slow exceeds ${per_input_s} s of CPU time alone"
fi
exit "$rc"
