#!/usr/bin/env bash
# THE test command. Installs dependencies, then:
#   1. builds the release variant (build/) and runs its CTest suite;
#   2. installs it into a temporary prefix and builds tests/consumer against it
#      (tests/consumer_test.sh), counted as one test;
#   3. runs the Python tests (pytest under /usr/bin/python3, against the release build's
#      package in build/python);
#   4. builds the ASan/UBSan variant (build-asan/) and runs its CTest suite;
#   5. builds the ThreadSanitizer variant (build-tsan/) and runs its CTest suite;
#   (the ASan build runs, at nice 19, beside steps 1-3's tests, the TSan build beside step 4's);
#   6. builds the libFuzzer target over the wire decoders and runs it for a fixed number of
#      inputs from the seed corpus (scripts/fuzz.sh), counted as one test, at nice 19 beside
#      step 5's tests.
# Keeps going after a failure so that one run reports everything. A step that fails without
# reporting test counts (setup, a build, a ctest run that printed no summary) counts as one
# failure. Exits non-zero if anything failed; the last line of output is "N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
report=()
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

note() { report+=("$1"); }
step_start=$SECONDS
took() { echo "($((SECONDS - step_start)) s)"; }

step_failed() {  # step_failed WHAT
  failed=$((failed + 1))
  note "FAILED  $1"
}

# run_ctest LABEL BUILD_DIR [ENV=VALUE...]: runs the suite, adds its counts to the totals.
run_ctest() {
  local label=$1 dir=$2 log rc=0 line total nfail
  shift 2
  log="$work/ctest-$label.log"
  echo "=== ctest ($label) ==="
  # stdin from /dev/null: CI has none, and no test may wait on it. --timeout is the default
  # deadline for a test that sets none of its own.
  step_start=$SECONDS
  # A test that fails runs once more (--repeat until-pass:2): it counts as passed when the second
  # run passes, and the summary names it, so an intermittent failure is reported, never hidden.
  env "$@" ctest --test-dir "$dir" --output-on-failure -j2 --timeout 300 --no-tests=error \
    --repeat until-pass:2 </dev/null 2>&1 | tee "$log" || rc=$?
  # CTest 3 prints "100% tests passed, 0 tests failed out of N"; CTest 4 leaves out the failed
  # count when it is 0 ("100% tests passed out of N").
  line=$(grep -E '^[0-9]+% tests passed(, [0-9]+ tests? failed)? out of [0-9]+' "$log" | tail -n 1 || true)
  if [[ -z "$line" ]]; then
    step_failed "ctest $label: no test summary (exit $rc)"
    return
  fi
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  nfail=0
  if [[ "$line" =~ ,\ ([0-9]+)\ tests?\ failed ]]; then nfail=${BASH_REMATCH[1]}; fi
  passed=$((passed + total - nfail))
  failed=$((failed + nfail))
  if ((rc != 0 && nfail == 0)); then
    step_failed "ctest $label: exit $rc although no test failed"
  else
    note "$( ((nfail == 0)) && echo "ok     " || echo "FAILED ") ctest $label: $((total - nfail)) passed, $nfail failed $(took)"
  fi
  # The names of the failed tests, from ctest's closing list ("  12 - Suite.Name (Failed)"), and
  # of those that failed once and passed on their second run.
  local failed_test failed_list
  failed_list=$(sed -n '/^The following tests FAILED:/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' || true)
  while read -r failed_test; do
    [[ -n "$failed_test" ]] && note "          $failed_test"
  done <<<"$failed_list"
  while read -r failed_test; do
    [[ -z "$failed_test" ]] && continue
    grep -qE "[0-9]+ - $failed_test \(" <<<"$failed_list" ||
      note "          passed on its second run: $failed_test"
  done < <(grep -E 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception)' "$log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | sort -u)
  return 0
}

