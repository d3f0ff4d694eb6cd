#!/usr/bin/env bash
# bench/run_bench.sh [THREADS] [STEPS] — rnn_dist's CPU training step against
# PyTorch's on the same model, batch, lengths, threads and environment
# (config (a): GRU and LSTM, vocab 10000, embed = hidden = 256, 2 layers,
# batch 32, lengths 20..80), side by side in one run. Prints a table.
# Both sides see the same OPENBLAS_CORETYPE (set it before calling, if the
# BLAS warns that it runs generic kernels).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-$(nproc)} steps=${2:-30}
bin=${RNND_BUILD_DIR:-$root/build}/bench_train
[ -x "$bin" ] || { echo "run_bench.sh: build first (cmake --build build)" >&2; exit 2; }
printf "%-6s %-7s %12s %12s %7s %10s\n" cell threads rnn_dist torch ratio "rnn GFLOP/s"
for cell in gru lstm; do
  ours=$("$bin" --cell "$cell" --threads "$threads" --steps "$steps" | tail -n 1)
  theirs=$(/usr/bin/python3 "$root/bench/torch_bench.py" --cell "$cell" --threads "$threads" --steps "$steps" | tail -n 1)
  o=$(echo "$ours" | awk '{print $3}') g=$(echo "$ours" | awk '{print $7}') t=$(echo "$theirs" | awk '{print $3}')
  printf "%-6s %-7s %12.0f %12.0f %6.2fx %10s\n" "$cell" "$threads" "$o" "$t" "$(echo "$o / $t" | bc -l)" "$g"
done
echo "(median tokens/s over $steps timed steps; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
