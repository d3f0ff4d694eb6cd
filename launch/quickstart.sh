#!/usr/bin/env bash
# launch/quickstart.sh — from a fresh Debian 12 machine to a trained model:
# installs missing packages, builds rnn_dist, prepares the embedded default
# corpus (the King James Bible from Debian's bible-kjv, no download), trains
# a small GRU language model for about two minutes (configs/quickstart.ini),
# evaluates it on the test split, samples a few lines from it (rnn_dist
# generate), plots its metrics (rnn_plot) and says where everything went.
# Extra arguments are passed to rnn_dist (e.g. --set train.steps=100).
# Environment: RNND_BUILD_DIR (default build), RNND_DATA_DIR (the prepared
# corpus, default data/bible-kjv; prepared there when it has no train.h5;
# also what eval reads, so set this rather than --set data.dir), RNND_OUT
# (the run's output directory, default runs/quickstart).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./launch/install_deps.sh
build=${RNND_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"

data=${RNND_DATA_DIR:-data/bible-kjv}
if [ ! -f "$data/train.h5" ]; then
  ./data/prepare_bible.sh "$data/text"
  "$build"/rnn_prep --train "$data/text/train.txt" --valid "$data/text/valid.txt" --test "$data/text/test.txt" \
                    --out "$data"
fi

out=${RNND_OUT:-runs/quickstart}
"$build"/rnn_dist --config configs/quickstart.ini --set data.dir="$data" --set output.dir="$out" "$@"
echo
echo "== evaluating ${out}/model.h5 on the test split"
"$build"/rnn_dist eval --checkpoint "$out/model.h5" --data "$data/test.h5"
echo
echo "== sampling from the model: rnn_dist generate --prompt 'and the lord said' (temperature 0.8)"
"$build"/rnn_dist generate --checkpoint "$out/model.h5" --prompt "and the lord said" --tokens 60 \
                          --temperature 0.8 --seed 1
echo
if "$build"/rnn_plot "$out" --out "$out/plots" > /dev/null; then
  echo "plots:  $out/plots/*.png ($build/rnn_plot: loss, perplexity, tokens/s, gradient norm, ...)"
else
  echo "plots:  not drawn: $build/rnn_plot needs python3 with h5py and matplotlib (launch/install_deps.sh)"
fi
echo "model:  $out/model.h5   (HDF5, PyTorch state_dict names; docs/formats.md)"
echo "log:    $out/train.log"
echo "config: $out/config.ini (the resolved configuration)"
