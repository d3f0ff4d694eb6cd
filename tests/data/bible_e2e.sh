#!/usr/bin/env bash
# bible_e2e.sh PREPARE_BIBLE RNN_PREP DATASET_CHECK WORK_DIR — end-to-end test
# of the built-in corpus: data/prepare_bible.sh, then rnn_prep, then the
# reader. Exits 77 (ctest: skipped) when Debian's bible-kjv is not installed.
set -euo pipefail
prepare=$1 prep=$2 check=$3 work=$4
if ! command -v bible >/dev/null 2>&1; then
  echo "SKIP: the 'bible' program (Debian package bible-kjv) is not installed"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$prepare" "$work/text"
fail() { echo "FAIL: $*"; exit 1; }

# The KJV has 31102 verses; the split rule sends 1555 each to valid and test.
[ "$(wc -l <"$work/text/train.txt")" = 27992 ] || fail "train.txt: $(wc -l <"$work/text/train.txt") lines, expected 27992"
[ "$(wc -l <"$work/text/valid.txt")" = 1555 ] || fail "valid.txt lines"
[ "$(wc -l <"$work/text/test.txt")" = 1555 ] || fail "test.txt lines"
first=$(head -1 "$work/text/train.txt")
[ "$first" = "in the beginning god created the heaven and the earth ." ] || fail "first verse: '$first'"
# Verse 20 (Ge1:20) is the first valid verse and verse 10 (Ge1:10) the first test verse.
head -1 "$work/text/valid.txt" | grep -q '^and god said , let the waters bring forth abundantly' || fail "first valid verse"
head -1 "$work/text/test.txt" | grep -q '^and god called the dry land earth ; and the gathering' || fail "first test verse"
! grep -qE '[A-Z]|[0-9]+:[0-9]+' "$work/text/train.txt" || fail "uppercase letters or verse references left in train.txt"
! grep -qE "[^ ][,.;:?!()']|[,.;:?!()'][^ ]" "$work/text/train.txt" || fail "punctuation not split off"
words=$(cat "$work/text"/*.txt | wc -w)
[ "$words" -gt 850000 ] && [ "$words" -lt 950000 ] || fail "$words words in total"

"$prep" --train "$work/text/train.txt" --valid "$work/text/valid.txt" --test "$work/text/test.txt" --out "$work/h5" | tee "$work/prep.log"
for s in train valid test; do
  "$check" "$work/h5/$s.h5" | tee -a "$work/check.log"
done
grep -q '^ok 27992 sequences ' "$work/check.log" || fail "train.h5 sequence count"
grep -q '^ok 1555 sequences ' "$work/check.log" || fail "valid/test sequence count"
echo "bible end to end: ok"
