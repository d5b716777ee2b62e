#!/usr/bin/env bash
# A whole Slurm cluster on this machine for tests: munge, slurmctld and two slurmd "nodes" (n1 at
# 127.0.0.11, n2 at 127.0.0.12, each with 2 CPUs and 2 fake GPUs as character devices), as in
# shared/recipes/slurm-local-cluster.md.
#
#   tests/slurm/slurm.sh up      # installs the packages if missing, starts everything, waits
#                                # until both nodes are idle; prints `export SLURM_CONF=...`
#   tests/slurm/slurm.sh down    # stops every daemon it started and removes its files
#
# State lives in $TROUPE_SLURM_DIR (default /tmp/troupe-slurm). Idempotent: `up` first runs
# `down`. Needs root. Every wait is bounded.
set -euo pipefail

D=${TROUPE_SLURM_DIR:-/tmp/troupe-slurm}

stop_pidfile() {  # stop_pidfile FILE: SIGTERM, then SIGKILL after 5 s
  local f=$1 pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  [[ -d "$D" ]] || return 0
  stop_pidfile "$D/run/slurmd-n1.pid"
  stop_pidfile "$D/run/slurmd-n2.pid"
  stop_pidfile "$D/run/slurmctld.pid"
  [[ -f "$D/munged.started" ]] && stop_pidfile /run/munge/munged.pid
  rm -rf "$D"
}

install_packages() {
  local missing=()
  for p in slurm-wlm slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    </dev/null >/dev/null
}

up() {
  down
  install_packages
  mkdir -p "$D"/{run,spool,log,state,dev}
  for g in 0 1; do
    mknod "$D/dev/nvidia$g" c 1 3
  done
  local host
  host=$(hostname -s)
  cat >"$D/slurm.conf" <<CONF
ClusterName=troupetest
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=16817
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
GresTypes=gpu
NodeName=n1 NodeAddr=127.0.0.11 NodeHostname=$host Port=17001 CPUs=2 RealMemory=1000 Gres=gpu:2
NodeName=n2 NodeAddr=127.0.0.12 NodeHostname=$host Port=17002 CPUs=2 RealMemory=1000 Gres=gpu:2
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  cat >"$D/gres.conf" <<CONF
AutoDetect=off
NodeName=n1 Name=gpu File=$D/dev/nvidia[0-1]
NodeName=n2 Name=gpu File=$D/dev/nvidia[0-1]
CONF
  export SLURM_CONF="$D/slurm.conf"
  if ! munge -n >/dev/null 2>&1; then
    [[ -f /etc/munge/munge.key ]] || mungekey --create
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    touch "$D/munged.started"
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  mkdir -p "$D/spool/n1" "$D/spool/n2"
  /usr/sbin/slurmctld
  /usr/sbin/slurmd -N n1
  /usr/sbin/slurmd -N n2
  local idle=""
  for _ in $(seq 300); do
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
    ((idle == 2)) && break
    sleep 0.1
  done
  if ((idle != 2)); then
    echo "slurm.sh: the nodes did not become idle within 30 s:" >&2
    sinfo -N >&2 || true
    tail -n 20 "$D"/log/*.log >&2 || true
    return 1
  fi
  echo "export SLURM_CONF=$D/slurm.conf"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *)
    echo "usage: $0 up | down" >&2
    exit 2
    ;;
esac
