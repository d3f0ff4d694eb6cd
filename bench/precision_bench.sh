#!/usr/bin/env bash
# bench/precision_bench.sh [THREADS] — memory and speed of rnn_dist's CPU
# training step per precision (fp32, fp16, bf16) for config (a) (GRU, vocab
# 10000, embed = hidden = 256, 2 layers, batch 32, lengths 20..80) and a
# long-sequence config (same model, batch 8, lengths 500..2000). Prints
# activation bytes (what is saved for backward), total bytes (weights incl.
# master and 16-bit copies, gradients, Adam state, activations, workspace)
# and tokens/s. On a CPU fp16 is slower than fp32 (every value is converted;
# its point is memory and GPU-identical numerics); bf16 computes its large
# products in bf16 through oneDNN where the build has it, and is faster
# (bench/cpu_bf16_bench.sh compares it with PyTorch 2.x).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-$(nproc)}
bin=${RNND_BUILD_DIR:-$root/build}/bench_train
[ -x "$bin" ] || { echo "precision_bench.sh: build first (cmake --build build)" >&2; exit 2; }
printf "%-22s %-6s %14s %12s %12s %10s\n" config precision "activ. (MiB)" "total (MiB)" "tokens/s" "vs fp32"
run() { # name, precision, bench_train arguments...
  local name=$1 precision=$2; shift 2
  local out mem tps
  out=$("$bin" --precision "$precision" --threads "$threads" "$@")
  mem=$(echo "$out" | awk '/^memory/ {print $11, $5 + $7 + $9 + $11 + $13}')
  tps=$(echo "$out" | tail -n 1 | awk '{print $3}')
  [ "$precision" = fp32 ] && base=$tps
  printf "%-22s %-6s %14.1f %12.1f %12.0f %9.2fx\n" "$name" "$precision" \
    "$(echo "$mem" | awk '{print $1 / 1048576}')" "$(echo "$mem" | awk '{print $2 / 1048576}')" "$tps" \
    "$(echo "$tps / $base" | bc -l)"
}
for p in fp32 fp16 bf16; do run "(a) len 20..80, b 32" "$p" --steps 20 --warmup 3; done
for p in fp32 fp16 bf16; do
  run "long len 500..2000, b 8" "$p" --batch 8 --min-len 500 --max-len 2000 --steps 4 --warmup 1
done
echo "(median tokens/s; $threads threads; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
