#!/usr/bin/env bash
# bench/cluster_scaling.sh [--out DIR] [--links "10gbit 1gbit"] [--counts "1 2 4"]
#                          CONFIG [section.key=value ...]
# Scaling across node counts on the emulated cluster (tests/cluster, root
# only), at each link rate: one rank a node (THREADS threads each, default
# 1: the nodes share this machine's cores, so compute does not scale; the
# point is communication and the launch path).
#
# For each link rate: the links are shaped (tests/cluster/shape.sh), the
# round trip between two nodes (ping) and what all links carry at once (a
# ring of TCP streams, bench/tcp_streams.py) are measured; then
#   - launch/scaling.sh --hostfile trains CONFIG at every node count;
#   - bench_allreduce times grad_sync, rnn_dist's gradient all-reduce, on a
#     gradient of the run's size, buckets and wire type, at every count > 1;
#   - bench/scaling_model.py --flat predicts that time from the link rate,
#     half the round trip and the measured total.
# DIR/results.txt holds one row per (link, nodes); bench/cluster_scaling_table.py
# prints the table (also DIR/scaling.txt) and draws DIR/scaling.png.
# Default DIR: runs/cluster-scaling-<config name>.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${RNND_PYTHON:-/usr/bin/python3}
usage() { echo "usage: bench/cluster_scaling.sh [--out DIR] [--links \"10gbit 1gbit\"] [--counts \"1 2 4\"] CONFIG [section.key=value ...]" >&2; exit 2; }
out="" links="10gbit 1gbit" counts="1 2 4"
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --links) [ $# -ge 2 ] || usage; links=$2; shift 2 ;;
    --counts) [ $# -ge 2 ] || usage; counts=$2; shift 2 ;;
    -h|--help) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
config=$1; shift
[ -f "$config" ] || { echo "bench/cluster_scaling.sh: $config: no such config file" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench/cluster_scaling.sh: needs root (the emulated cluster)" >&2; exit 2; }
out=${out:-runs/cluster-scaling-$(basename "$config" .ini)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
bench=${RNND_BENCH_ALLREDUCE:-$root/build/bench_allreduce}
most=$(echo "$counts" | tr ' ' '\n' | sort -n | tail -n1)
export RNND_CLUSTER_DIR=$out/cluster THREADS=${THREADS:-1} RANKS_PER_NODE=1
"$root/tests/cluster/down.sh" >/dev/null 2>&1 || true
"$root/tests/cluster/up.sh" "$most"
trap '"$root/tests/cluster/down.sh"' EXIT
# shellcheck disable=SC1091
source "$RNND_CLUSTER_DIR/env.sh"

streams() {  # streams N: MB/s of N simultaneous streams node k -> k+1, summed
  local n=$1 k files=()
  for k in $(seq 1 "$n"); do
    "$root/tests/cluster/node_exec.sh" "rnnd-n$k" "$python" "$root/bench/tcp_streams.py" serve 5201 \
      > "$out/stream.$k" &
    files+=("$out/stream.$k")
  done
  for k in $(seq 1 "$n"); do
    "$root/tests/cluster/node_exec.sh" "rnnd-n$k" "$python" "$root/bench/tcp_streams.py" send \
      "rnnd-n$((k % n + 1))" 5201 3 &
  done
  wait
  awk '/^MB\/s/ {s += $2} END {printf "%.1f", s}' "${files[@]}"
}

gbit() { case $1 in *gbit) echo "${1%gbit}" ;; *mbit) echo "${1%mbit} / 1000" | bc -l ;; esac; }

: > "$out/results.txt"
for link in $links; do
  "$root/tests/cluster/shape.sh" "$link"
  rtt=$(sed -n 's/.*rtt_us=\([0-9.]*\).*/\1/p' "$RNND_CLUSTER_DIR/shape")
  total=$(streams "$most")
  echo "== $link: round trip $rtt us; $most streams at once carry $total MB/s in all"
  "$root/launch/scaling.sh" --hostfile "$RNND_CLUSTER_HOSTFILE" --out "$out/$link" "$config" "$counts" "$@"
  log=$(ls "$out/$link"/*ranks.log | sort -V | tail -n1)
  params=$(sed -n 's/.*, \([0-9]*\) parameters$/\1/p' "$log" | head -n1)
  bucket=$(sed -n 's/.*buckets\{0,1\} of <= \([0-9.]*\) MiB.*/\1/p' "$log" | head -n1)
  wire=$(sed -n 's/.*MiB, \([a-z0-9]*\) on the wire.*/\1/p' "$log" | head -n1)
  for nodes in $counts; do
    measured=0 predicted=0
    if [ "$nodes" -gt 1 ]; then
      mpirun -np "$nodes" --hostfile "$RNND_CLUSTER_HOSTFILE" --map-by ppr:1:node --bind-to none "$bench" \
        --min-bytes 1024 --max-bytes 1024 --numel "$params" --bucket-mb "$bucket" --seconds-per-size 3 \
        > "$out/$link/allreduce.$nodes.txt"
      measured=$(awk -v w="$wire" '$1 == w && NF >= 6 {print $5}' "$out/$link/allreduce.$nodes.txt")
      predicted=$("$python" "$root/bench/scaling_model.py" --flat "$nodes" --link-gbit "$(gbit "$link")" \
        --link-us "$(echo "$rtt / 2" | bc -l)" --host-gbs "$(echo "$total / 1000" | bc -l)" --params "$params" \
        --wire "$wire" --bucket-mb "$bucket" | awk -v n="$nodes" '$1 == n {print $2}')
    fi
    echo "$link $nodes $rtt $total $measured $predicted $out/$link/${nodes}ranks" >> "$out/results.txt"
  done
done
"$python" "$root/bench/cluster_scaling_table.py" "$out"
