#!/usr/bin/env bash
# valgrind_run.sh RNN_DIST RNN_PREP TEXT_DIR WORK — memcheck of rnn_prep on
# 300 lines of TEXT_DIR/{train,valid,test}.txt, of a short single-rank CPU
# training run on them (2 steps, a small model, validation and test,
# checkpoint, model file, metrics) and of `rnn_dist eval` on its model: no
# errors and no definite leaks, with
# Open MPI's suppressions and tests/faults/valgrind.supp (third-party code
# only). Skips (77) without valgrind.
set -uo pipefail
bin=$1 prep=$2 text=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
command -v valgrind >/dev/null || { echo "SKIPPED: valgrind not installed (apt-get install valgrind)"; exit 77; }
rm -rf "$work"; mkdir -p "$work"
supp=(--suppressions="$here/valgrind.supp")
[ -f /usr/share/openmpi/openmpi-valgrind.supp ] && supp+=(--suppressions=/usr/share/openmpi/openmpi-valgrind.supp)
vg=(valgrind --num-callers=50 --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite
    "${supp[@]}")
export OMP_NUM_THREADS=1
status=0
for split in train valid test; do head -n 300 "$text/$split.txt" > "$work/$split.txt"; done
"${vg[@]}" "$prep" --train "$work/train.txt" --valid "$work/valid.txt" --test "$work/test.txt" --out "$work/data" \
  > "$work/prep.log" 2>&1
code=$?
echo "rnn_prep: exit $code, $(grep -m1 'ERROR SUMMARY' "$work/prep.log" | sed 's/==[0-9]*== //')"
[ $code -eq 0 ] || { status=1; grep -B2 -A14 -E 'Invalid|uninitialised|definitely lost' "$work/prep.log" | head -60; }
data=$work/data
"${vg[@]}" "$bin" --set data.dir="$data" --set model.embed=16 \
  --set model.hidden=16 --set model.dropout=0.1 --set train.global_batch=4 --set train.threads=1 \
  --set train.steps=2 --set train.device=cpu --set output.dir="$work/run" > "$work/train.log" 2>&1
code=$?
echo "train: exit $code, $(grep -m1 'ERROR SUMMARY' "$work/train.log" | sed 's/==[0-9]*== //')"
[ $code -eq 0 ] || { status=1; grep -B2 -A14 -E 'Invalid|uninitialised|definitely lost' "$work/train.log" | head -60; }
"${vg[@]}" "$bin" eval --checkpoint "$work/run/model.h5" --data "$data/valid.h5" --threads 1 > "$work/eval.log" 2>&1
code=$?
echo "eval: exit $code, $(grep -m1 'ERROR SUMMARY' "$work/eval.log" | sed 's/==[0-9]*== //')"
[ $code -eq 0 ] || { status=1; grep -B2 -A14 -E 'Invalid|uninitialised|definitely lost' "$work/eval.log" | head -60; }
exit $status
