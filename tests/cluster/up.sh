#!/usr/bin/env bash
# tests/cluster/up.sh N [--rate RATE] [--delay DELAY] [--slurm] — an
# emulated cluster of N nodes on this machine (root only).
#
# Each node is a network namespace rnnd-nK holding one end of a veth pair as
# eth0 (address NET.(10+K)/24); the other ends sit on a bridge rnnd-br0 in the
# root namespace, which holds NET.1. Both ends of every link are shaped with
# tc netem (RATE, e.g. 10gbit or 1gbit; DELAY one way per link end, e.g. 50us),
# so a packet between two nodes crosses two shaped ends. Node names resolve
# through tagged /etc/hosts lines. Processes enter a node with
# tests/cluster/node_exec.sh NODE CMD..., which also gives them the node's
# hostname (a UTS namespace of their own). With --slurm: munged (unless one
# already answers), slurmctld here and one slurmd per node, configured in the
# state directory. `source STATE/env.sh` sets up the shell for the cluster:
# mpirun (rsh agent, TCP between nodes on the private /24, shared memory
# inside one) with --hostfile STATE/hostfile, and with --slurm sbatch, srun
# and sinfo (SLURM_CONF).
#
# Everything lives in the state directory ($RNND_CLUSTER_DIR, default
# /tmp/rnnd-cluster): the node list, a hostfile (2 slots a node), pid files,
# logs. tests/cluster/down.sh removes all of it, also after a failed up.sh
# (which calls it itself). Addresses: $RNND_CLUSTER_NET (default 10.231.7),
# private, used only inside the namespaces made here and on the bridge.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${RNND_CLUSTER_DIR:-/tmp/rnnd-cluster}
net=${RNND_CLUSTER_NET:-10.231.7}
usage() { echo "usage: tests/cluster/up.sh N [--rate RATE] [--delay DELAY] [--slurm]" >&2; exit 2; }
fail() { echo "tests/cluster/up.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] || usage
nodes=$1; shift
[[ $nodes =~ ^[1-9][0-9]?$ && $nodes -le 16 ]] || fail "N must be 1..16, got '$nodes'"
rate=10gbit delay=0us slurm=0
while [ $# -gt 0 ]; do
  case $1 in
    --rate) [ $# -ge 2 ] || usage; rate=$2; shift 2 ;;
    --delay) [ $# -ge 2 ] || usage; delay=$2; shift 2 ;;
    --slurm) slurm=1; shift ;;
    *) usage ;;
  esac
done
[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, veth, tc); run it as root"
for tool in ip tc nsenter unshare ping; do
  command -v "$tool" >/dev/null || fail "'$tool' not found (apt-get install -y iproute2 util-linux iputils-ping)"
done
[ ! -e "$state/nodes" ] || fail "a cluster is already up in $state (tests/cluster/down.sh first)"
mkdir -p "$state"
: > "$state/nodes"
made=0
cleanup() { [ "$made" -eq 1 ] || { echo "tests/cluster/up.sh: failed; cleaning up" >&2; "$here/down.sh" >&2 || true; }; }
trap cleanup EXIT

# probe: can this machine make a network namespace at all?
probe=rnnd-probe-$$
ip netns add "$probe" 2>"$state/probe.err" ||
  fail "cannot create network namespaces here ($(head -n1 "$state/probe.err" 2>/dev/null || echo 'ip netns add failed'))"
ip netns del "$probe"

echo "bridge rnnd-br0" > "$state/bridge"
ip link add rnnd-br0 type bridge
ip addr add "$net.1/24" dev rnnd-br0
ip link set rnnd-br0 up
: > "$state/hostfile"
[ -z "$(tail -c1 /etc/hosts)" ] || echo >> /etc/hosts   # a last line without its newline
for k in $(seq 1 "$nodes"); do
  node=rnnd-n$k addr=$net.$((10 + k))
  echo "$node $addr" >> "$state/nodes"
  ip netns add "$node"
  ip link add "$node-h" type veth peer name eth0 netns "$node"
  ip link set "$node-h" master rnnd-br0 up
  ip -n "$node" addr add "$addr/24" dev eth0
  ip -n "$node" link set eth0 up
  ip -n "$node" link set lo up
  echo "$addr $node # rnnd-cluster $state" >> /etc/hosts
  echo "$node slots=2" >> "$state/hostfile"
done
"$here/shape.sh" "$rate" "$delay" || fail "shaping the links failed"
# what mpirun (and sbatch, which passes the environment on) needs here
cat > "$state/env.sh" <<ENV
export OMPI_MCA_plm_rsh_agent="$here/node_exec.sh --rsh"
export OMPI_MCA_btl=tcp,self,vader OMPI_MCA_btl_tcp_if_include=$net.0/24 OMPI_MCA_oob_tcp_if_include=$net.0/24
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the nodes share this machine's cores, which Open MPI cannot see: ranks that
# wait must yield them rather than spin
export OMPI_MCA_mpi_yield_when_idle=1
export RNND_CLUSTER_HOSTFILE=$state/hostfile
ENV
for k in $(seq 1 "$nodes"); do
  ping_ok=0
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if "$here/node_exec.sh" "rnnd-n$k" ping -c1 -W1 "$net.1" >/dev/null 2>&1; then ping_ok=1; break; fi
    sleep 0.3
  done
  [ "$ping_ok" -eq 1 ] || fail "node rnnd-n$k cannot reach the bridge at $net.1"
done
[ "$slurm" -eq 0 ] || "$here/slurm_up.sh"
made=1
echo "tests/cluster/up.sh: $nodes node(s) up ($rate, $delay per link end); state in $state"