# Sanitizer builds run in the background at the lowest CPU priority (nice 19) while the
# previous variant's tests run: they take only the CPU time the tests leave idle (most tests
# wait on processes and sockets), and the tests keep the CPUs whenever they want them.
# start_build VARIANT: starts it, its output in $work/build-VARIANT.log.
# finish_build VARIANT: waits for it and notes the result; its log's tail on failure.
declare -A build_pid build_began
start_build() {
  build_began[$1]=$SECONDS
  nice -n 19 bash scripts/build.sh "$1" >"$work/build-$1.log" 2>&1 &
  build_pid[$1]=$!
}
finish_build() {
  local rc=0
  wait "${build_pid[$1]}" || rc=$?
  echo "=== build ($1), in the background ==="
  step_start=${build_began[$1]}
  if ((rc == 0)); then
    note "ok      build $1, beside the tests before it $(took)"
  else
    tail -n 80 "$work/build-$1.log"
    step_failed "build $1 (its tests did not run; the end of its log is above)"
  fi
  return $rc
}

echo "=== setup ==="
step_start=$SECONDS
if bash scripts/setup.sh; then note "ok      setup $(took)"; else step_failed "setup"; fi

echo "=== build (release) ==="
release_ok=0
step_start=$SECONDS
release_built=0
bash scripts/build.sh release && release_built=1
start_build asan
if ((release_built)); then
  release_ok=1
  note "ok      build release $(took)"
  run_ctest release build

  echo "=== install + consumer ==="
  step_start=$SECONDS
  if bash tests/consumer_test.sh build .; then
    passed=$((passed + 1))
    note "ok      install + consumer $(took)"
  else
    step_failed "install + consumer"
  fi
else
  step_failed "build release (its tests and the consumer check did not run)"
fi

# run_pytest BUILD_DIR: runs python/tests against BUILD_DIR/python, adds its counts.
run_pytest() {
  local dir=$1 log="$work/pytest.log" rc=0 line npass nfail nerr
  echo "=== pytest (python/tests) ==="
  step_start=$SECONDS
  PYTHONPATH="$PWD/$dir/python" TROUPE_PY_CROSS="$PWD/$dir/python/troupe_py_cross" \
    timeout 900 /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests \
    </dev/null 2>&1 | tee "$log" || rc=$?
  line=$(grep -E '^=* ?[0-9]+ (passed|failed|error)' "$log" | tail -n 1 || true)
  if [[ -z "$line" ]]; then
    step_failed "pytest: no test summary (exit $rc)"
    return
  fi
  npass=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  nfail=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  nerr=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + npass))
  failed=$((failed + nfail + nerr))
  if ((rc != 0 && nfail + nerr == 0)); then
    step_failed "pytest: exit $rc although no test failed"
  else
    note "$( ((nfail + nerr == 0)) && echo "ok     " || echo "FAILED ") pytest: $npass passed, $((nfail + nerr)) failed $(took)"
  fi
  # The names of the failed tests, from pytest's short summary ("FAILED path::test - why").
  local failed_test
  while read -r failed_test; do
    note "          ${failed_test:0:150}"
  done < <(grep -E '^(FAILED|ERROR) ' "$log" || true)
  return 0
}

if ((release_ok)) && ls build/python/troupe/_core*.so >/dev/null 2>&1; then
  run_pytest build
elif ((release_ok)); then
  step_failed "pytest: the release build has no Python module (build/python/troupe/_core*.so)"
fi

asan_built=0
finish_build asan && asan_built=1
start_build tsan
if ((asan_built)); then
  run_ctest asan build-asan \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi

# The fuzz step (its clang build and a fixed number of inputs) runs at nice 19 beside the TSan
# tests, which leave most of the CPU idle; its output is printed after them.
tsan_built=0
finish_build tsan && tsan_built=1
fuzz_began=$SECONDS
nice -n 19 bash scripts/fuzz.sh >"$work/fuzz.log" 2>&1 &
fuzz_pid=$!

if ((tsan_built)); then
  # halt_on_error: the first race fails the test that ran into it. tests/tsan.supp: races
  # reported inside Debian's libcpp-httplib, which is not built with ThreadSanitizer (its locks
  # are invisible to it).
  run_ctest tsan build-tsan \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp
fi

echo "=== fuzz (wire decoders), in the background ==="
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
cat "$work/fuzz.log"
step_start=$fuzz_began
if ((fuzz_rc == 0)); then
  passed=$((passed + 1))
  note "ok      fuzz wire decoders, beside the TSan tests $(took)"
else
  step_failed "fuzz wire decoders (see build-fuzz/crash-* for a finding)"
fi

echo "=== summary ==="
printf '  %s\n' "${report[@]}"
echo "  total $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "$passed passed, $failed failed"
((failed == 0))
