#!/usr/bin/env bash
# A standing cluster with TLS on every TCP connection, across network-namespace hosts
# (tests/netns/netns.sh): `troupe start --head --tls` in tr-h1 (10.77.0.1) makes the cluster's
# CA in its run directory; the agents node-a (tr-h2) and node-b (tr-h3) join with --tls-dir and
# make their hosts' certificates; the driver (multihost_test, as in multihost_test.sh) runs in
# tr-h1 with TROUPE_TLS_DIR. Cases: sharded dispatch and an object across the hosts work over
# TLS, and the frames captured on the bridge meanwhile hold TLS records and none of the
# plaintext that the same run puts on the wire without TLS (multihost_test.sh checks that it
# does); `troupe status` of this host finds the TLS directory the head recorded; a client without
# TLS (status, a driver) is refused and told why; a peer sending plaintext frames is closed with
# the head's logged TLS reason.
#
#   tls_test.sh TROUPE_CLI MULTIHOST_TEST_BINARY
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
capture_pid=
check() {  # check WHAT COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
ns() { bash "$here/netns.sh" exec "$@"; }
ns_pids() { for h in tr-h1 tr-h2 tr-h3; do ip netns pids "$h" 2>/dev/null; done; }
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
readonly tls_dir=$work/h1/troupe-$EUID/standing/tls

wait_for() {  # wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds
  local deadline=$((SECONDS + $1))
  shift
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
host_up() {  # host_up NAME: the head lists NAME as up (status finds TLS through head.tls)
  TMPDIR=$work/h1 ns tr-h1 "$troupe" status --address $head_address | grep -Eq "^  $1 .* up "
}

mkdir -m 700 "$work/h1" "$work/h2" "$work/h3"
TMPDIR=$work/h1 ns tr-h1 "$troupe" start --head --tls --block --node-ip-address 10.77.0.1 \
  --port 16380 >"$work/head.log" 2>&1 &
daemons+=($!)
check "the head listens" wait_for 15 ns tr-h1 bash -c "ss -ltnH | grep -q '10.77.0.1:16380 '"
check "the head made the cluster's CA, its key private" \
  test -s "$tls_dir/ca.pem" -a "$(stat -c %a "$tls_dir/ca.key" 2>/dev/null)" = 600
start_agent() {  # start_agent NAMESPACE NAME ADDRESS
  TMPDIR=$work/${1#tr-} ns "$1" "$troupe" start --address $head_address --tls-dir "$tls_dir" \
    --block --node-ip-address "$3" --host-name "$2" --num-cpus 4 --num-gpus 2 \
    >"$work/$2.log" 2>&1 &
  daemons+=($!)
  check "$2 joins over TLS" wait_for 15 host_up "$2"
  check "$2 has its host's certificate" test -s "$tls_dir/$2.pem"
}
start_agent tr-h2 node-a 10.77.0.2
start_agent tr-h3 node-b 10.77.0.3

run() {  # run OUT TEST [ENV=VALUE...]: one test of the driver in tr-h1, connected by address
  local out=$work/$1 name=$2 rc=0
  shift 2
  ns tr-h1 env TROUPE_ADDRESS=$head_address "$@" "$driver" --gtest_filter="$name" >"$out" 2>&1 ||
    rc=$?
  ((rc == 0)) || { echo "--- $name:"; tail -n 40 "$out"; }
  return $rc
}

/usr/bin/python3 "$here/capture.py" trbr0 "$work/wire" "$work/capturing" >"$work/capture.out" &
capture_pid=$!
check "the bridge is captured" wait_for 10 test -s "$work/capturing"
check "sharded dispatch across two hosts over TLS" \
  run dispatch.out MultiHost.ShardedDispatchAcrossTwoHosts TROUPE_TLS_DIR="$tls_dir"
check "worker output reaches the driver over TLS" \
  grep -Eq '^\(mh[-_0-9]* pid=[1-9][0-9]*\) line-from-rank-3$' "$work/dispatch.out"
check "an object crosses the network once per host over TLS" \
  run object.out MultiHost.ObjectGoesOncePerHost TROUPE_TLS_DIR="$tls_dir"
kill -TERM "$capture_pid"
wait "$capture_pid" 2>/dev/null
capture_pid=
cat "$work/capture.out"
check "the capture missed no frame" grep -q " 0 dropped" "$work/capture.out"
count() { /usr/bin/python3 "$here/capture.py" --count "$work/wire" "$1"; }
records=$(/usr/bin/python3 "$here/capture.py" --tls-records "$work/wire")
bytes=$(stat -c %s "$work/wire")
echo "captured $bytes bytes on the bridge, $records TLS application-data records"
check "the bridge carried the 16 MiB object twice and TLS records" \
  test "$bytes" -gt $((32 << 20)) -a "$records" -gt 1000
check "no worker output line crossed the bridge as plaintext" test "$(count line-from-rank)" = 0
check "no method name crossed the bridge as plaintext" test "$(count rendezvous)" = 0

status_plain() {  # a client without TLS: refused, and the error says TLS may be why
  local out rc=0
  out=$(TMPDIR=$work/h2 ns tr-h2 timeout 60 "$troupe" status --address $head_address 2>&1) || rc=$?
  ((rc != 0)) && [[ $out == *"uses TLS, set TROUPE_TLS_DIR"* ]] || { echo "$out"; return 1; }
}
check "troupe status without TLS is refused and told why" status_plain
driver_plain() {
  ! run plain.out MultiHost.ShardedDispatchAcrossTwoHosts >/dev/null &&
    grep -q "uses TLS, set TROUPE_TLS_DIR" "$work/plain.out"
}
check "a driver without TLS is refused and told why" driver_plain
plaintext_frames() {  # the bytes of a troupe frame, in plaintext, from node-b's namespace
  ns tr-h3 timeout 20 bash -c 'exec 3<>/dev/tcp/10.77.0.1/16380 && printf "TRP1%060d" 0 >&3 &&
    cat <&3 >/dev/null'
  grep -q "TLS handshake with tcp:10.77.0.3:[0-9]* failed: wrong version number" "$work/head.log"
}
check "a peer sending plaintext frames is closed with the TLS reason" plaintext_frames
check "the cluster keeps serving over TLS" \
  run dispatch2.out MultiHost.ShardedDispatchAcrossTwoHosts TROUPE_TLS_DIR="$tls_dir"

if ((failures > 0)); then
  for f in head node-a node-b; do echo "--- $f.log (last lines)"; tail -n 30 "$work/$f.log"; done
  exit 1
fi
echo "all TLS multihost cases passed"
