#!/usr/bin/env bash
# run_example.sh EXPECTED_STDOUT COMMAND [ARGS...]: runs an example; passes when it exits 0 and
# its standard output is exactly EXPECTED_STDOUT (lines separated by \n in the argument).
set -uo pipefail
expected=$(printf '%b' "$1")
shift
out=$("$@")
rc=$?
if ((rc != 0)); then
  echo "FAILED: $* exited with $rc; its output:"
  echo "$out"
  exit 1
fi
if [[ "$out" != "$expected" ]]; then
  echo "FAILED: $* printed:"
  echo "$out"
  echo "expected:"
  echo "$expected"
  exit 1
fi
echo "ok: $*"
