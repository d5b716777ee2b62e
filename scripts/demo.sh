#!/usr/bin/env bash
# Installs dependencies, builds the `troupe` command (the library and the CLI only: no tests,
# benchmarks or Python module) in the release build directory build/, and runs the demo on the
# embedded local cluster. Extra arguments are passed to `troupe demo`. scripts/test.sh later
# builds the rest in the same directory, reusing these objects.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh release troupe_cli
exec build/troupe demo "$@"
