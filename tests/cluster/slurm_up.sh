#!/usr/bin/env bash
# tests/cluster/slurm_up.sh — Slurm on the emulated cluster (called by
# tests/cluster/up.sh --slurm): munged (unless one already answers), slurmctld
# in the root namespace at the bridge address and one slurmd per node inside
# the node (tests/cluster/node_exec.sh). No cgroups (proctrack/linuxproc,
# task/none), jobs run as root, requeue on. MpiDefault=none: every slurmd
# here shares /tmp, where the PMIx plugin makes its per-step directory named
# without the node, so a step's second node fails to start; MPI jobs here
# start their ranks with mpirun inside the allocation (LAUNCHER=mpirun).
# Config, spool, logs and pid files live in STATE/slurm; STATE/env.sh gets
# SLURM_CONF for the client commands (sbatch, srun, squeue, scontrol).
# Daemons are recorded in STATE/pids for tests/cluster/down.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${RNND_CLUSTER_DIR:-/tmp/rnnd-cluster}
fail() { echo "tests/cluster/slurm_up.sh: $*" >&2; exit 1; }
for tool in slurmctld slurmd munged sbatch sinfo; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
    fail "'$tool' not found (apt-get install -y slurmctld slurmd slurm-client munge)"
done
[ -s "$state/nodes" ] || fail "no cluster in $state (tests/cluster/up.sh first)"
net=$(head -n1 "$state/nodes" | cut -d' ' -f2 | sed 's/\.[0-9]*$//')
dir=$state/slurm
mkdir -p "$dir/spool" "$dir/log" "$state/pids"
record() { echo "$2" > "$state/pids/$1.pid"; echo "$3" > "$state/pids/$1.prog"; }

# munge: the one already running, or ours (as the munge user)
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || fail "/etc/munge/munge.key missing (the munge package makes it; or run mungekey)"
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/rnnd-cluster.pid ||
    fail "munged did not start (see /var/log/munge/munged.log)"
  record munged "$(cat /run/munge/rnnd-cluster.pid)" munged
  munge -n | unmunge >/dev/null || fail "munged started but does not answer"
fi

head=$(hostname -s)
cpus=$(nproc --all)
mem=$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)
nodes=$(cut -d' ' -f1 "$state/nodes" | paste -sd, -)
{
  echo "# slurm.conf of the emulated cluster in $state (tests/cluster/slurm_up.sh)"
  echo "ClusterName=rnnd"
  echo "SlurmctldHost=$head($net.1)"
  echo "SlurmUser=root"
  echo "AuthType=auth/munge"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "MpiDefault=none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "SchedulerType=sched/backfill"
  echo "ReturnToService=2"
  echo "JobRequeue=1"
  echo "KillWait=5"
  echo "MinJobAge=300"
  echo "StateSaveLocation=$dir/ctld"
  echo "SlurmdSpoolDir=$dir/spool/%n"
  echo "SlurmctldPidFile=$dir/slurmctld.pid"
  echo "SlurmdPidFile=$dir/slurmd.%n.pid"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  echo "SlurmdLogFile=$dir/log/slurmd.%n.log"
  while read -r node addr; do
    echo "NodeName=$node NodeAddr=$addr CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  done < "$state/nodes"
  echo "PartitionName=emu Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
} > "$dir/slurm.conf"
mkdir -p "$dir/ctld"
echo "export SLURM_CONF=$dir/slurm.conf" >> "$state/env.sh"
export SLURM_CONF=$dir/slurm.conf

/usr/sbin/slurmctld -f "$dir/slurm.conf" -i || fail "slurmctld did not start (see $dir/log/slurmctld.log)"
for _ in $(seq 1 50); do [ -s "$dir/slurmctld.pid" ] && break; sleep 0.1; done
record slurmctld "$(cat "$dir/slurmctld.pid")" slurmctld
while read -r node _; do
  mkdir -p "$dir/spool/$node"
  "$here/node_exec.sh" "$node" /usr/sbin/slurmd -f "$dir/slurm.conf" -N "$node" ||
    fail "slurmd on $node did not start (see $dir/log/slurmd.$node.log)"
  for _ in $(seq 1 50); do [ -s "$dir/slurmd.$node.pid" ] && break; sleep 0.1; done
  record "slurmd-$node" "$(cat "$dir/slurmd.$node.pid")" slurmd
done < "$state/nodes"
count=$(wc -l < "$state/nodes")
for _ in $(seq 1 100); do
  idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$idle" -eq "$count" ] && break
  sleep 0.2
done
[ "$idle" -eq "$count" ] || fail "only $idle of $count nodes became idle in 20 s (sinfo: $(sinfo -h -N 2>&1 | tr '\n' ';'))"
echo "tests/cluster/slurm_up.sh: slurmctld and $count slurmd up; source $state/env.sh for sbatch/srun"
