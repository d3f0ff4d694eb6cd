#!/usr/bin/env bash
# bench/run_bench.sh [THREADS] [STEPS] — rnn_dist's CPU training step against
# PyTorch's on the same model, batch, lengths, threads and environment, side
# by side in one run, for the speed configs of the project:
#   a-gru   GRU,  vocab 10000, embed = hidden = 256, 2 layers, batch 32, lengths 20..80
#   a-lstm  LSTM, the same sizes
#   c-gru   GRU,  vocab 33278, embed = hidden = 512, 2 layers, batch 32, lengths 20..80
# Prints a table: median tokens/s of both and their ratio, and the roofline of
# rnn_dist: training FLOPs per token (counted from the model), the GFLOP/s
# they make at the measured speed, the sgemm rate of the same BLAS on exactly
# the step's products (bench/gemm_rate.h), and the share of it reached.
# Both sides see the same OPENBLAS_CORETYPE (set it before calling if the
# BLAS warns that it runs generic kernels). CONFIGS="a-gru c-gru" picks rows.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-$(nproc)} steps=${2:-30}
bin=${RNND_BUILD_DIR:-$root/build}/bench_train
[ -x "$bin" ] || { echo "run_bench.sh: build first (cmake --build build)" >&2; exit 2; }
declare -A shape=(
  [a-gru]="--cell gru --vocab 10000 --embed 256 --hidden 256"
  [a-lstm]="--cell lstm --vocab 10000 --embed 256 --hidden 256"
  [c-gru]="--cell gru --vocab 33278 --embed 512 --hidden 512"
)
printf "%-7s %7s %10s %10s %7s %12s %9s %9s %6s\n" config threads rnn_dist torch ratio "flops/token" "GFLOP/s" "sgemm" "share"
for config in ${CONFIGS:-a-gru a-lstm c-gru}; do
  # shellcheck disable=SC2086
  ours=$("$bin" ${shape[$config]} --layers 2 --batch 32 --min-len 20 --max-len 80 --threads "$threads" \
                --steps "$steps" --roofline 1)
  # shellcheck disable=SC2086
  theirs=$(/usr/bin/python3 "$root/bench/torch_bench.py" ${shape[$config]} --layers 2 --batch 32 --min-len 20 \
                --max-len 80 --threads "$threads" --steps "$steps" | tail -n 1)
  o=$(awk '/^rnn_dist tokens_per_s/ {print $3}' <<<"$ours")
  read -r fpt achieved sgemm share < <(awk '/^roofline/ {print $3, $7, $9, $13}' <<<"$ours")
  t=$(awk '{print $3}' <<<"$theirs")
  printf "%-7s %7s %10.0f %10.0f %6.2fx %12.3g %9.1f %9.1f %5.0f%%\n" "$config" "$threads" "$o" "$t" \
    "$(echo "$o / $t" | bc -l)" "$fpt" "$achieved" "$sgemm" "$(echo "100 * $share" | bc -l)"
done
echo "(median tokens/s over $steps timed steps; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; sgemm = the same BLAS"
echo " on the step's own products at $threads thread(s); share = achieved / sgemm)"
