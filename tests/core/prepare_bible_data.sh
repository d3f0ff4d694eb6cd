#!/usr/bin/env bash
# prepare_bible_data.sh OUT RNN_PREP — the embedded default corpus, prepared
# once for the trainer tests (ctest fixture "bible"): OUT/{train,valid,test}.h5
# for language models, and OUT/labels/ the same verses labelled with their
# division of the Bible (prepare_bible.sh --labels) for classifiers.
set -euo pipefail
out=$1 prep=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$out/train.h5" ] || [ ! -f "$out/valid.h5" ] || [ ! -f "$out/test.h5" ]; then
  "$here/data/prepare_bible.sh" "$out/text"
  "$prep" --train "$out/text/train.txt" --valid "$out/text/valid.txt" --test "$out/text/test.txt" --out "$out"
else
  echo "bible data already in $out"
fi
if [ ! -f "$out/labels/train.h5" ] || [ ! -f "$out/labels/valid.h5" ] || [ ! -f "$out/labels/test.h5" ]; then
  "$here/data/prepare_bible.sh" --labels "$out/labels/text"
  "$prep" --labels --train "$out/labels/text/train.txt" --valid "$out/labels/text/valid.txt" \
    --test "$out/labels/text/test.txt" --out "$out/labels"
else
  echo "labelled bible data already in $out/labels"
fi
