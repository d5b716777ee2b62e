#!/usr/bin/env bash
# A standing cluster across network-namespace hosts (tests/netns/netns.sh): the head in tr-h1
# (10.77.0.1), the agents node-a in tr-h2 (10.77.0.2) and node-b in tr-h3 (10.77.0.3), started
# with the real `troupe start`; the driver (multihost_test, a GoogleTest binary) runs in tr-h1
# with TROUPE_ADDRESS and TROUPE_TOKEN. Cases: sharded dispatch across the hosts with worker
# output forwarded; unauthenticated clients refused on every listening port of every daemon and
# worker; a driver killed with SIGKILL leaves no worker on any host; a host cut off (nftables
# drop, then link down) fails its calls with kHostLost and rejoins; a host cut off from the head
# only keeps its workers (the driver logs that decision); a hung agent (SIGSTOP) is lost without
# a false alarm on the other host; an ObjectRef reaches each host's agent once; the head killed
# and restarted on the same address takes back the agents and the same driver, whose placement
# groups it books again.
#
#   multihost_test.sh TROUPE_CLI MULTIHOST_TEST_BINARY
#
# Needs root; exits 77 (skipped) otherwise. Every wait is bounded; the namespaces, daemons and
# files are removed on exit, also when a case fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
troupe=$1
driver=$2
if ((EUID != 0)); then
  echo "skipped: needs root for network namespaces"
  exit 77
fi
work=$(mktemp -d)
chmod 700 "$work"
failures=0
daemons=()
check() {  # check WHAT COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
ns() { bash "$here/netns.sh" exec "$@"; }
ns_pids() { for h in tr-h1 tr-h2 tr-h3; do ip netns pids "$h" 2>/dev/null; done; }
# Every process in the test's namespaces goes (daemons[] holds the subshells that started the
# daemons, whose troupe processes are their children): SIGTERM, then SIGKILL after 10 s.
capture_pid=
cleanup() {
  local p
  [[ -n $capture_pid ]] && kill -TERM "$capture_pid" 2>/dev/null
  for p in "${daemons[@]}" $(ns_pids); do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 100); do [[ -z $(ns_pids) ]] && break; sleep 0.1; done
  for p in "${daemons[@]}" $(ns_pids); do kill -KILL "$p" 2>/dev/null; done
  bash "$here/netns.sh" down
  rm -rf "$work"
}
trap cleanup EXIT

bash "$here/netns.sh" up 3 || { echo "FAILED: netns up"; exit 1; }
TROUPE_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export TROUPE_TOKEN
readonly head_address=10.77.0.1:16380

# wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds, at most SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
host_up() {  # host_up NAME: the head lists NAME as up
  TMPDIR=$work/h1 ns tr-h1 "$troupe" status --address $head_address | grep -Eq "^  $1 .* up "
}

mkdir -m 700 "$work/h1" "$work/h2" "$work/h3"
TMPDIR=$work/h1 ns tr-h1 "$troupe" start --head --block --node-ip-address 10.77.0.1 --port 16380 \
  >"$work/head.log" 2>&1 &
