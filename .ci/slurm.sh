#!/usr/bin/env bash
# A real one-node SLURM cluster on 127.0.0.1 for CI and for trying profiles/slurm on a laptop.
# Debian/Ubuntu, run as root; no systemd and no cgroups needed. Idempotent: running it again
# leaves a running, identically configured cluster alone.
#
#   .ci/slurm.sh [start]   install (apt-get) if needed, configure, start, wait until sinfo answers
#   .ci/slurm.sh stop      stop the daemons it started; park slurm.conf (see below)
#   .ci/slurm.sh status
#
# The node carries two partitions named like config.yaml's `cluster:` section
# (SLURM_CPU_PARTITION, SLURM_GPU_PARTITION; default cpu and gpu). The GPU partition's node
# advertises SLURM_CI_GPUS stand-in GPUs (GRES backed by empty files, as SLURM drops GPUs
# without a File): SLURM schedules `--gpus=N` requests as on a real cluster, while the jobs
# themselves see no CUDA device (slurmd logs "not a valid character or block device": harmless).
# There is no accounting daemon (slurmdbd): sacct cannot answer, so clients must ask squeue
# (MinJobAge keeps finished jobs visible to squeue for 10 minutes).
#
# Exit status 3: SLURM cannot be set up here (not root, no apt-get, or apt-get failed).
set -euo pipefail

CPU_PARTITION="${SLURM_CPU_PARTITION:-cpu}"
GPU_PARTITION="${SLURM_GPU_PARTITION:-gpu}"
GPUS="${SLURM_CI_GPUS:-2}"
NODE="$(hostname -s)"
ETC=/etc/slurm
CONF="$ETC/slurm.conf"
PARKED="$ETC/slurm.conf.stopped"
LOGDIR=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
FAKE_GPUS=/run/fedrepro-ci

unavailable() { echo "SLURM cannot be set up here: $*" >&2; exit 3; }

# running PIDFILE: the pid in PIDFILE is alive and one of our daemons (slurmctld leaves its
# pidfile behind on exit, and the pid may have been reused since).
running() {
  [ -s "$1" ] || return 1
  grep -qxE 'slurmctld|slurmd|munged' "/proc/$(cat "$1")/comm" 2>/dev/null
}

stop_daemon() {
  local pidfile=$1 pid
  if running "$pidfile"; then
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    echo "stopped $(basename "$pidfile" .pid) (pid $pid)"
  fi
  rm -f "$pidfile"
}

node_ready() { [ -n "$(sinfo -h -N -n "$NODE" -t idle,mixed,allocated 2>/dev/null)" ]; }

stop() {
  stop_daemon "$SLURMD_PID"
  stop_daemon "$CTLD_PID"
  stop_daemon "$MUNGE_PID"
  # With slurm.conf in place but no controller, every SLURM client call (the Snakemake plugin
  # runs `scontrol show config` at import) waits for its connection timeout; without a
  # config it fails at once. `start` writes the config again.
  if [ -f "$CONF" ]; then mv "$CONF" "$PARKED"; fi
}

install_packages() {
  local missing=0
  for cmd in slurmctld slurmd sbatch munged; do command -v "$cmd" >/dev/null || missing=1; done
  [ "$missing" = 0 ] && return
  command -v apt-get >/dev/null || unavailable "no apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || unavailable "apt-get update failed"
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null \
    || unavailable "apt-get install slurmctld slurmd slurm-client munge failed"
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then   # Debian's postinst normally creates it
    install -d -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown -R munge:munge /etc/munge
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  running "$MUNGE_PID" || runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 25); do munge -n </dev/null | unmunge >/dev/null 2>&1 && return; sleep 0.2; done
  echo "munged does not answer" >&2
  exit 1
}

write_config() {
  local cpus mem_mb
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # nproc obeys OMP_NUM_THREADS; the node has them all
  # 80% of MemTotal, rounded: stable between runs (MemAvailable is not), so reruns are no-ops.
  mem_mb=$(awk '/^MemTotal/ {print int($2 / 1024 * 0.8 / 100) * 100}' /proc/meminfo)
  install -d -o slurm -g slurm /var/spool/slurmctld "$LOGDIR"
  install -d /var/spool/slurmd "$ETC"
  local new
  new=$(mktemp)
  cat >"$new" <<EOF
# Written by .ci/slurm.sh: one node on 127.0.0.1, two partitions, no accounting, no cgroups.
ClusterName=fedrepro-ci
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${SLURMD_PID}
SlurmctldLogFile=${LOGDIR}/slurmctld.log
SlurmdLogFile=${LOGDIR}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
# Finished jobs stay visible to squeue (and scontrol show job) for 10 minutes.
MinJobAge=600
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
Waittime=0
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} Gres=gpu:${GPUS} State=UNKNOWN
PartitionName=${CPU_PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName=${GPU_PARTITION} Nodes=${NODE} Default=NO MaxTime=INFINITE State=UP
EOF
  install -d "$FAKE_GPUS"
  for i in $(seq 0 $((GPUS - 1))); do touch "$FAKE_GPUS/gpu$i"; done
  echo "NodeName=${NODE} Name=gpu File=${FAKE_GPUS}/gpu[0-$((GPUS - 1))]" >"$ETC/gres.conf.new"
  rm -f "$PARKED"
  if ! cmp -s "$new" "$CONF" || ! cmp -s "$ETC/gres.conf.new" "$ETC/gres.conf"; then
    # a changed configuration needs fresh daemons
    stop_daemon "$SLURMD_PID"
    stop_daemon "$CTLD_PID"
    install -m 0644 "$new" "$CONF"
    install -m 0644 "$ETC/gres.conf.new" "$ETC/gres.conf"
  fi
  rm -f "$new" "$ETC/gres.conf.new"
}

start() {
  [ "$(id -u)" = 0 ] || unavailable "not root (it installs packages and writes /etc/slurm)"
  install_packages
  start_munge
  write_config
  running "$CTLD_PID" || slurmctld -i       # -i: start even if saved state is unreadable
  running "$SLURMD_PID" || slurmd
  for _ in $(seq 60); do node_ready && break; sleep 0.5; done
  if ! node_ready; then
    echo "SLURM node ${NODE} did not become ready" >&2
    tail -n 20 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true
    exit 1
  fi
  sinfo
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) sinfo && squeue ;;
  *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac
