#!/usr/bin/env bash
# launch/scaling.sh — one config at several scales, each run into its own
# output directory, then one table and one PNG of how it scaled.
#
#   launch/scaling.sh [--out DIR] CONFIG "1 2 4" [section.key=value ...]
#       runs here, one after the other, with launch/local.sh at each RANK count
#   launch/scaling.sh --hostfile FILE [--out DIR] CONFIG "1 2 4" [section.key=value ...]
#       runs with mpirun across the first NODES hosts of FILE (an Open MPI
#       hostfile) at each NODE count, RANKS_PER_NODE ranks a node (default 1)
#       with cores / RANKS_PER_NODE threads each (THREADS to override)
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
  echo "usage: launch/scaling.sh [--slurm | --hostfile FILE] [--out DIR] CONFIG \"COUNTS\" [section.key=value ...]" >&2
  echo "       launch/scaling.sh --collect DIR" >&2
  exit 2
}
python=${RNND_PYTHON:-/usr/bin/python3}
collect() { "$python" "$root/bench/scaling_table.py" "$1"; }

slurm=0 out="" hostfile=""
while [ $# -gt 0 ]; do
  case $1 in
    --slurm) slurm=1; shift ;;
    --hostfile) [ $# -ge 2 ] || usage; hostfile=$2; shift 2 ;;
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

# One run across the first $1 hosts of the hostfile; its directory's name
# counts ranks, as the table does.
run_on_hosts() {
  local nodes=$1 per_node=${RANKS_PER_NODE:-1}
  local ranks=$((nodes * per_node))
  local dir="$out/${ranks}ranks" hosts="$out/hosts.$nodes"
  local threads=${THREADS:-$(( $(nproc --all) / per_node > 0 ? $(nproc --all) / per_node : 1 ))}
  head -n "$nodes" "$hostfile" > "$hosts"
  [ "$(wc -l < "$hosts")" -eq "$nodes" ] || { echo "launch/scaling.sh: $hostfile has fewer than $nodes hosts" >&2; exit 2; }
  rm -rf "$dir"
  echo "== $nodes node(s) x $per_node rank(s), $threads thread(s) each -> $dir"
  local args=()
  for a in "${@:2}"; do [[ $a == -* ]] && args+=("$a") || args+=(--set "$a"); done
  local mpi=(-np "$ranks" --hostfile "$hosts" --map-by "ppr:$per_node:node" --bind-to none -x "OMP_NUM_THREADS=$threads")
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  if ! "${MPIRUN:-mpirun}" "${mpi[@]}" "${RNND_BIN:-$root/build/rnn_dist}" --config "$config" \
       --set "train.threads=$threads" --set "output.dir=$dir" "${args[@]}" > "$dir.log" 2>&1; then
    echo "launch/scaling.sh: the $nodes-node run failed; its log ends:" >&2
    tail -n 5 "$dir.log" >&2
    exit 1
  fi
  echo "$ranks $dir" >> "$out/runs.txt"
}

if [ -n "$hostfile" ]; then
  [ -f "$hostfile" ] || { echo "launch/scaling.sh: $hostfile: no such hostfile" >&2; exit 2; }
  for nodes in $counts; do run_on_hosts "$nodes" "$@"; done
  collect "$out"
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