daemons+=($!)
check "the head listens" wait_for 15 ns tr-h1 bash -c "ss -ltnH | grep -q '10.77.0.1:16380 '"
start_agent() {  # start_agent NAMESPACE NAME ADDRESS
  TMPDIR=$work/${1#tr-} ns "$1" "$troupe" start --address $head_address --block \
    --node-ip-address "$3" --host-name "$2" --num-cpus 4 --num-gpus 2 >"$work/$2.log" 2>&1 &
  daemons+=($!)
  check "$2 joins" wait_for 15 host_up "$2"
}
start_agent tr-h2 node-a 10.77.0.2  # first: id 0
start_agent tr-h3 node-b 10.77.0.3

run() {  # run OUT TEST [ENV=VALUE...]: one test of the driver, in tr-h1, connected by address;
  # its output goes to $work/OUT, and to this output too when it fails.
  local out=$work/$1 name=$2 rc=0
  shift 2
  ns tr-h1 env TROUPE_ADDRESS=$head_address "$@" "$driver" --gtest_filter="$name" >"$out" 2>&1 ||
    rc=$?
  ((rc == 0)) || { echo "--- $name:"; tail -n 40 "$out"; }
  return $rc
}

# The bridge is captured during the first dispatch: without TLS its worker output crosses as
# plaintext, which shows that tls_test.sh's capture, finding none with TLS, could have found it.
/usr/bin/python3 "$here/capture.py" trbr0 "$work/wire" "$work/capturing" >"$work/capture.out" &
capture_pid=$!
check "the bridge is captured" wait_for 10 test -s "$work/capturing"
check "sharded dispatch across two hosts" run dispatch.out MultiHost.ShardedDispatchAcrossTwoHosts
kill -TERM "$capture_pid"
wait "$capture_pid" 2>/dev/null
capture_pid=
check "without TLS, worker output crosses the bridge as plaintext" test \
  "$(/usr/bin/python3 "$here/capture.py" --count "$work/wire" line-from-rank)" -gt 0
rm -f "$work/wire"
check "worker output reaches the driver's terminal" \
  grep -Eq '^\(mh[-_0-9]* pid=[1-9][0-9]*\) line-from-rank-3$' "$work/dispatch.out" ||
  grep line-from "$work/dispatch.out"

check "an object crosses the network once per host" run object.out MultiHost.ObjectGoesOncePerHost

demo() {  # the demo, unchanged, redirected by TROUPE_ADDRESS; its output when it fails
  ns tr-h1 env TROUPE_ADDRESS=$head_address timeout 120 "$troupe" demo >"$work/demo.out" 2>&1 ||
    { tail -n 30 "$work/demo.out"; return 1; }
}
check "troupe demo runs unchanged against the standing cluster" demo

# A driver holding a worker on each host: probe every listening port, then kill the driver.
run hold.out MultiHost.HoldWorkersUntilKilled PIDS_FILE="$work/pids" &
holder=$!
if check "the holding driver started its workers" wait_for 60 test -s "$work/pids"; then
  ports=()
  for h in tr-h1 tr-h2 tr-h3; do
    n=${h#tr-h}
    for p in $(ns $h ss -ltnH | awk '{print $4}' | sed -E "s/^(0\.0\.0\.0|\*):/10.77.0.$n:/"); do
      ports+=("$p")
    done
  done
  TMPDIR=$work/h1 ns tr-h1 "$troupe" status --address $head_address >"$work/status.out" 2>&1
  check "status lists the driver's placement groups" \
    grep -Eq '^  [0-9a-f]{8}\.vc-[0-9]+-pg1 +node-b: 1 bundle$' "$work/status.out"
  check "status lists the workers with group, rank and host" \
    grep -Eq '^  [0-9a-f]{8}\.held-1-0 +group held +rank 1 .* on node-b +pid [1-9][0-9]* +alive$' \
    "$work/status.out"
  check "status shows each host's worker-group memory" \
    grep -Eq '^    worker group held +[0-9.]+ MiB resident$' "$work/status.out"
  # the head, two agents and two workers at least
  check "every daemon and worker listens (${#ports[@]} ports)" test "${#ports[@]}" -ge 5
  for p in "${ports[@]}"; do
    check "$p refuses no token, a wrong token and garbage" \
      run probe.out MultiHostProbe.UnauthenticatedClientsAreRefused PROBE="$p"
  done
  check "the head logged why it refused" grep -q "rejecting unauthenticated peer" "$work/head.log"
  check "an agent logged why it refused" grep -q "rejecting unauthenticated peer" "$work/node-a.log"
  mapfile -t pids <"$work/pids"  # the driver, then its workers
  kill -KILL "${pids[0]}"
  wait "$holder"
  gone() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
  check "no worker survives its driver's SIGKILL" wait_for 10 gone
  # Scan every namespace: only the daemons are left (and an agent's fork server: its child in
  # its process group, where every worker leads a group of its own).
  is_daemon() { [[ $(tr '\0' ' ' </proc/$1/cmdline 2>/dev/null) == *" start "* ]]; }
  stat_field() { awk -v f="$2" '{print $f}' /proc/$1/stat 2>/dev/null; }
  only_daemons() {
    for h in tr-h1 tr-h2 tr-h3; do
      for p in $(ip netns pids $h); do
        is_daemon "$p" && continue
        local parent
        parent=$(stat_field "$p" 4)
        is_daemon "$parent" && [[ $(stat_field "$p" 5) == $(stat_field "$parent" 5) ]] || return 1
      done
    done
  }
  check "every namespace holds only the daemons" wait_for 10 only_daemons
fi
check "the cluster keeps serving" run dispatch2.out MultiHost.ShardedDispatchAcrossTwoHosts

cat >"$work/cut.nft" <<'NFT'
table inet troupe_cut {
  chain in { type filter hook input priority 0; policy accept; iifname "eth0" drop; }
  chain out { type filter hook output priority 0; policy accept; oifname "eth0" drop; }
}
NFT
check "cut by nftables: kHostLost within 1 s, then node-b rejoins" \
  run cut.out MultiHost.CutHostFailsItsCallsWithHostLostThenRejoins \
  CUT_CMD="ip netns exec tr-h3 nft -f $work/cut.nft" \
  RESTORE_CMD="ip netns exec tr-h3 nft delete table inet troupe_cut"
# A case that fails half-way must not leave node-b cut (or stopped) for the next one.
ip netns exec tr-h3 nft delete table inet troupe_cut 2>/dev/null
check "cut by link down: kHostLost within 1 s, then node-b rejoins" \
  run link.out MultiHost.CutHostFailsItsCallsWithHostLostThenRejoins \
  CUT_CMD="ip -n tr-h3 link set eth0 down" RESTORE_CMD="ip -n tr-h3 link set eth0 up"
ip -n tr-h3 link set eth0 up
cat >"$work/split.nft" <<'NFT'
table inet troupe_split {
  chain in { type filter hook input priority 0; policy accept; ip saddr 10.77.0.1 tcp sport 16380 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr 10.77.0.1 tcp dport 16380 drop; }
}
NFT
check "the head loses node-b, the driver still reaches it: its workers go on" \
  run split.out MultiHost.HeadLosingAHostTheDriverStillReachesKeepsItsWorkers \
  CUT_CMD="ip netns exec tr-h3 nft -f $work/split.nft" \
  RESTORE_CMD="ip netns exec tr-h3 nft delete table inet troupe_split" TROUPE_LOG_LEVEL=info
ip netns exec tr-h3 nft delete table inet troupe_split 2>/dev/null
check "a hung agent is lost, the other host is not" run hung.out MultiHost.HungAgentIsLostOthersAreNot
for p in $(ip netns pids tr-h3); do kill -CONT "$p" 2>/dev/null; done

# Last: the head dies under a running group; the driver starts a new head on the same address
# (RESTART_CMD, in tr-h1 like the driver), which takes the agents and the driver back.
head_pid=$(grep -oE 'listening on .* \(pid [0-9]+\)' "$work/head.log" | grep -oE '[0-9]+\)$' |
  tr -d ')')
check "the head dies: workers go on; a new head takes the driver and its placement groups back" \
  run headless.out MultiHost.HeadDeathKeepsWorkersServing HEAD_PID="$head_pid" \
  RESTART_CMD="env -u TROUPE_ADDRESS TMPDIR=$work/h1 setsid $troupe start --head --block \
--node-ip-address 10.77.0.1 --port 16380 >$work/head2.log 2>&1 </dev/null &" \
  STATUS_CMD="env -u TROUPE_ADDRESS TMPDIR=$work/h1 $troupe status --address $head_address"
check "a new head on the same address takes node-a back" wait_for 30 host_up node-a
check "a new head on the same address takes node-b back" wait_for 30 host_up node-b
check "the cluster serves under the new head" run dispatch3.out MultiHost.ShardedDispatchAcrossTwoHosts

if ((failures > 0)); then
  for f in head head2 node-a node-b; do echo "--- $f.log (last lines)"; tail -n 30 "$work/$f.log"; done
fi
echo "multi-host cases: $failures failed"
((failures == 0))
