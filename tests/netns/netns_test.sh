#!/usr/bin/env bash
# Self-test of the test-host harness (tests/netns/netns.sh), as the multi-host tests will use it:
# hosts reach each other and are reachable from the root namespace through the bridge; a host
# whose link is down is unreachable at once; the guard rule is in place; `down` leaves nothing.
# Needs root; exits 77 (skipped) otherwise. Every wait is bounded.
set -uo pipefail
cd "$(dirname "$0")"
if ((EUID != 0)); then
  echo "skipped: needs root to create network namespaces"
  exit 77
fi
py=/usr/bin/python3
failures=0
check() {  # check WHAT COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
trap 'bash netns.sh down' EXIT

bash netns.sh up 3 || { echo "FAILED: netns.sh up"; exit 1; }

# A one-shot TCP echo server in host 2, then clients from host 1 and from the root namespace.
server='import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 7100)); s.listen(); s.settimeout(10); print("listening", flush=True)
for _ in range(2):
    c,_=s.accept(); c.sendall(c.recv(64)); c.close()'
client='import socket,sys
c=socket.create_connection((sys.argv[1], 7100), timeout=float(sys.argv[2]))
c.sendall(b"ping"); sys.exit(0 if c.recv(64)==b"ping" else 1)'
coproc SERVER { bash netns.sh exec tr-h2 "$py" -c "$server"; }
server_pid=$SERVER_PID  # bash unsets SERVER_PID when the coprocess ends
read -r -t 10 line <&"${SERVER[0]}"
check "server listening in tr-h2" test "${line:-}" = listening
check "tr-h1 reaches tr-h2" bash netns.sh exec tr-h1 "$py" -c "$client" 10.77.0.2 5
check "the root namespace reaches tr-h2 through the bridge" "$py" -c "$client" 10.77.0.2 5
wait "$server_pid" 2>/dev/null

# Link down: a connection fails at once (no route), well before its 5 s time-out.
ip -n tr-h3 link set eth0 down
check "tr-h3 cannot reach tr-h2 with its link down" \
  bash -c "! timeout 6 bash netns.sh exec tr-h3 $py -c '$client' 10.77.0.2 5 2>/dev/null"
check "no default route in a host" bash -c "! bash netns.sh exec tr-h1 ip route | grep -q default"
check "guard rule in place" bash -c \
  "nft list table inet troupe_guard | grep -q 'ip daddr 10.77.0.0/24 oifname != \"trbr0\" drop'"

bash netns.sh down
check "down removes every namespace" bash -c "! ip netns list | grep -q '^tr-h'"
check "down removes the bridge" bash -c "! ip link show trbr0 >/dev/null 2>&1"
check "down removes the guard table" bash -c "! nft list table inet troupe_guard >/dev/null 2>&1"
trap - EXIT
echo "netns harness: $failures failed"
((failures == 0))
