#!/usr/bin/env bash
# tests/cluster/down.sh — removes the emulated cluster of tests/cluster/up.sh:
# stops the daemons it started (by the pids in their pid files, and only if
# that pid still runs the program named there), deletes the node namespaces
# and links it listed, the bridge, its /etc/hosts lines and the state
# directory. Safe to run twice, and after a half-made cluster.
set -uo pipefail
state=${RNND_CLUSTER_DIR:-/tmp/rnnd-cluster}
[ "$(id -u)" -eq 0 ] || { echo "tests/cluster/down.sh: needs root" >&2; exit 1; }
[ -d "$state" ] || exit 0

# pid files: STATE/pids/NAME.pid next to STATE/pids/NAME.prog (the program)
stop() {  # stop SIGNAL: signal every recorded daemon; 0 if none is left
  local left=0 f pid prog
  for f in "$state"/pids/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) prog=$(cat "${f%.pid}.prog" 2>/dev/null)
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if [ -n "$prog" ] && { tr "\\0" " " < "/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$prog"; then
      kill "-$1" "$pid" 2>/dev/null && left=1
    fi
  done
  return $left
}
if [ -d "$state/pids" ]; then
  stop TERM || for _ in $(seq 1 50); do sleep 0.1; stop 0 && break; done
  stop KILL || true
fi
if [ -f "$state/nodes" ]; then
  while read -r node _; do
    ip link del "$node-h" 2>/dev/null
    ip netns del "$node" 2>/dev/null
  done < "$state/nodes"
fi
[ -f "$state/bridge" ] && ip link del rnnd-br0 2>/dev/null
# rewritten in place, not replaced: /etc/hosts is often a bind mount
hosts=$(grep -v -F "# rnnd-cluster $state" /etc/hosts)
printf '%s\n' "$hosts" > /etc/hosts
rm -rf "$state"
echo "tests/cluster/down.sh: removed the cluster in $state"
