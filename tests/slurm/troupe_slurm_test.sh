#!/usr/bin/env bash
# `troupe slurm` in real jobs of the local Slurm cluster (tests/slurm/slurm.sh: slurmctld and two
# slurmd nodes, n1 at 127.0.0.11 and n2 at 127.0.0.12, 2 CPUs and 2 fake GPUs each). Cases:
#   - sbatch --wait -N2 of `troupe slurm -- DRIVER`: the driver (slurm_driver.cc) checks a
#     dp=2 x tp=2 group across both nodes with the GPUs Slurm assigned; the job's exit code is the
#     driver's; nothing is left afterwards; a second troupe slurm in the same job is refused;
#   - scancel in the middle of a driver, or SIGTERM to troupe slurm alone: within 10 s no troupe
#     process is left on either node;
#   - two jobs at once, each with a group rendezvousing on MASTER_PORT: both succeed, with
#     different ports and different GPUs;
#   - agents that cannot start (a bad --agent-binary) or that never register (--timeout): troupe
#     slurm fails with an error naming the nodes and the binary;
#   - a driver that cannot start; troupe slurm under salloc;
#   - the example job examples/slurm/troupe_demo.sbatch runs the demo on both nodes.
#
#   troupe_slurm_test.sh TROUPE_CLI SLURM_DRIVER_BINARY
#
# Needs root; exits 77 (skipped) otherwise. Every wait is bounded. The Slurm daemons, every job,
# every process the jobs started and every file are removed on exit, also when a case fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
troupe=$(readlink -f "$1")
driver=$(readlink -f "$2")
if ((EUID != 0)); then
  echo "skipped: needs root to run Slurm daemons"
  exit 77
fi
export TROUPE_SLURM_DIR=${TROUPE_SLURM_DIR:-/tmp/troupe-slurm-jobs}
work=$(mktemp -d)
chmod 755 "$work"
mkdir -m 700 "$work/tmp"
failures=0
started=$SECONDS
check() {  # check WHAT COMMAND...
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what [$((SECONDS - started)) s]"
  else
    echo "FAILED: $what [$((SECONDS - started)) s]"
    failures=$((failures + 1))
    return 1
  fi
}
# wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_for() {  # wait_for SECONDS COMMAND...: polls COMMAND until it succeeds or SECONDS pass
  local deadline=$((SECONDS + $1))
  shift
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
# ours: "PID CMDLINE" of every process running this build's troupe or driver binary (the head,
# agents, drivers and workers of any job), or srun steps that run it.
ours() {
  local d exe cmd
  for d in /proc/[0-9]*; do
    exe=$(readlink "$d/exe" 2>/dev/null) || continue
    cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
    if [[ $exe == "$troupe"* || $exe == "$driver"* || ($exe == */srun* && $cmd == *"$troupe"*) ]]
    then
      echo "${d#/proc/} $cmd"
    fi
  done
}
none_left() { [[ -z $(ours) ]]; }
show() {  # show FILE: its last lines, for a failed case
  echo "--- $1 (last lines):"
  tail -n 40 "$1" 2>/dev/null
}
cleanup() {
  local ids
  ids=$(squeue -h -o %i 2>/dev/null)
  # shellcheck disable=SC2086 # one argument per job id
  [[ -n "$ids" ]] && scancel $ids 2>/dev/null
  wait_for 20 none_left || for p in $(ours | cut -d' ' -f1); do kill -KILL "$p" 2>/dev/null; done
  bash "$here/slurm.sh" down
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # a deadline's SIGTERM still runs cleanup

out=$(bash "$here/slurm.sh" up) || { echo "FAILED: slurm.sh up"; exit 1; }
eval "$out"  # export SLURM_CONF=...
export TMPDIR=$work/tmp  # the jobs' run directories live here (sbatch passes the environment on)
run_dir() { echo "$TMPDIR/troupe-$(id -u)/standing-job$1"; }

# submit NAME SBATCH_ARGS...: submits the job and waits until it ended (at most 120 s, polling
# every 0.2 s: sbatch --wait polls every few seconds); sets job_id and job_rc (the job's exit
# code). The job's output is $work/NAME.out.
submit() {
  local name=$1 state=""
  shift
  job_rc=255
  job_id=$(sbatch --parsable -J "ts-$name" -o "$work/$name.out" "$@") || return
  job_id=${job_id%%;*}
  for _ in $(seq 600); do
    state=$(scontrol show job "$job_id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case $state in
      PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | "") sleep 0.2 ;;
      *) break ;;
    esac
  done
  job_rc=$(scontrol show job "$job_id" 2>/dev/null | grep -o ' ExitCode=[0-9]*' | cut -d= -f2)
  job_rc=${job_rc:-255}
}

