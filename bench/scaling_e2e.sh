#!/usr/bin/env bash
# bench/scaling_e2e.sh [RANKS...] — end-to-end data-parallel training speed of
# rnn_dist on config (a) of the foundation issue (GRU, vocab 10000,
# embed = hidden = 256, 2 layers, global batch 32, lengths uniform in 20..80,
# one bucket so batches mix lengths as in bench_train), one thread per rank,
# on a synthetic corpus. For each rank count it trains STEPS steps under
# mpirun and prints the job's tokens/s (median over the steps after a warm-up,
# from OUTPUT/metrics.h5), tokens/s per rank, the scaling efficiency against
# one rank, the mean load imbalance and the share of step time in the
# gradient all-reduce. Default ranks: 1 2. Environment: STEPS (default 40),
# WIRE (fp32|fp16|bf16, default fp32), RNND_BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${RNND_BUILD_DIR:-$root/build}
steps=${STEPS:-40} wire=${WIRE:-fp32}
ranks=("$@"); [ ${#ranks[@]} -gt 0 ] || ranks=(1 2)
work=$(mktemp -d /tmp/rnnd_scaling.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -x "$build/rnn_dist" ] || { echo "scaling_e2e.sh: build first (cmake --build build)" >&2; exit 2; }

# 4000 lines of 19..79 random words from a 9998-word vocabulary (+ <eos>, <unk>).
awk 'BEGIN { srand(1234); for (i = 0; i < 4000; i++) { n = 19 + int(rand() * 61); line = "";
             for (k = 0; k < n; k++) line = line (k ? " " : "") "w" int(rand() * 9998); print line } }' \
  > "$work/train.txt"
"$build/rnn_prep" --train "$work/train.txt" --valid "$work/train.txt" --out "$work/data" > /dev/null

cores=$(nproc)  # before OMP_NUM_THREADS, which nproc obeys
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
printf "%-6s %12s %14s %11s %10s %8s\n" ranks "tokens/s" "per rank" efficiency imbalance "comm %"
base=""
for n in "${ranks[@]}"; do
  out="$work/run$n"
  mpirun -np "$n" --oversubscribe --bind-to none "$build/rnn_dist" \
    --set data.train="$work/data/train.h5" --set data.valid=none --set data.test=none \
    --set model.cell=gru --set model.layers=2 --set model.embed=256 --set model.hidden=256 \
    --set data.max_len=80 --set data.num_buckets=1 --set train.global_batch=32 \
    --set train.steps="$steps" --set train.log_every="$steps" --set train.threads=1 \
    --set comm.grad_dtype="$wire" --set output.dir="$out" > "$out.log" 2>&1 \
    || { echo "scaling_e2e.sh: $n ranks failed:"; tail -5 "$out.log"; exit 1; }
  read -r tps imbalance comm < <(/usr/bin/python3 - "$out/metrics.h5" <<'PY'
import sys, h5py, numpy as np
t = {k: v[:] for k, v in h5py.File(sys.argv[1], "r")["train"].items()}
seconds = np.diff(np.concatenate([[0.0], t["elapsed_s"]]))[5:]   # first steps warm caches up
tps = t["tokens"][5:] / seconds
busy = t["compute_s"][5:] + t["comm_s"][5:]
print(f"{np.median(tps):.0f} {t['imbalance'][5:].mean():.4f} {100 * np.median(t['comm_s'][5:] / busy):.1f}")
PY
)
  [ -n "$base" ] || base=$tps
  printf "%-6s %12s %14.0f %10.1f%% %10s %8s\n" "$n" "$tps" "$(echo "$tps / $n" | bc -l)" \
    "$(echo "100 * $tps / ($n * $base)" | bc -l)" "$imbalance" "$comm"
done
echo "(median over steps 6..$steps; $wire gradients on the wire; one thread per rank; $cores cores)"
