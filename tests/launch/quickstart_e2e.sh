#!/usr/bin/env bash
# quickstart_e2e.sh ROOT BUILD DATA WORK — launch/quickstart.sh, the
# README's first command, end to end on the test suite's build and the
# prepared embedded corpus (bible_data), with a short schedule: its
# dependency check passes without installing, the build step leaves the
# build as it is, the run trains and writes its model, and the evaluation,
# the samples and the plots that follow all appear. A failing step stops
# the script (set -e), so its exit code is checked too.
# quickstart.sh configures its build directory for Ninja and Release and
# builds it, so this test runs only where that changes nothing (the
# suite's build is Ninja/Release and up to date, every package present);
# elsewhere it is skipped (exit 77) rather than rebuild under other tests.
set -uo pipefail
root=$1 build=$2 data=$3 work=$4
skip() { echo "SKIPPED: $1"; exit 77; }
cache="$build/CMakeCache.txt"
grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache" && grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$cache" ||
  skip "$build is not a Ninja Release build, which quickstart.sh would make it"
up_to_date() { ninja -C "$build" -n 2>&1 | grep -q "no work to do"; }
up_to_date || skip "$build is not up to date (quickstart.sh would rebuild it while other tests run)"
"$root/launch/install_deps.sh" --check > /dev/null || skip "packages are missing (quickstart.sh would install them)"
rm -rf "$work"; mkdir -p "$work"
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
out="$work/run"
RNND_BUILD_DIR="$build" RNND_DATA_DIR="$data" RNND_OUT="$out" "$root/launch/quickstart.sh" \
  --set train.steps=12 --set train.log_every=4 --set train.threads=1 > "$work/quickstart.log" 2>&1
rc=$?
log=$(cat "$work/quickstart.log")
check "quickstart.sh exits 0 (got $rc; log $work/quickstart.log)" '[ $rc -eq 0 ]'
check "the build is as it was (Release, up to date)" \
  'grep -qx "CMAKE_BUILD_TYPE:STRING=Release" "$cache" && up_to_date && [[ $log == *"ninja: no work to do"* ]]'
check "dependency check found every package present" '[[ $log == *"install_deps: all "*" packages present"* ]]'
check "the run trained 12 steps and wrote its model" \
  '[[ $log == *"step     12/12"* ]] && [ -f "$out/model.h5" ] && [ -f "$out/train.log" ] && [ -f "$out/config.ini" ]'
check "the run read the prepared corpus" 'grep -q "^dir = $data\$" "$out/config.ini"'
check "the test split was evaluated" '[[ $log == *"== evaluating"* ]] && grep -qE "^loss [0-9.]+ ppl [0-9.]+ tokens [0-9]+" <<< "$log"'
sample=$(grep -A1 "== sampling" <<< "$log" | tail -1)
check "a sample of words follows the prompt (got '$sample')" '[[ $sample =~ ^[^\ ]+( [^\ ]+)+$ && $sample != rnn_dist* ]]'
check "plots drawn" '[[ $log == *"plots:  $out/plots/"* ]] && ls "$out"/plots/*.png > /dev/null 2>&1'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