# 1. The dp x tp driver across both nodes, with sbatch --wait (which passes the job's exit code).
job_id=$(timeout 120 sbatch --parsable --wait -N2 --ntasks-per-node=1 -c2 --gres=gpu:2 \
  -J ts-dispatch -o "$work/dispatch.out" \
  --wrap "exec $troupe slurm -- $driver --gtest_filter=SlurmDriver.ShardedDispatchOnTwoNodes")
job_rc=$?
job_id=${job_id%%;*}
check "sbatch --wait -N2: the driver's dp=2 x tp=2 checks pass on both nodes" \
  test "$job_rc" -eq 0 || show "$work/dispatch.out"
check "the driver ran its test (not skipped)" grep -q '^\[  PASSED  \] 1 test' "$work/dispatch.out"
check "the head ran on n1 at n1's NodeAddr on a free port" \
  grep -Eq '^troupe slurm: job [0-9]+ on 2 node\(s\) \(n1, n2\); head at 127\.0\.0\.11:[1-9][0-9]* on n1' \
  "$work/dispatch.out"
check "every node's agent registered before the driver ran" \
  grep -q "all 2 agents registered" "$work/dispatch.out"
check "the agents are gone when the job ends" wait_for 30 none_left || { echo "left:"; ours; }
check "the job's run directory (token) is removed" test ! -e "$(run_dir "$job_id")"

submit exitcode -N2 --wrap "exec $troupe slurm --node-ip-address 127.0.0.1 -- sh -c 'exit 7'"
check "the job's exit code is the driver's (7)" test "$job_rc" -eq 7 || show "$work/exitcode.out"
check "--node-ip-address sets the head's address" \
  grep -Eq "head at 127\.0\.0\.1:[1-9][0-9]* on n1" "$work/exitcode.out"

submit nodriver -N2 --wrap "exec $troupe slurm -- /nonexistent/driver"
check "a driver that cannot start is an error naming it" \
  bash -c "[[ $job_rc == 1 ]] && grep -q \"cannot start '/nonexistent/driver'\" '$work/nodriver.out'" ||
  show "$work/nodriver.out"

# Under salloc the command runs where salloc runs (not on a node): the head runs there (here on
# loopback), the agents on the nodes.
timeout 60 salloc -N2 -J ts-salloc "$troupe" slurm --node-ip-address 127.0.0.1 -- sh -c 'exit 5' \
  >"$work/salloc.out" 2>&1
check "salloc -N2 troupe slurm runs the driver and passes its exit code (5)" test $? -eq 5 ||
  show "$work/salloc.out"
check "... after every node's agent registered" grep -q "all 2 agents registered" "$work/salloc.out"
check "nothing left after salloc" wait_for 30 none_left || { echo "left:"; ours; }

# One troupe slurm per job at a time: a second one is refused and the first is not disturbed.
submit twice -N2 --wrap "$troupe slurm -- sleep 3 & sleep 1; $troupe slurm -- true; echo second=\$?; wait \$!; echo first=\$?"
check "a second troupe slurm in the same job is refused, naming the job" \
  grep -q "another troupe slurm of job $job_id runs on this node" "$work/twice.out" ||
  show "$work/twice.out"
check "... with exit code 1, and the first one succeeds" \
  bash -c "grep -qx second=1 '$work/twice.out' && grep -qx first=0 '$work/twice.out'"

# 2. scancel while the driver holds a worker on each node.
job_id=$(PIDS_FILE=$work/pids sbatch --parsable -N2 -J ts-cancel -o "$work/cancel.out" \
  --wrap "exec $troupe slurm -- $driver --gtest_filter=SlurmDriver.HoldUntilCancelled")
job_id=${job_id%%;*}
if check "the held driver started a worker on each node" wait_for 60 test -s "$work/pids"; then
  mapfile -t pids <"$work/pids"  # the driver, then its workers
  check "a driver and two workers (${#pids[@]} pids)" test "${#pids[@]}" -eq 3
  agents() {  # troupe processes (not srun) running an agent
    local n=0 p
    for p in $(pgrep -f " start --address .* --block --slurm"); do
      [[ $(readlink "/proc/$p/exe") == "$troupe" ]] && n=$((n + 1))
    done
    echo "$n"
  }
  check "an agent runs for each node" test "$(agents)" -eq 2
  scancel "$job_id"
  cancelled_at=$SECONDS
  check "within 10 s of scancel no troupe process is left on either node" wait_for 10 none_left ||
    ours
  echo "  (gone $((SECONDS - cancelled_at)) s after scancel)"
  gone() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
  check "the driver and its workers are gone" gone
  check "the job's run directory is removed" wait_for 10 test ! -e "$(run_dir "$job_id")"
else
  show "$work/cancel.out"
fi

# SIGTERM to troupe slurm alone (as ^C under salloc): it passes it to the driver, stops the agents
# through the head, and exits with the driver's status (killed by SIGTERM: 143).
job_id=$(PIDS_FILE=$work/pids2 sbatch --parsable -N2 -J ts-term -o "$work/term.out" --wrap \
  "$troupe slurm -- $driver --gtest_filter=SlurmDriver.HoldUntilCancelled & echo \$! >$work/slurm.pid; wait \$!; echo rc=\$?")
