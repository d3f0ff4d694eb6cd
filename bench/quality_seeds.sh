#!/usr/bin/env bash
# bench/quality_seeds.sh CONFIG DATA_DIR OUT_DIR SEED... [-- SECTION.KEY=VALUE...]
#
# Final validation perplexity of rnn_dist and of the PyTorch reference
# (bench/torch_lm.py) over several seeds, for the same config and data set.
# One run of either is not enough to compare them: on WikiText-2 at 2000
# steps, another draw of the dropout masks alone moves the result by up to
# 9% (bench/README.md), so the table ends with the mean and standard
# deviation of each program and the ratio of the means.
#
# For each seed both programs run at once, each on half the cores, under the
# same OPENBLAS_CORETYPE. Runs go to OUT_DIR/rnn_dist_SEED (rnn_dist's output
# directory and log) and OUT_DIR/torch_SEED.log; a result already there is
# not run again, so an interrupted study resumes (and runs made by hand can
# be copied in under those names). Arguments after -- are --set overrides
# given to both programs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bench/quality_seeds.sh CONFIG DATA_DIR OUT_DIR SEED... [-- SECTION.KEY=VALUE...]"
[ $# -ge 4 ] || { echo "$usage" >&2; exit 2; }
config=$1 data=$2 out=$3; shift 3
seeds=() overrides=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  [[ $1 =~ ^[0-9]+$ ]] || { echo "quality_seeds.sh: seed '$1' is not a non-negative integer" >&2; exit 2; }
  seeds+=("$1"); shift
done
[ $# -gt 0 ] && shift
for kv in "$@"; do overrides+=(--set "$kv"); done
[ ${#seeds[@]} -gt 0 ] || { echo "$usage" >&2; exit 2; }
bin=${RNND_BUILD_DIR:-$root/build}/rnn_dist
[ -x "$bin" ] || { echo "quality_seeds.sh: $bin missing (cmake --build build first)" >&2; exit 2; }
[ -r "$config" ] || { echo "quality_seeds.sh: cannot read config $config" >&2; exit 2; }
[ -r "$data/train.h5" ] || { echo "quality_seeds.sh: $data/train.h5 missing (run rnn_prep first)" >&2; exit 2; }
python=${PYTHON:-/usr/bin/python3}
threads=$(( $(nproc) / 2 )); [ "$threads" -ge 1 ] || threads=1
mkdir -p "$out"

rnn_dist_ppl() { sed -n 's/^summary: valid ppl \([0-9.]*\).*/\1/p' "$1" 2>/dev/null | tail -n 1; }
torch_ppl() { tail -n 1 "$1" 2>/dev/null | awk '$1 == "loss" && $3 == "ppl" {print $4}'; }

for seed in "${seeds[@]}"; do
  r_log=$out/rnn_dist_$seed.log t_log=$out/torch_$seed.log r_pid='' t_pid=''
  if [ -z "$(rnn_dist_ppl "$r_log")" ]; then
    echo "seed $seed: rnn_dist -> $r_log (threads: $threads)" >&2
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bin" --config "$config" --set data.dir="$data" \
      --set output.dir="$out/rnn_dist_$seed" --set train.seed="$seed" --set train.threads="$threads" \
      "${overrides[@]}" > "$r_log" 2>&1 &
    r_pid=$!
  fi
  if [ -z "$(torch_ppl "$t_log")" ]; then
    echo "seed $seed: torch_lm.py -> $t_log (threads: $threads)" >&2
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$python" "$root/bench/torch_lm.py" "$config" \
      --data-dir "$data" --set train.seed="$seed" --set train.threads="$threads" "${overrides[@]}" > "$t_log" 2>&1 &
    t_pid=$!
  fi
  status=0
  if [ -n "$r_pid" ]; then wait "$r_pid" || { echo "quality_seeds.sh: rnn_dist failed at seed $seed, see $r_log" >&2; status=1; }; fi
  if [ -n "$t_pid" ]; then wait "$t_pid" || { echo "quality_seeds.sh: torch_lm.py failed at seed $seed, see $t_log" >&2; status=1; }; fi
  [ $status -eq 0 ] || exit 1
done

printf "%-8s %12s %14s %18s\n" seed rnn_dist torch_lm.py "torch / rnn_dist"
for seed in "${seeds[@]}"; do
  echo "$seed $(rnn_dist_ppl "$out/rnn_dist_$seed.log") $(torch_ppl "$out/torch_$seed.log")"
done | awk '
  { printf "%-8s %12.2f %14.2f %18.3f\n", $1, $2, $3, $3 / $2; n++; a += $2; aa += $2 * $2; b += $3; bb += $3 * $3 }
  END {
    ma = a / n; mb = b / n
    sa = n > 1 ? sqrt((aa - n * ma * ma) / (n - 1)) : 0; sb = n > 1 ? sqrt((bb - n * mb * mb) / (n - 1)) : 0
    printf "%-8s %12.2f %14.2f %18.3f\n", "mean", ma, mb, mb / ma
    printf "%-8s %12.2f %14.2f\n", "sd", sa, sb
    printf "(final validation perplexity over %d seeds; each rnn_dist log names its BLAS core)\n", n
  }'
