#!/usr/bin/env bash
# prepare_bible_data.sh OUT RNN_PREP — the embedded default corpus, prepared
# once for the trainer tests (ctest fixture "bible").
set -euo pipefail
out=$1 prep=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ -f "$out/train.h5" ] && [ -f "$out/valid.h5" ] && [ -f "$out/test.h5" ]; then
  echo "bible data already in $out"; exit 0
fi
"$here/data/prepare_bible.sh" "$out/text"
"$prep" --train "$out/text/train.txt" --valid "$out/text/valid.txt" --test "$out/text/test.txt" --out "$out"
