#!/usr/bin/env bash
# Self-test of the Slurm test cluster (tests/slurm/slurm.sh): both nodes run a step of a
# two-node batch job with the fake GPUs Slurm assigned, each node has its own address, and
# `down` leaves no daemon. Needs root; exits 77 (skipped) otherwise. Every wait is bounded.
set -uo pipefail
cd "$(dirname "$0")"
if ((EUID != 0)); then
  echo "skipped: needs root to run Slurm daemons"
  exit 77
fi
export TROUPE_SLURM_DIR=${TROUPE_SLURM_DIR:-/tmp/troupe-slurm-selftest}
failures=0
check() {  # check WHAT COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
trap 'bash slurm.sh down' EXIT

out=$(bash slurm.sh up) || { echo "FAILED: slurm.sh up"; exit 1; }
eval "$out"  # export SLURM_CONF=...
work=$(mktemp -d)
cat >"$work/job.sh" <<'JOB'
#!/bin/bash
srun -N2 -n2 --gres=gpu:2 bash -c 'echo "node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES"' | sort
JOB
check "sbatch --wait of a two-node job succeeds" \
  timeout 60 sbatch --wait -N2 --gres=gpu:2 -o "$work/job.out" "$work/job.sh"
check "each node ran a step with GPUs 0,1" \
  test "$(cat "$work/job.out")" = "$(printf 'node=n1 cuda=0,1\nnode=n2 cuda=0,1')"
check "n1 has its own address" bash -c "scontrol show node n1 | grep -q 'NodeAddr=127.0.0.11 '"
check "n2 has its own address" bash -c "scontrol show node n2 | grep -q 'NodeAddr=127.0.0.12 '"
rm -rf "$work"

bash slurm.sh down
check "down stops every daemon" bash -c "! pgrep -f 'slurm(ctld|d -N)' >/dev/null"
check "down removes the state directory" test ! -e "$TROUPE_SLURM_DIR"
trap - EXIT
echo "slurm test cluster: $failures failed"
((failures == 0))
