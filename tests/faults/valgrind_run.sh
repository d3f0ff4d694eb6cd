#!/usr/bin/env bash
# valgrind_run.sh RNN_DIST RNN_PREP TEXT_DIR WORK — memcheck of rnn_prep on
# 300 lines of TEXT_DIR/{train,valid,test}.txt, of a short single-rank CPU
# training run on them (2 steps, a small model, validation and test,
# checkpoint, model file, metrics), of `rnn_dist eval` on its model, and of
# 2-step runs of the other tasks and modes (streams with segments, a
# classifier on labelled lines, a forecaster on CSV series made from them,
# with their rnn_prep runs), and of `rnn_dist generate` and `predict` on
# those models (a prompt, --stdin, top-k, --vocab-from, a labelled file, a
# CSV and --stdin series): no errors and no definite leaks, with
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

# memcheck NAME LOG CMD...: runs CMD under memcheck, reports its summary
# line, and on failure shows the first errors.
memcheck() {
  local name=$1 log=$2
  shift 2
  "${vg[@]}" "$@" > "$log" 2>&1
  local code=$?
  echo "$name: exit $code, $(grep -m1 'ERROR SUMMARY' "$log" | sed 's/==[0-9]*== //')"
  [ $code -eq 0 ] || { status=1; grep -B2 -A14 -E 'Invalid|uninitialised|definitely lost' "$log" | head -60; }
}

for split in train valid test; do head -n 300 "$text/$split.txt" > "$work/$split.txt"; done
memcheck rnn_prep "$work/prep.log" "$prep" --train "$work/train.txt" --valid "$work/valid.txt" \
  --test "$work/test.txt" --out "$work/data"
data=$work/data
small=(--set model.embed=16 --set model.hidden=16 --set model.dropout=0.1 --set train.global_batch=4
       --set train.threads=1 --set train.steps=2 --set train.device=cpu)
memcheck train "$work/train.log" "$bin" --set data.dir="$data" "${small[@]}" --set output.dir="$work/run"
memcheck eval "$work/eval.log" "$bin" eval --checkpoint "$work/run/model.h5" --data "$data/valid.h5" --threads 1
# The other tasks and modes (docs/tasks.md): streams with segmented
# backpropagation, a bidirectional classifier, a forecaster.
memcheck stream "$work/stream.log" "$bin" --set data.dir="$data" "${small[@]}" --set data.mode=stream \
  --set data.bptt=40 --set train.bptt_segment=7 --set model.cell=lstm --set output.dir="$work/stream"
for split in train valid test; do
  awk '{ print (NR % 3 == 0 ? "a" : "b") "\t" $0 }' "$work/$split.txt" > "$work/$split.labels.txt"
  awk 'BEGIN { print "series_id,x,y" } { print int((NR - 1) / 60) "," NF "," length($0) }' "$work/$split.txt" \
    > "$work/$split.csv"
done
memcheck prep_labels "$work/prep_labels.log" "$prep" --labels --train "$work/train.labels.txt" \
  --valid "$work/valid.labels.txt" --test "$work/test.labels.txt" --out "$work/labels"
memcheck classify "$work/classify.log" "$bin" --set data.dir="$work/labels" "${small[@]}" \
  --set model.task=classify --set model.bidirectional=true --set data.max_len=200 --set output.dir="$work/classify"
memcheck prep_csv "$work/prep_csv.log" "$prep" --csv --train "$work/train.csv" --valid "$work/valid.csv" \
  --test "$work/test.csv" --out "$work/series"
memcheck regress "$work/regress.log" "$bin" --set data.dir="$work/series" "${small[@]}" --set model.task=regress \
  --set data.max_len=20 --set data.target_last=5 --set output.dir="$work/regress"
# Inference on those models (docs/running.md, "Using a trained model").
memcheck generate "$work/generate.log" "$bin" generate --checkpoint "$work/run/model.h5" --prompt "the lord said" \
  --tokens 8 --top-k 5 --threads 1
printf 'in the beginning\nand god said\n' > "$work/prompts.txt"
memcheck generate_stdin "$work/generate_stdin.log" "$bin" generate --checkpoint "$work/run/model.h5" --stdin \
  --tokens 5 --temperature 0 --vocab-from "$data/train.h5" --threads 1 < "$work/prompts.txt"
memcheck predict_classify "$work/predict_classify.log" "$bin" predict --checkpoint "$work/classify/model.h5" \
  --input "$work/test.labels.txt" --threads 1
memcheck predict_forecast "$work/predict_forecast.log" "$bin" predict --checkpoint "$work/regress/model.h5" \
  --input "$work/test.csv" --horizon 3 --threads 1
echo "1,2;3,4;5,6" > "$work/series.txt"
memcheck predict_stdin "$work/predict_stdin.log" "$bin" predict --checkpoint "$work/regress/model.h5" --stdin \
  --horizon 2 --threads 1 < "$work/series.txt"
exit "$status"