job_id=${job_id%%;*}
if check "a driver holds a worker on each node" wait_for 60 test -s "$work/pids2"; then
  kill -TERM "$(cat "$work/slurm.pid")"
  check "within 10 s of SIGTERM to troupe slurm nothing is left" wait_for 10 none_left || ours
  check "it exits with the driver's status (SIGTERM: 143)" wait_for 10 grep -qx rc=143 "$work/term.out" ||
    show "$work/term.out"
  check "it passed the signal to the driver" grep -q "got Terminated; passing it to the driver" \
    "$work/term.out"
else
  show "$work/term.out"
fi

# 3. Two jobs at once, each with a group on MASTER_PORT (one GPU per node each).
two() {  # two NAME PEER: exits with the job's exit code
  PORT_FILE=$work/$1.port PEER_PORT_FILE=$work/$2.port submit "$1" -N2 --gres=gpu:1 \
    --wrap "exec $troupe slurm -- $driver --gtest_filter=SlurmDriver.MasterPortRendezvous"
  return "$job_rc"
}
two a b &
pa=$!
two b a &
pb=$!
wait "$pa"
ra=$?
wait "$pb"
rb=$?
check "job A succeeded (rendezvous on its MASTER_PORT)" test "$ra" -eq 0 || show "$work/a.out"
check "job B succeeded (rendezvous on its MASTER_PORT)" test "$rb" -eq 0 || show "$work/b.out"
read -r port_a gpu_a1 gpu_a2 <"$work/a.port"
read -r port_b gpu_b1 gpu_b2 <"$work/b.port"
check "the jobs' MASTER_PORTs differ ($port_a, $port_b)" test "${port_a:-x}" != "${port_b:-x}"
check "Slurm gave the jobs different GPUs on n1 ($gpu_a1, $gpu_b1) and n2 ($gpu_a2, $gpu_b2)" \
  test "$(echo "$gpu_a1 $gpu_b1" | tr ' ' '\n' | sort | tr '\n' ' ')" = "0 1 " -a \
  "$(echo "$gpu_a2 $gpu_b2" | tr ' ' '\n' | sort | tr '\n' ' ')" = "0 1 "
check "each job had its own head" test "$(grep -ho 'head at [0-9.:]*' "$work/a.out")" != \
  "$(grep -ho 'head at [0-9.:]*' "$work/b.out")"

# 4. Agents that cannot start, and an agent that never registers.
submit bad -N2 --wrap "exec $troupe slurm --agent-binary /nonexistent/troupe -- /bin/true"
check "troupe slurm fails when no agent can start" test "$job_rc" -eq 1
check "its error names the nodes and the agent binary" grep -q \
  "the agent step ended (srun exit code [0-9]*) before the agents of n1, n2 registered (agent binary /nonexistent/troupe)" \
  "$work/bad.out" || show "$work/bad.out"
check "srun's output says why" grep -q "/nonexistent/troupe" <(sed -n '/srun.s output/,$p' "$work/bad.out")

cat >"$work/slow_agent.sh" <<EOF
#!/bin/bash
# The agent of n2 never starts (it sleeps); n1's is the real one.
[[ \$SLURMD_NODENAME == n2 ]] && exec sleep 61.25
exec $troupe "\$@"
EOF
chmod 755 "$work/slow_agent.sh"
submit slow -N2 --wrap "exec $troupe slurm --timeout 3 --agent-binary $work/slow_agent.sh -- /bin/true"
check "troupe slurm fails when a node's agent does not register in time" test "$job_rc" -eq 1
check "its error names that node" grep -q \
  "the agents of n2 did not register within 3 s (1 of 2 registered; agent binary $work/slow_agent.sh)" \
  "$work/slow.out" || show "$work/slow.out"
check "it showed progress while waiting" grep -q "waiting for agents: 1 of 2 registered (waiting for n2)" \
  "$work/slow.out"
check "the stuck agent step is cancelled" wait_for 10 bash -c "! pgrep -fx 'sleep 61.25'"
check "no troupe process left" wait_for 10 none_left

# 5. The example job (its #SBATCH lines; output redirected here).
submit example -c2 --export=ALL,TROUPE="$troupe" \
  "$here/../../examples/slurm/troupe_demo.sbatch"
check "examples/slurm/troupe_demo.sbatch runs the demo on both nodes" test "$job_rc" -eq 0 ||
  show "$work/example.out"
check "the demo's workers ran on n1 and n2" \
  bash -c "grep -q ' on n1 ' '$work/example.out' && grep -q ' on n2 ' '$work/example.out'"
check "nothing left after the example" wait_for 10 none_left

echo "troupe slurm cases: $failures failed ($((SECONDS - started)) s)"
((failures == 0))
