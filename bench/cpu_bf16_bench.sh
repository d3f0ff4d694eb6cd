#!/usr/bin/env bash
# bench/cpu_bf16_bench.sh [THREADS] [STEPS] [REPEATS] — mixed precision on the CPU, from
# one run: rnn_dist's training step in fp32 and in bf16 (products through
# oneDNN) against PyTorch 2.x from PyPI in fp32 and under
# torch.autocast('cpu', torch.bfloat16), packed and padded (the variants a
# PyTorch user would try; only real tokens count), on
#   a-gru   GRU,  vocab 10000, embed = hidden = 256, 2 layers, batch 32, lengths 20..80
#   a-lstm  LSTM, the same sizes
#   c-gru   GRU,  vocab 33278, embed = hidden = 512, 2 layers, batch 32, lengths 20..80
# Prints two tables: median tokens/s of every variant with rnn_dist bf16 over
# its own fp32 and over the best PyTorch bf16 variant; and the roofline of
# both precisions: the GFLOP/s the step makes (FLOPs counted from the model)
# against the rate of the library the products run on (OpenBLAS sgemm, or
# oneDNN in bf16) on exactly the step's products.
#
# PyTorch 2.x is a large download (several GB with its CUDA libraries) and
# only a benchmark baseline: it goes into its own virtual environment,
# $RNND_TORCH2_VENV (default ~/.cache/rnn_dist/torch2), made on first use
# with `pip install torch numpy` (python3-venv from apt when missing). The
# reference tests keep Debian's PyTorch 1.13. PyTorch runs with its own
# OpenMP defaults (torch.set_num_threads(THREADS)), not the OpenBLAS-era
# environment torch_bench.py sets for Debian's 1.13 (--keep-env).
# rnn_dist's fp32 and bf16 runs alternate REPEATS times (default 5): on a
# shared machine one pair's ratio spreads by 10-25% (bf16, more bound by
# memory, suffers more from a neighbour's traffic), so the table gives the
# median of each precision's runs and the median of the pairs' ratios; the
# roofline is the first pair's. PyTorch's variants run once each.
# CONFIGS="a-gru" picks rows; RNND_BUILD_DIR the build (default build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-$(nproc)} steps=${2:-20} repeats=${3:-5}
bin=${RNND_BUILD_DIR:-$root/build}/bench_train
[ -x "$bin" ] || { echo "cpu_bf16_bench.sh: build first (cmake --build build)" >&2; exit 2; }
venv=${RNND_TORCH2_VENV:-$HOME/.cache/rnn_dist/torch2}

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  echo "cpu_bf16_bench.sh: installing PyTorch 2.x from PyPI into $venv (first use; a large download)" >&2
  if ! python3 -m venv --help >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q && $sudo apt-get install -y -q python3-venv
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q torch numpy
fi
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')

declare -A shape=(
  [a-gru]="--cell gru --vocab 10000 --embed 256 --hidden 256"
  [a-lstm]="--cell lstm --vocab 10000 --embed 256 --hidden 256"
  [c-gru]="--cell gru --vocab 33278 --embed 512 --hidden 512"
)
common="--layers 2 --batch 32 --min-len 20 --max-len 80 --threads $threads --steps $steps"
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) v = $(i + 1) } END { print v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

rows=() roofs=()
for config in ${CONFIGS:-a-gru a-lstm c-gru}; do
  declare -A tps=() roof=() runs=()
  pair_ratios=""
  for ((r = 1; r <= repeats; r++)); do
    for p in fp32 bf16; do
      # shellcheck disable=SC2086
      out=$("$bin" ${shape[$config]} $common --precision "$p" --roofline $((r == 1)))
      runs[$p]+=" $(grep '^rnn_dist tokens_per_s' <<<"$out" | field tokens_per_s)"
      [ "$r" -eq 1 ] && roof[$p]=$(grep '^roofline' <<<"$out" |
        awk '{printf "%.0f of %.0f GFLOP/s (%s, %.0f%%)", $7, $9, $15, 100 * $13}')
    done
    pair_ratios+=" $(awk -v a="${runs[fp32]##* }" -v b="${runs[bf16]##* }" 'BEGIN { print b / a }')"
  done
  for p in fp32 bf16; do tps[$p]=$(median <<<"${runs[$p]}"); done
  pair_ratio=$(median <<<"$pair_ratios")
  best=0
  for variant in "packed fp32" "padded fp32" "packed bf16" "padded bf16"; do
    read -r layout precision <<<"$variant"
    # shellcheck disable=SC2086
    t=$("$venv/bin/python" "$root/bench/torch_bench.py" ${shape[$config]} $common --keep-env --layout "$layout" \
          --precision "$precision" | tail -n 1 | field tokens_per_s)
    tps["$variant"]=$t
    if [ "$precision" = bf16 ] && awk -v t="$t" -v b="$best" 'BEGIN { exit !(t > b) }'; then best=$t; fi
  done
  rows+=("$(printf "| %s | %.0f | %.0f | %.2fx | %.0f | %.0f | %.0f | %.0f | %s |" "$config" "${tps[fp32]}" \
    "${tps[bf16]}" "$pair_ratio" "${tps[packed fp32]}" "${tps[padded fp32]}" \
    "${tps[packed bf16]}" "${tps[padded bf16]}" "$(ratio "${tps[bf16]}" "$best")")")
  roofs+=("| $config | ${roof[fp32]} | ${roof[bf16]} |")
  echo "${rows[-1]}" >&2
done

echo "| config | rnn_dist fp32 | rnn_dist bf16 | bf16 / fp32 (median of pairs) | torch packed fp32 | torch padded fp32 | torch packed bf16 | torch padded bf16 | rnn_dist bf16 / best torch bf16 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "| config | fp32: achieved of library rate | bf16: achieved of library rate |"
echo "|---|---|---|"
printf '%s\n' "${roofs[@]}"
echo
echo "(median tokens/s over $steps timed steps, $threads threads, batch 32, lengths 20..80; rnn_dist: the median"
echo " of $repeats alternating fp32/bf16 runs, bf16 / fp32 the median of the $repeats pairs' ratios; PyTorch $torch_version;"
echo " torch bf16 = torch.autocast('cpu', torch.bfloat16); $(grep -m1 -o 'bf16 products through[^;]*' <<<"$("$bin" --steps 1 --warmup 0 --precision bf16 --vocab 100 --embed 16 --hidden 16 --threads 1 2>&1)" || echo 'no oneDNN'))"
