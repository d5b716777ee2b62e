#!/usr/bin/env bash
# Installs dependencies, builds the release variant and runs the demo on the embedded local
# cluster. Extra arguments are passed to `troupe demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh release
exec build/troupe demo "$@"
