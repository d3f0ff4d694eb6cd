#!/usr/bin/env bash
# bench/gpu_bench.sh [BUILD_DIR] [OUT_FILE] — rnn_dist's training step on a
# GPU against PyTorch's (cuDNN, torch.autocast + GradScaler for fp16,
# torch.autocast for bf16) on the same model, batch and lengths:
#   (a) GRU, vocab 10000, embed = hidden = 256, 2 layers, batch 32, lengths 20..80
#   (w) WikiText-2-sized: GRU, vocab 33278, embed = hidden = 1024, 2 layers,
#       batch 64, lengths 20..80
# Both sides untied, STEPS timed steps (default 30) after WARMUP (default 5),
# each step forward + backward + unscale + clip(0.5) + Adam.
# rnn_dist: BUILD_DIR/bench_train --device cuda (default BUILD_DIR: build),
# which runs the trainer's device-resident step (weights, gradient and Adam
# on the GPU; no per-step host copies). PyTorch: bench/torch_gpu_bench.py
# under $PYTHON, or else the first of python3 and /usr/bin/python3 whose
# torch sees a CUDA device.
# Prints a markdown table, a row as each pair finishes (and rewrites
# OUT_FILE, when given, after every row, so a run cut short keeps what it
# measured): median tokens/s of each side and their ratio (rnn_dist / torch),
# and device memory measured alike on both sides: the driver's count of
# memory in use after the run minus before it (CUDA context excluded;
# library workspaces and allocator reserves included), plus what each
# allocated itself (rnn_dist: its own allocations; torch:
# max_memory_allocated). A run that fails shows `fail` and its output's tail
# goes to stderr. Without a GPU (nvidia-smi -L fails or lists none) it
# prints `SKIPPED: no CUDA device` and exits 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${RNND_BUILD_DIR:-$root/build}} out=${2:-}
steps=${STEPS:-30} warmup=${WARMUP:-5}

if ! gpus=$(nvidia-smi -L 2>/dev/null) || ! grep -q '^GPU ' <<<"$gpus"; then
  echo "SKIPPED: no CUDA device"
  exit 0
fi
bin=$build/bench_train
[ -x "$bin" ] || { echo "gpu_bench.sh: $bin not found; build first (cmake --build $build)" >&2; exit 2; }

# The interpreter for PyTorch: $PYTHON, else the first with a CUDA-enabled torch.
py=${PYTHON:-}
if [ -z "$py" ]; then
  for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null &&
       "$cand" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
      py=$cand
      break
    fi
  done
fi
if [ -n "$py" ]; then
  echo "gpu_bench.sh: PyTorch from $(command -v "$py") ($("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?'))" >&2
else
  echo "gpu_bench.sh: no python3 with a CUDA-enabled torch (set PYTHON=...); torch columns will be n/a" >&2
fi

# value after the field named $1 on the last line starting with $2, from stdin
field() { awk -v k="$1" -v p="$2" 'index($0, p) == 1 { for (i = 1; i < NF; i++) if ($i == k) v = $(i + 1) }
                                   END { print (v == "" ? "nan" : v) }'; }
# runs "$@", prints its output; on failure prints the tail to stderr and returns 1
run() {
  local o
  if o=$("$@" 2>&1); then
    printf '%s\n' "$o"
  else
    echo "gpu_bench.sh: failed: $*" >&2
    printf '%s\n' "$o" | tail -n 15 | sed 's/^/    /' >&2
    return 1
  fi
}
# a number in printf format $2, anything else (nan, fail, n/a) as it is
fmt() { awk -v x="$1" -v f="$2" 'BEGIN { if (x ~ /^[0-9.]+$/) printf f, x; else print x }'; }

header="| config | precision | rnn_dist tok/s | torch tok/s | ratio | rnn_dist device MiB | torch device MiB | rnn_dist allocated MiB | torch allocated MiB |
|---|---|---:|---:|---:|---:|---:|---:|---:|"
footer="GRU, 2 layers, untied, lengths 20..80; median tokens/s over $steps timed steps after $warmup warm-up; ratio = rnn_dist / torch; device MiB: driver-counted memory the run took (context excluded). $(head -n 1 <<<"$gpus" | sed 's/ (UUID.*//')"
rows=()
table() { echo "$header"; printf '%s\n' "${rows[@]}"; echo; echo "$footer"; }

bench() { # name, precision, shape flags...
  local name=$1 prec=$2; shift 2
  local o ours=fail ours_mib=fail ours_alloc=fail theirs=n/a theirs_mib=n/a theirs_alloc=n/a ratio=-
  echo "gpu_bench.sh: ($name) $prec rnn_dist ..." >&2
  if o=$(run "$bin" --device cuda --precision "$prec" "$@" --steps "$steps" --warmup "$warmup"); then
    ours=$(printf '%s\n' "$o" | field tokens_per_s "rnn_dist tokens_per_s")
    ours_mib=$(printf '%s\n' "$o" | field device_peak_mib "device_peak_mib")
    ours_alloc=$(printf '%s\n' "$o" | field device_allocated_mib "device_peak_mib")
  fi
  if [ -n "$py" ]; then
    echo "gpu_bench.sh: ($name) $prec torch ..." >&2
    theirs=fail theirs_mib=fail theirs_alloc=fail
    if o=$(run "$py" "$root/bench/torch_gpu_bench.py" --device cuda --precision "$prec" "$@" \
                 --steps "$steps" --warmup "$warmup"); then
      theirs=$(printf '%s\n' "$o" | field tokens_per_s "torch tokens_per_s")
      theirs_mib=$(printf '%s\n' "$o" | field device_mib "torch tokens_per_s")
      theirs_alloc=$(printf '%s\n' "$o" | field peak_mib "torch tokens_per_s")
    fi
  fi
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0)
                                                     printf "%.2fx", a / b; else print "-" }')
  rows+=("| $name | $prec | $(fmt "$ours" %.0f) | $(fmt "$theirs" %.0f) | $ratio | $(fmt "$ours_mib" %.1f) | $(fmt "$theirs_mib" %.1f) | $(fmt "$ours_alloc" %.1f) | $(fmt "$theirs_alloc" %.1f) |")
  echo "${rows[-1]}"
  if [ -n "$out" ]; then table >"$out"; fi
}

shape_a=(--cell gru --vocab 10000 --embed 256 --hidden 256 --layers 2 --batch 32 --min-len 20 --max-len 80)
shape_w=(--cell gru --vocab 33278 --embed 1024 --hidden 1024 --layers 2 --batch 64 --min-len 20 --max-len 80)
echo "$header"
# the most telling rows first, in case the run is cut short
bench "(a) 256/256, V 10000, b 32" fp16 "${shape_a[@]}"
bench "(w) 1024/1024, V 33278, b 64" fp16 "${shape_w[@]}"
bench "(a) 256/256, V 10000, b 32" fp32 "${shape_a[@]}"
bench "(w) 1024/1024, V 33278, b 64" fp32 "${shape_w[@]}"
bench "(a) 256/256, V 10000, b 32" bf16 "${shape_a[@]}"
bench "(w) 1024/1024, V 33278, b 64" bf16 "${shape_w[@]}"
echo
echo "$footer"
