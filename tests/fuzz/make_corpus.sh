#!/usr/bin/env bash
# make_corpus.sh BUILD_DIR — (re)writes the seed corpus of the fuzz targets in
# tests/fuzz/corpus/: every shipped and test config (config), small data sets
# from rnn_prep, token, labelled and time series (dataset), and checkpoints of the model fuzz_checkpoint.c
# expects (GRU, 1 layer, embed = hidden = 8, vocab 50; checkpoint). Needs a
# normal build (rnn_prep, rnn_dist) in BUILD_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: make_corpus.sh BUILD_DIR}" && pwd)
corpus=$here/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$corpus/config" "$corpus/dataset" "$corpus/checkpoint"
cp "$root"/configs/*.ini "$root"/tests/core/configs/*.ini "$corpus/config/"

# A small text: 300 lines over a 60-word vocabulary.
awk 'BEGIN { srand(7); for (i = 0; i < 300; i++) { n = 1 + int(rand() * 12); line = "";
             for (k = 0; k < n; k++) line = line (k ? " " : "") "w" int(rand() * rand() * 60); print line } }' \
  > "$work/text.txt"
head -n 40 "$work/text.txt" > "$work/small.txt"
"$build/rnn_prep" --train "$work/text.txt" --valid "$work/small.txt" --out "$work/d50" --max-vocab 50 > /dev/null
"$build/rnn_prep" --train "$work/small.txt" --valid "$work/small.txt" --out "$work/dsmall" > /dev/null
cp "$work/d50/train.h5" "$corpus/dataset/train_vocab50.h5"
cp "$work/d50/valid.h5" "$corpus/dataset/valid_vocab50.h5"
cp "$work/dsmall/train.h5" "$corpus/dataset/small.h5"
# A classification set (/labels, /label_names) and a time series (rnn_dist-series).
awk '{ print (NR % 3 ? "a" : "b") "\t" $0 }' "$work/small.txt" > "$work/labels.txt"
"$build/rnn_prep" --labels --train "$work/labels.txt" --valid "$work/labels.txt" --out "$work/dlabels" > /dev/null
cp "$work/dlabels/train.h5" "$corpus/dataset/labels.h5"
awk 'BEGIN { print "series_id,x,y" } { print int((NR - 1) / 10) "," NF "," length($0) }' "$work/small.txt" \
  > "$work/series.csv"
"$build/rnn_prep" --csv --train "$work/series.csv" --valid "$work/series.csv" --out "$work/dseries" > /dev/null
cp "$work/dseries/train.h5" "$corpus/dataset/series.h5"

for steps in 2 5; do
  OMP_NUM_THREADS=1 "$build/rnn_dist" --set data.dir="$work/d50" --set data.valid=none --set data.test=none \
    --set model.cell=gru --set model.layers=1 --set model.embed=8 --set model.hidden=8 \
    --set train.global_batch=8 --set train.steps=$steps --set train.threads=1 \
    --set output.dir="$work/run$steps" > /dev/null
  cp "$work/run$steps/ckpt_step0000000$steps.h5" "$corpus/checkpoint/ckpt_step$steps.h5"
done
du -sh "$corpus"/*
