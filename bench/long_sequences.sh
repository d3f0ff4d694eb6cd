#!/usr/bin/env bash
# bench/long_sequences.sh [THREADS] [SEGMENT] — memory and step time of very
# long sequences, whole-sequence backpropagation against segmented
# (train.bptt_segment = SEGMENT, default 100), side by side in one run.
# The model is a forecasting-sized LSTM (embed = hidden = 128, 2 layers,
# vocab 1000, batch 4); every sequence of a run has the same length, one of
# LENGTHS (default "500 2000 10000 50000"). Columns per length and mode:
#   activations  bytes the backend keeps for backward (whole: every step of
#                every layer; segmented: one segment plus the states kept
#                at segment starts, which grow like T/K)
#   workspace    the backend's other buffers (gradient and scratch rows:
#                also per segment when segmented)
#   peak RSS     the bench process's peak resident set (libraries included)
#   step         median seconds per training step; ratio = segmented / whole
# Whole-sequence runs need about 18 KB per token of the batch (3.6 GB at
# 50000 steps x 4); set LENGTHS lower on small machines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-$(nproc)} segment=${2:-100}
bin=${RNND_BUILD_DIR:-$root/build}/bench_train
[ -x "$bin" ] || { echo "long_sequences.sh: build first (cmake --build build)" >&2; exit 2; }
model=(--cell lstm --vocab 1000 --embed 128 --hidden 128 --layers 2 --batch 4 --threads "$threads")

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# run LENGTH SEGMENT -> "activations workspace rss seconds_per_step"
run() {
  local length=$1 k=$2 steps=3 out
  [ "$length" -ge 10000 ] && steps=2
  out=$("$bin" "${model[@]}" --min-len "$length" --max-len "$length" --steps "$steps" --warmup 1 \
              --bptt-segment "$k")
  awk -v tokens=$((4 * length)) '
    /^memory/ { act = $11; work = $13 }
    /^peak_rss_mib/ { rss = $2 }
    /^rnn_dist tokens_per_s/ { rate = $3 }
    END { printf "%s %s %s %.3f\n", act, work, rss, tokens / rate }' <<<"$out"
}

printf "%7s | %-9s %12s %12s %10s %9s | %-9s %12s %12s %10s %9s | %6s %6s\n" length mode "activ. MiB" \
  "workspace MiB" "peak RSS" "step s" mode "activ. MiB" "workspace MiB" "peak RSS" "step s" "memory" "time"
for length in ${LENGTHS:-500 2000 10000 50000}; do
  read -r wa ww wr ws < <(run "$length" 0)
  read -r sa sw sr ss < <(run "$length" "$segment")
  printf "%7s | %-9s %12s %12s %10s %9s | %-9s %12s %12s %10s %9s | %5.3fx %5.2fx\n" "$length" whole \
    "$(mib "$wa")" "$(mib "$ww")" "$wr" "$ws" "K=$segment" "$(mib "$sa")" "$(mib "$sw")" "$sr" "$ss" \
    "$(echo "$sa / $wa" | bc -l)" "$(echo "$ss / $ws" | bc -l)"
done
echo "(LSTM 128x2, batch 4, $threads thread(s), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; memory = activation"
echo " bytes segmented / whole; time = step time segmented / whole; peak RSS in MiB)"
