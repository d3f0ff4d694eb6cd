#!/usr/bin/env bash
# launch/scaling.sh — one config at several scales, each run into its own
# output directory, then one table and one PNG of how it scaled.
#
#   launch/scaling.sh [--out DIR] CONFIG "1 2 4" [section.key=value ...]
#       runs here, one after the other, with launch/local.sh at each RANK count
#   launch/scaling.sh --slurm [--out DIR] CONFIG "1 2 4 8" [section.key=value ...]
#       submits launch/slurm.sbatch at each NODE count (8 ranks a node,
#       RANKS_PER_NODE to change) and a last job that collects once all ended
#   launch/scaling.sh --collect DIR
#       (re)builds the table and plot from DIR/runs.txt
#
# Each run writes DIR/<ranks>ranks/ (metrics.h5, train.log, ...); DIR/runs.txt
# lists "ranks directory" per run; the table (ranks, tokens/s, per-rank
# tokens/s, scaling efficiency against the smallest run, comm fraction,
# imbalance) goes to stdout and DIR/scaling.txt, the plot to DIR/scaling.png
# (bench/scaling_table.py). Default DIR: runs/scaling-<config name>.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  echo "usage: launch/scaling.sh [--slurm] [--out DIR] CONFIG \"COUNTS\" [section.key=value ...]" >&2
  echo "       launch/scaling.sh --collect DIR" >&2
  exit 2
}
python=${RNND_PYTHON:-/usr/bin/python3}
collect() { "$python" "$root/bench/scaling_table.py" "$1"; }

slurm=0 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --slurm) slurm=1; shift ;;
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --collect) [ $# -eq 2 ] || usage; collect "$2"; exit ;;
    -h|--help) usage ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || usage
config=$1 counts=$2
shift 2
[ -f "$config" ] || { echo "launch/scaling.sh: $config: no such config file" >&2; exit 2; }
for n in $counts; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "launch/scaling.sh: '$n' in \"$counts\" is not a positive integer" >&2; exit 2; }
done
name=$(basename "$config" .ini)
out=${out:-runs/scaling-$name}
mkdir -p "$out"
: > "$out/runs.txt"

if [ "$slurm" -eq 1 ]; then
  per_node=${RANKS_PER_NODE:-8}
  ids=()
  for nodes in $counts; do
    ranks=$((nodes * per_node)) dir="$out/${ranks}ranks"
    echo "$ranks $dir" >> "$out/runs.txt"
    ids+=("$(sbatch --parsable --nodes="$nodes" --ntasks-per-node="$per_node" --job-name="scale-$name-$nodes" \
               "$root/launch/slurm.sbatch" "$config" "output.dir=$dir" "$@")")
  done
  dependency=$(IFS=:; echo "${ids[*]}")
  sbatch --parsable --dependency="afterany:$dependency" --nodes=1 --ntasks=1 --job-name="scale-$name-collect" \
    --output="$out/collect.out" --wrap "$root/launch/scaling.sh --collect $out" >/dev/null
  echo "launch/scaling.sh: submitted ${#ids[@]} runs (${ids[*]}) and a collect job; results in $out/scaling.txt"
  exit 0
fi

for ranks in $counts; do
  dir="$out/${ranks}ranks"
  rm -rf "$dir"
  echo "== $ranks rank(s) -> $dir"
  if ! "$root/launch/local.sh" "$ranks" "$config" "output.dir=$dir" "$@" > "$dir.log" 2>&1; then
    echo "launch/scaling.sh: the $ranks-rank run failed; its log ends:" >&2
    tail -n 5 "$dir.log" >&2
    exit 1
  fi
  echo "$ranks $dir" >> "$out/runs.txt"
done
collect "$out"
