#!/usr/bin/env bash
# tests/cluster/node_exec.sh NODE CMD [ARG...] — runs CMD inside the emulated
# node NODE (tests/cluster/up.sh): its network namespace and a UTS namespace
# of its own whose hostname is NODE.
# tests/cluster/node_exec.sh --rsh [-options...] NODE WORDS... — the same as
# Open MPI's rsh agent (--mca plm_rsh_agent "node_exec.sh --rsh"): like ssh,
# it skips options and runs the words joined by spaces with sh -c.
#
# nsenter --net, not `ip netns exec`: the latter remounts /sys, after which
# slurmd finds no cgroup file system and refuses to start.
set -euo pipefail
rsh=0
if [ "${1:-}" = --rsh ]; then
  rsh=1; shift
  while [[ ${1:-} == -* ]]; do shift; done
fi
[ $# -ge 2 ] || { echo "usage: tests/cluster/node_exec.sh NODE CMD [ARG...]" >&2; exit 2; }
node=$1; shift
[ -e "/var/run/netns/$node" ] || { echo "tests/cluster/node_exec.sh: no emulated node '$node'" >&2; exit 255; }
if [ "$rsh" -eq 1 ]; then set -- sh -c "$*"; fi
exec nsenter --net="/var/run/netns/$node" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" "$@"
