#!/usr/bin/env bash
# Creates .venv-peers/: Ray 2.60 and the RL frameworks (verl, OpenRLHF) that troupe is measured
# and tested against. They are peers only: troupe never imports them, and scripts/demo.sh and
# scripts/test.sh work without this venv. Idempotent: when the venv exists and was made from
# the current requirement files it does nothing (no network). Prints one line saying what it did.
#
# The venv is made from Debian's /usr/bin/python3 (3.11, the interpreter troupe's extension is
# built for), without the system's site-packages, so the peers' pinned numpy and torch are the
# ones its programs see. troupe itself is used from the build tree: PYTHONPATH=build/python.
#
# Usage: scripts/peers-setup.sh [VENV_DIR]   (default: .venv-peers in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${1:-$PWD/.venv-peers}
here=scripts
stamp="$venv/.troupe-peers-stamp"
want=$(cat "$here/peers-requirements.txt" "$here/peers-nodeps.txt" "$here/peers-constraints.txt" |
  sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
  echo "peers-setup: $venv is current, nothing to do"
  exit 0
fi

began=$SECONDS
if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  bash scripts/setup.sh >/dev/null  # python3-venv
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() {
  grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 >&2
  echo "peers-setup: FAILED: $1" >&2
  exit 1
}
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv" >"$log" 2>&1 || fail "python3 -m venv $venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -r "$here/peers-requirements.txt" -c "$here/peers-constraints.txt" \
  >>"$log" 2>&1 || fail "pip install -r $here/peers-requirements.txt"
"${pip[@]}" install --no-deps -r "$here/peers-nodeps.txt" >>"$log" 2>&1 ||
  fail "pip install --no-deps -r $here/peers-nodeps.txt"
"$venv/bin/python" -c 'import ray, torch, tensordict, verl.single_controller.ray' >>"$log" 2>&1 ||
  fail "the peers do not import"
echo "$want" >"$stamp"
echo "peers-setup: made $venv ($("$venv/bin/python" -c 'import ray; print("ray", ray.__version__)'), $((SECONDS - began)) s)"
