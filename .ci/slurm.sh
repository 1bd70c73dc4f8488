#!/usr/bin/env bash
# A real one-node Slurm on this machine, for the launcher tests: `.ci/slurm.sh start` installs the
# distribution's slurm-wlm and munge when missing, writes a one-node slurm.conf (this machine's
# cores and memory, as `slurmd -C` reports them), and starts munged, slurmctld and slurmd without
# systemd; `.ci/slurm.sh stop` stops what start started; `.ci/slurm.sh status` shows the node.
# Root (or sudo). Debian 12 ships Slurm 22.05.
set -euo pipefail

SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
CONF=/etc/slurm/slurm.conf
MARK="# written by torch-speed-harness .ci/slurm.sh"
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
RUN=/run/harness-slurm   # pid files; their presence says this script started the daemons

install() {
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq slurm-wlm munge
  fi
}

write_conf() {
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    echo "slurm.sh: $CONF exists and was not written by this script; leaving it (and its cluster) alone." >&2
    return
  fi
  local host node
  host=$(hostname -s)
  # `slurmd -C` prints this node's line (CPUs, sockets, cores, RealMemory); a node configured with
  # more than it has would be drained.
  node=$(slurmd -C | head -n 1)
  $SUDO mkdir -p /etc/slurm
  $SUDO tee "$CONF" >/dev/null <<EOF
$MARK
ClusterName=harness
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
# No cgroups here (containers, no systemd): processes are tracked by parentage, tasks not pinned.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Cores are the consumable resource, so two one-core worker jobs run side by side.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
# scancel: SIGTERM, then SIGKILL after KillWait seconds (short, so tests see a killed worker fast).
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
SchedulerParameters=sched_interval=2
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  install
  write_conf
  $SUDO mkdir -p "$STATE" "$SPOOL" "$LOGS" "$RUN" /run/munge
  $SUDO chown slurm: "$STATE" "$LOGS"
  $SUDO chown munge: /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    $SUDO runuser -u munge -- mungekey --create
  fi
  if ! pgrep -u munge -x munged >/dev/null; then
    $SUDO runuser -u munge -- /usr/sbin/munged
    touch_started munged
  fi
  if ! pgrep -x slurmctld >/dev/null; then
    $SUDO /usr/sbin/slurmctld
    touch_started slurmctld
  fi
  if ! pgrep -x slurmd >/dev/null; then
    $SUDO /usr/sbin/slurmd
    touch_started slurmd
  fi
  for _ in $(seq 60); do
    if sinfo -h -o "%T" 2>/dev/null | grep -qE "^(idle|mixed|allocated)"; then
      sinfo
      return 0
    fi
    sleep 1
  done
  echo "slurm.sh: the node did not become idle in 60 s; see $LOGS/slurmctld.log and $LOGS/slurmd.log" >&2
  sinfo -R >&2 || true
  return 1
}

touch_started() { $SUDO touch "$RUN/started-$1"; }

stop() {
  # Only what start started: a Slurm or munge that was already running stays.
  stop_one slurmd "$RUN/slurmd.pid"
  stop_one slurmctld "$RUN/slurmctld.pid"
  stop_one munged /run/munge/munged.pid
  return 0
}

stop_one() {  # NAME PIDFILE: SIGTERM to the pid in the file, then wait up to 20 s for it to end
  local pid
  [ -f "$RUN/started-$1" ] || return 0
  pid=$(cat "$2" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    $SUDO kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  $SUDO rm -f "$RUN/started-$1"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) sinfo && squeue ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
