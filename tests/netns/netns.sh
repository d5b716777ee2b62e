#!/usr/bin/env bash
# Test hosts on this machine: network namespaces joined by a bridge in the root namespace.
#
#   tests/netns/netns.sh up [N]          # hosts tr-h1..tr-hN (default 3) at 10.77.0.1..N
#   tests/netns/netns.sh down            # removes every namespace, link and rule it made
#   tests/netns/netns.sh exec H CMD...   # runs CMD in host H's network namespace (nsenter)
#
# Layout: each host tr-hK has one interface eth0 (10.77.0.K/24), the peer end of a veth pair
# whose other end (tr-vK) is a port of the bridge trbr0 in the root namespace; trbr0 has
# 10.77.0.254/24, so a connection to a test host made outside any namespace stays on this
# machine. Hosts get no default route: from a namespace only the test subnet is reachable. The
# nftables table inet troupe_guard drops, in the root namespace, any packet to the test subnet
# that would leave by an interface other than trbr0. Idempotent: `up` first removes what a
# previous run left; `down` succeeds when nothing is there. Needs root.
set -euo pipefail

readonly SUBNET=10.77.0
readonly BRIDGE=trbr0
readonly TABLE=troupe_guard

hosts() { ip netns list | awk '{print $1}' | grep -E '^tr-h[0-9]+$' || true; }

down() {
  for h in $(hosts); do ip netns del "$h"; done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^tr-v[0-9]+$' || true); do
    ip link del "$l" 2>/dev/null || true
  done
  nft list table inet "$TABLE" >/dev/null 2>&1 && nft delete table inet "$TABLE"
  return 0
}

up() {
  local n=${1:-3}
  down
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for k in $(seq 1 "$n"); do
    ip netns add "tr-h$k"
    ip link add "tr-v$k" type veth peer name eth0 netns "tr-h$k"
    ip link set "tr-v$k" master "$BRIDGE" up
    ip -n "tr-h$k" addr add "$SUBNET.$k/24" dev eth0
    ip -n "tr-h$k" link set eth0 up
    ip -n "tr-h$k" link set lo up
  done
  nft -f - <<NFT
table inet $TABLE {
  chain guard_out {
    type filter hook output priority 0; policy accept;
    ip daddr $SUBNET.0/24 oifname != "$BRIDGE" drop
  }
  chain guard_forward {
    type filter hook forward priority 0; policy accept;
    ip daddr $SUBNET.0/24 oifname != "$BRIDGE" drop
  }
}
NFT
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) down ;;
  exec)
    h=$2
    shift 2
    exec nsenter --net="/run/netns/$h" -- "$@"
    ;;
  *)
    echo "usage: $0 up [N] | down | exec HOST CMD..." >&2
    exit 2
    ;;
esac
