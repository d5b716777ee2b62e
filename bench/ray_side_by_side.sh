#!/usr/bin/env bash
# troupe.ray beside Ray's own microbenchmark (issue 30 part 1): see bench/ray_side_by_side.py.
#   bash bench/ray_side_by_side.sh --quick            # a few minutes on 2 cores
#   bash bench/ray_side_by_side.sh                    # full: Ray's timeit constants
# Needs build/python (cmake --build build --target troupe_python) and .venv-peers
# (scripts/peers-setup.sh). Leaves no process behind: `ray stop --force` at the end, then ps.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ -f .venv-peers/.troupe-peers-stamp ]] || { echo "no .venv-peers (scripts/peers-setup.sh)" >&2; exit 2; }
[[ -d build/python/troupe/ray ]] || { echo "no build/python: cmake --build build --target troupe_python" >&2; exit 2; }
/usr/bin/python3 bench/ray_side_by_side.py "$@"
rc=$?
.venv-peers/bin/ray stop --force >/dev/null 2>&1
left=$(ps -eo pid,args | grep -E 'raylet|gcs_server|ray::|default_worker\.py' | grep -v grep || true)
if [[ -n "$left" ]]; then echo "Ray processes still running after ray stop --force:" >&2; echo "$left" >&2; fi
exit $rc
