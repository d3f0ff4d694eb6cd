#!/usr/bin/env bash
# prepare_sunspots.sh OUT_DIR — the forecasting example's data: monthly mean
# sunspot numbers, January 1749 to September 2013 (3177 months), as shipped
# with R (datasets::sunspot.month, from WDC-SILSO, Royal Observatory of
# Belgium; Debian package r-base-core, no download). Writes OUT_DIR/train.csv,
# valid.csv and test.csv, split in time: the first 80% of the months, the
# next 10%, the last 10% (one series each, one column "sunspots").
# Then: rnn_prep --csv --train OUT_DIR/train.csv --valid OUT_DIR/valid.csv \
#                --test OUT_DIR/test.csv --out OUT_DIR
set -euo pipefail
export LC_ALL=C
if [ $# -ne 1 ] || [ "$1" = "--help" ]; then
  echo "usage: prepare_sunspots.sh OUT_DIR" >&2
  exit 2
fi
if ! command -v Rscript >/dev/null 2>&1; then
  echo "prepare_sunspots.sh: error: Rscript is not installed (Debian package r-base-core: apt-get install --no-install-recommends r-base-core)" >&2
  exit 1
fi
out=$1
mkdir -p "$out"
# Write into a scratch directory and move at the end: an interrupted run
# never leaves a truncated CSV behind.
tmp=$(mktemp -d "$out/.prepare_sunspots.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
Rscript --vanilla - "$tmp" <<'RSCRIPT'
dir <- commandArgs(trailingOnly = TRUE)[1]
x <- as.numeric(datasets::sunspot.month)
n <- length(x)
a <- floor(0.8 * n)
b <- floor(0.9 * n)
write_split <- function(name, v) {
  write.table(data.frame(sunspots = v), file.path(dir, paste0(name, ".csv")), sep = ",", row.names = FALSE,
              quote = FALSE)
}
write_split("train", x[1:a])
write_split("valid", x[(a + 1):b])
write_split("test", x[(b + 1):n])
cat(n, "months:", a, "train,", b - a, "valid,", n - b, "test\n")
RSCRIPT
for s in train valid test; do mv "$tmp/$s.csv" "$out/$s.csv"; done
echo "wrote $out/train.csv, $out/valid.csv, $out/test.csv"
