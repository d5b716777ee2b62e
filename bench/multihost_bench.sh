#!/usr/bin/env bash
# The standing-cluster benchmarks (bench/multihost_bench.cc) on three network-namespace hosts
# (tests/netns/netns.sh): the head in tr-h1, agents node-a in tr-h2 and node-b in tr-h3 (32 CPUs
# each, so that 64 one-CPU-tenth bundles fit), an echo server in tr-h3 for the TCP floor, and the
# driver in tr-h1. Needs root. Everything it starts is stopped on exit, also on failure.
#
#   bench/multihost_bench.sh [BUILD_DIR]     # default build-bench (bench/run_all.sh builds it)
#   MH_DATA_BYTES=256M bench/multihost_bench.sh   # data-plane size (default 1G: 8 GiB of worker
#                                                 # memory while it runs)
#   MH_PLACEMENT_MS=5000 bench/multihost_bench.sh  # how long the placement row runs (default 1 s)
#   MH_TLS=1 bench/multihost_bench.sh        # the cluster with TLS on every TCP connection
#                                            # (troupe start --head --tls); the TCP floor stays
#                                            # plaintext
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-bench}
troupe=$build/troupe
bench=$build/bench/multihost_bench
for f in "$troupe" "$bench"; do
  [[ -x $f ]] || { echo "multihost_bench.sh: $f is missing: build it first" >&2; exit 2; }
done
((EUID == 0)) || { echo "multihost_bench.sh: needs root for network namespaces" >&2; exit 2; }
netns() { bash "$root/tests/netns/netns.sh" "$@"; }
work=$(mktemp -d)
chmod 700 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  for h in tr-h1 tr-h2 tr-h3; do
    for p in $(ip netns pids "$h" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  netns down
  rm -rf "$work"
}
trap cleanup EXIT
netns up 3 >/dev/null || { echo "netns up failed" >&2; exit 1; }
TROUPE_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export TROUPE_TOKEN
head_address=10.77.0.1:16380
wait_up() {  # wait_up NAME
  for _ in $(seq 150); do
    TMPDIR=$work/h1 netns exec tr-h1 "$troupe" status --address $head_address 2>/dev/null |
      grep -Eq "^  $1 .* up " && return 0
    sleep 0.1
  done
  echo "multihost_bench.sh: $1 did not join" >&2
  return 1
}
mkdir -m 700 "$work/h1" "$work/h2" "$work/h3"
tls_head=() tls_agent=() tls_env=()
if [[ ${MH_TLS:-0} == 1 ]]; then
  tls_dir=$work/h1/troupe-$EUID/standing/tls
  tls_head=(--tls) tls_agent=(--tls-dir "$tls_dir") tls_env=(TROUPE_TLS_DIR="$tls_dir")
fi
TMPDIR=$work/h1 netns exec tr-h1 "$troupe" start --head "${tls_head[@]}" --block \
  --node-ip-address 10.77.0.1 --port 16380 >"$work/head.log" 2>&1 &
pids+=($!)
for spec in tr-h2:node-a:10.77.0.2 tr-h3:node-b:10.77.0.3; do
  IFS=: read -r h name ip <<<"$spec"
  sleep 0.2
  TMPDIR=$work/${h#tr-} netns exec "$h" "$troupe" start --address $head_address \
    "${tls_agent[@]}" --block \
    --node-ip-address "$ip" --host-name "$name" --num-cpus 32 --num-gpus 0 >"$work/$name.log" 2>&1 &
  pids+=($!)
  wait_up "$name" || exit 1
done
netns exec tr-h3 "$bench" echo-server 17000 >"$work/echo.log" 2>&1 &
pids+=($!)
cat >"$work/cut.nft" <<'NFT'
table inet troupe_cut {
  chain in { type filter hook input priority 0; policy accept; iifname "eth0" drop; }
  chain out { type filter hook output priority 0; policy accept; oifname "eth0" drop; }
}
NFT
# What each host sent onto the bridge: rx_bytes of the bridge ports tr-v1..3 (root namespace; the
# driver reads them through nsenter into this script's namespace).
net_counters=$(printf '/sys/class/net/tr-v%s/statistics/rx_bytes ' 1 2 3)
echo "+ multihost_bench (driver in tr-h1; head 10.77.0.1, node-a 10.77.0.2, node-b 10.77.0.3)" \
  "${MH_TLS:+TLS=$MH_TLS}"
netns exec tr-h1 env TROUPE_ADDRESS=$head_address ECHO_ADDR=10.77.0.3:17000 "${tls_env[@]}" \
  CUT_CMD="ip netns exec tr-h3 nft -f $work/cut.nft" \
  RESTORE_CMD="ip netns exec tr-h3 nft delete table inet troupe_cut" \
  NET_BYTES_CMD="nsenter --net=/proc/$$/ns/net cat $net_counters" \
  MH_DATA_BYTES="${MH_DATA_BYTES:-1G}" MH_PLACEMENT_MS="${MH_PLACEMENT_MS:-1000}" "$bench"
rc=$?
if ((rc != 0)); then
  for f in head node-a node-b; do echo "--- $f.log (last lines)"; tail -n 20 "$work/$f.log"; done
fi
exit $rc
