#!/usr/bin/env bash
# run_fuzz.sh [SECONDS] [TARGET...] — builds the libFuzzer targets with clang
# (ASan + UBSan, -DRNND_FUZZ=ON) in build-fuzz/ and runs each for SECONDS
# (default 20) from a scratch copy of its seed corpus (tests/fuzz/corpus/;
# GROW_CORPUS=1 fuzzes the committed corpus in place, adding what it finds).
# Prints executions per target; exits non-zero on any crash, leak or
# sanitizer report (libFuzzer's artifact files go to build-fuzz/artifacts/).
# sanitizer.supp and lsan.supp hold the suppressions for findings inside
# HDF5 itself (see README.md).
# Targets: fuzz_config fuzz_dataset fuzz_checkpoint (default: all three).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_dataset fuzz_checkpoint)
build=${RNND_FUZZ_BUILD:-$root/build-fuzz}
command -v clang >/dev/null || { echo "SKIPPED: clang not found (apt-get install clang)"; exit 77; }
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRNND_FUZZ=ON -DRNND_CUDA=OFF -DBUILD_TESTING=OFF > "$build/configure.log" 2>&1 \
  || { tail -20 "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$build/build.log" 2>&1 \
  || { tail -30 "$build/build.log"; exit 1; }
mkdir -p "$build/artifacts"
status=0
# A report whose innermost frames are all in libhdf5 (below the loader's
# H5 call) is a finding in HDF5 itself (README.md): counted, its input kept,
# and fuzzing goes on; any other report fails the run.
in_hdf5() {
  awk '/^ *#[0-9]+ 0x/ { if ($0 ~ /libhdf5/) hdf5 = 1; else if ($0 ~ /\/src\/|\/tests\/fuzz\//) { print (hdf5 ? "yes" : "no"); done = 1; exit } }
       END { if (!done) print (hdf5 ? "yes" : "no") }' "$1"
}
printf "%-16s %10s %8s %7s %s\n" target runs corpus "hdf5" result
for t in "${targets[@]}"; do
  seeds=$here/corpus/${t#fuzz_}
  if [ "${GROW_CORPUS:-0}" = 1 ]; then corpus=$seeds; else
    corpus=$(mktemp -d); cp "$seeds"/* "$corpus/"; fi
  runs=0 upstream=0 result=ok end=$((SECONDS + seconds))
  while [ $SECONDS -lt $end ]; do
    log=$build/$t.$runs.log
    # leaks count; -timeout: a hang is a finding too
    if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:suppressions=$here/sanitizer.supp \
       LSAN_OPTIONS=suppressions=$here/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
       "$build/$t" -max_total_time=$((end - SECONDS)) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$t-" "$corpus" > "$log" 2>&1; then
      failed=0
    else
      failed=1
    fi
    n=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    runs=$((runs + ${n:-0}))
    if [ $failed -eq 1 ]; then
      if [ "$(in_hdf5 "$log")" = yes ]; then
        upstream=$((upstream + 1))
        echo "  $t: finding inside libhdf5 ($(grep -m1 -oE 'ERROR: [A-Za-z]+: [a-z -]+' "$log")), input in $build/artifacts/" >&2
        [ -n "$n" ] || runs=$((runs + 1))
        continue
      fi
      result="FAILED (see $log)"
      status=1
      break
    fi
    break
  done
  printf "%-16s %10s %8s %7s %s\n" "$t" "$runs" "$(ls "$corpus" | wc -l)" "$upstream" "$result"
  [ "${GROW_CORPUS:-0}" = 1 ] || rm -rf "$corpus"
done
exit $status
