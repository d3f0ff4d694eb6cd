#!/usr/bin/env bash
# launch/local.sh N CONFIG [section.key=value | --option ...] — N ranks of
# rnn_dist on this node.
#
#  - GPUs: one rank per GPU. Each rank binds GPU local_rank % count itself
#    (docs/gpu.md), so nothing is exported; with fewer GPUs than ranks the
#    script stops (NCCL refuses two ranks on one GPU).
#  - Cores: split evenly, train.threads = cores / N (at least 1), each rank
#    bound to its own cores (--map-by slot:PE=threads --bind-to core). With
#    more ranks than cores (or a CPU-only machine running N >= cores), one
#    thread per rank and no binding.
#  - Works as root (adds --allow-run-as-root) and as a normal user.
# Arguments after CONFIG: `section.key=value` become --set overrides;
# anything starting with - goes to rnn_dist as it is (e.g. --resume auto).
# Environment: RNND_BIN (default build/rnn_dist), MPIRUN (default mpirun),
# MPI_EXTRA (more mpirun options), RNND_DRY_RUN=1 prints the command only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: launch/local.sh N CONFIG [section.key=value | --option ...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
ranks=$1 config=$2
shift 2
[[ $ranks =~ ^[1-9][0-9]*$ ]] || { echo "launch/local.sh: N must be a positive integer, got '$ranks'" >&2; exit 2; }
[ -f "$config" ] || { echo "launch/local.sh: $config: no such config file" >&2; exit 2; }
bin=${RNND_BIN:-$root/build/rnn_dist}
[ -x "$bin" ] || { echo "launch/local.sh: $bin not found; build first (cmake --build build)" >&2; exit 2; }

args=()
for a in "$@"; do
  if [[ $a == -* ]]; then args+=("$a"); else args+=(--set "$a"); fi
done

cores=$(nproc --all)
gpus=0
if command -v nvidia-smi >/dev/null && list=$(nvidia-smi -L 2>/dev/null); then
  gpus=$(grep -c '^GPU ' <<<"$list" || true)
fi
if [ "$gpus" -gt 0 ] && [ "$ranks" -gt "$gpus" ]; then
  echo "launch/local.sh: $ranks ranks but $gpus GPUs; start at most one rank per GPU" >&2
  exit 2
fi

threads=$((cores / ranks))
mpi=(-np "$ranks")
if [ "$threads" -ge 1 ] && [ "$ranks" -lt "$cores" ]; then
  mpi+=(--map-by "slot:PE=$threads" --bind-to core)
else
  threads=1
  mpi+=(--oversubscribe --bind-to none)
fi
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
# shellcheck disable=SC2206
[ -n "${MPI_EXTRA:-}" ] && mpi+=($MPI_EXTRA)
mpi+=(-x "OMP_NUM_THREADS=$threads")

cmd=("${MPIRUN:-mpirun}" "${mpi[@]}" "$bin" --config "$config" --set "train.threads=$threads" "${args[@]}")
echo "launch/local.sh: $ranks rank(s), $threads thread(s) each, $gpus GPU(s) on this node" >&2
echo "+ ${cmd[*]}" >&2
[ -n "${RNND_DRY_RUN:-}" ] && exit 0
exec "${cmd[@]}"
