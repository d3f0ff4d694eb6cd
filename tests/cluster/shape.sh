#!/usr/bin/env bash
# tests/cluster/shape.sh RATE [DELAY] — (re)shapes both ends of every node's
# link of the emulated cluster (tests/cluster/up.sh): RATE as NNgbit or
# NNmbit, DELAY one way per link end (e.g. 50us), so a packet between two
# nodes crosses two shaped ends.
#
# With sch_netem in the kernel, netem does both (rate and delay, with a
# queue long enough to delay packets rather than drop them). Kernels built
# without it (CONFIG_NET_SCH_NETEM unset, as on this project's CI VMs) get
# the rate from tbf, with a bucket of 1 ms at the rate (at least 128 KiB, so
# a 64 KiB GSO packet always fits), and no added delay: the script says so,
# and records the link's measured round trip (ping) in STATE/shape, which is
# what bench/scaling_model.py must then be given.
set -euo pipefail
state=${RNND_CLUSTER_DIR:-/tmp/rnnd-cluster}
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: tests/cluster/shape.sh RATE [DELAY]" >&2; exit 2; }
[ -s "$state/nodes" ] || { echo "tests/cluster/shape.sh: no cluster in $state (tests/cluster/up.sh first)" >&2; exit 1; }
rate=$1 delay=${2:-0us}
[[ $delay =~ ^[0-9]+(us|ms)$ ]] || { echo "tests/cluster/shape.sh: DELAY must look like 50us or 1ms, got '$delay'" >&2; exit 2; }
[[ $rate =~ ^([0-9]+)(gbit|mbit)$ ]] || { echo "tests/cluster/shape.sh: RATE must look like 10gbit or 500mbit, got '$rate'" >&2; exit 2; }
bits=${BASH_REMATCH[1]}
[ "${BASH_REMATCH[2]}" = gbit ] && bits=$((bits * 1000000000)) || bits=$((bits * 1000000))
burst=$((bits / 8 / 1000)); [ "$burst" -ge 131072 ] || burst=131072

qdisc() {  # qdisc DEV [ip netns exec NODE]: shapes one link end
  local dev=$1; shift
  if [ "$mode" = netem ]; then
    "$@" tc qdisc replace dev "$dev" root netem delay "$delay" rate "$rate" limit 100000
  else
    "$@" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 200ms
  fi
}
mode=netem
first=$(head -n1 "$state/nodes" | cut -d' ' -f1)
if ! tc qdisc replace dev "$first-h" root netem delay "$delay" rate "$rate" limit 100000 2>/dev/null; then
  mode=tbf
  [ "$delay" = 0us ] || [ "$delay" = 0ms ] ||
    echo "tests/cluster/shape.sh: this kernel has no sch_netem: links get the rate ($rate, tbf) but no added delay ($delay asked)" >&2
fi
while read -r node _; do
  qdisc "$node-h"
  qdisc eth0 ip netns exec "$node"
done < "$state/nodes"
# the round trip between two nodes (or node and bridge), as measured now
peer=$(sed -n 2p "$state/nodes" | cut -d' ' -f2); peer=${peer:-$(head -n1 "$state/nodes" | cut -d' ' -f2 | sed 's/\.[0-9]*$/.1/')}
rtt=$("$here/node_exec.sh" "$first" ping -q -c 20 -i 0.01 "$peer" 2>/dev/null |
      awk -F'/' '/^rtt|^round-trip/ {print $5 * 1000}')
echo "rate=$rate delay_asked=$delay qdisc=$mode rtt_us=${rtt:-unknown}" > "$state/shape"
echo "tests/cluster/shape.sh: links $rate via $mode; measured round trip ${rtt:-unknown} us"
