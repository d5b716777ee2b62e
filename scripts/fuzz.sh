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
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-fuzz/fuzz/wire_fuzz "${limit[@]}" -max_len=4096 -rss_limit_mb=1024 -timeout=10 \
  -artifact_prefix=build-fuzz/ -print_final_stats=1 "$work" fuzz/corpus/wire
